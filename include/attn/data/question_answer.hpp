// attn/data/question_answer.hpp: the finetuning data of the birth-place experiment, "question ⁇
// answer ⁇" padded with □, from a TSV of question/answer pairs; greedy answering and exact-match
// accuracy of a language model on them, and the accuracy the same answers would get by chance. Does
// not read or write files (the example does) nor normalise answers: a prediction counts only when
// it equals the answer character for character.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../core/rng.hpp"
#include "../nn/generate.hpp"
#include "span_corruption.hpp"

namespace attn::data {

// One line "question<TAB>answer" of a TSV file.
struct QAPair {
  std::string question, answer;
};

// The finetuning examples. For question q and answer a (both non-empty) and block size B:
//   s = q ⁇ a ⁇ □…  (B + 1 characters)       input  x[i] = s[i]                  i < B
//                                            target y[i] = □ for i < |q| − 1, else s[i + 1]
// The target is PAD (ignored by the loss) while the input is still inside the question, so the
// model is trained to predict ⁇ after the question, then the answer, then ⁇ — not the question.
class QADataset {
 public:
  // Every non-empty line of `tsv` must be "question<TAB>answer" (a trailing '\r' is dropped), the
  // characters must be in `tok` (other than □ and ⁇), and |q| + |a| + 2 <= B + 1. `source` names
  // the data in error messages.
  QADataset(const CharTokenizer& tok, std::string_view tsv, index_t block, std::string_view source)
      : block_(block) {
    ATTN_CHECK(block >= 4, value_error, source, ": the block size must be >= 4, got ", block);
    ATTN_CHECK(
        tok.size() > mask_id && tok.id_of(pad_char) == pad_id && tok.id_of(mask_char) == mask_id,
        value_error, source, ": the vocabulary must start with PAD '", pad_char, "' and MASK '",
        mask_char, "' (use masked_vocabulary)");
    std::size_t begin = 0, line = 0;
    while (begin < tsv.size()) {
      ++line;
      std::size_t end = tsv.find('\n', begin);
      if (end == std::string_view::npos) end = tsv.size();
      std::string_view text = tsv.substr(begin, end - begin);
      begin = end + 1;
      if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
      if (text.empty()) continue;
      const std::size_t tab = text.find('\t');
      ATTN_CHECK(
          tab != std::string_view::npos && text.find('\t', tab + 1) == std::string_view::npos,
          value_error, source, ":", line, ": expected 'question<TAB>answer' (exactly one tab)");
      QAPair p{std::string(text.substr(0, tab)), std::string(text.substr(tab + 1))};
      ATTN_CHECK(!p.question.empty() && !p.answer.empty(), value_error, source, ":", line,
                 ": empty question or answer");
      std::vector<std::int32_t> q = encode(tok, p.question, source, line);
      std::vector<std::int32_t> a = encode(tok, p.answer, source, line);
      ATTN_CHECK(index_t(q.size() + a.size()) + 2 <= block + 1, value_error, source, ":", line,
                 ": question and answer take ", q.size() + a.size() + 2,
                 " characters with the two ⁇, more than the block size + 1 = ", block + 1);
      pairs_.push_back(std::move(p));
      questions_.push_back(std::move(q));
      answers_.push_back(std::move(a));
    }
    ATTN_CHECK(!pairs_.empty(), value_error, source, ": no question/answer pairs");
  }

  index_t size() const { return index_t(pairs_.size()); }
  index_t block() const { return block_; }
  const QAPair& pair(index_t i) const { return pairs_[std::size_t(checked(i))]; }
  std::span<const std::int32_t> question_ids(index_t i) const {
    return questions_[std::size_t(checked(i))];
  }
  std::span<const std::int32_t> answer_ids(index_t i) const {
    return answers_[std::size_t(checked(i))];
  }

  // The B + 1 ids "q ⁇ a ⁇ □…" of pair i.
  std::vector<std::int32_t> sequence(index_t i) const {
    const auto q = question_ids(i), a = answer_ids(i);
    std::vector<std::int32_t> s(q.begin(), q.end());
    s.push_back(mask_id);
    s.insert(s.end(), a.begin(), a.end());
    s.push_back(mask_id);
    s.resize(std::size_t(block_ + 1), pad_id);
    return s;
  }

  // Input and target of pair i (see the class comment) into spans of B ids each.
  void example(index_t i, std::span<std::int32_t> x, std::span<std::int32_t> y) const {
    ATTN_CHECK(index_t(x.size()) == block_ && index_t(y.size()) == block_, shape_error,
               "QADataset::example: x and y must hold ", block_, " ids, got ", x.size(), " and ",
               y.size());
    const std::vector<std::int32_t> s = sequence(i);
    const index_t question = index_t(question_ids(i).size());
    for (index_t t = 0; t < block_; ++t) {
      x[std::size_t(t)] = s[std::size_t(t)];
      y[std::size_t(t)] = t < question - 1 ? pad_id : s[std::size_t(t + 1)];
    }
  }

  // x, y [rows.size(), B]: row r is the example of pair rows[r].
  void batch(std::span<const index_t> rows, Tensor<std::int32_t>& x,
             Tensor<std::int32_t>& y) const {
    ATTN_CHECK(!rows.empty(), value_error, "QADataset::batch: no rows given");
    const index_t n = index_t(rows.size()), B = block_;
    x.resize(Shape{n, B});  // [N, B]
    y.resize(Shape{n, B});  // [N, B]
    for (index_t r = 0; r < n; ++r)
      example(rows[std::size_t(r)], std::span(x.data() + r * B, std::size_t(B)),
              std::span(y.data() + r * B, std::size_t(B)));
  }

 private:
  index_t checked(index_t i) const {
    ATTN_CHECK(i >= 0 && i < size(), value_error, "QADataset: pair ", i, " outside [0, ", size(),
               ")");
    return i;
  }

  static std::vector<std::int32_t> encode(const CharTokenizer& tok, std::string_view text,
                                          std::string_view source, std::size_t line) {
    std::vector<std::int32_t> ids;
    try {
      ids = tok.encode(text);
    } catch (const value_error& e) {
      throw value_error(std::string(source) + ":" + std::to_string(line) + ": " + e.what());
    }
    for (std::int32_t id : ids)
      ATTN_CHECK(id != pad_id && id != mask_id, value_error, source, ":", line,
                 ": contains the PAD or MASK character");
    return ids;
  }

  index_t block_;
  std::vector<QAPair> pairs_;
  std::vector<std::vector<std::int32_t>> questions_, answers_;
};

// The model's answer to `question`: greedy decoding of "question ⁇" until it writes the next ⁇
// (not included) or the block is full; the decoded characters in between.
template <class Model>
std::string answer_greedily(Model& model, const CharTokenizer& tok,
                            std::span<const std::int32_t> question) {
  const index_t block = model.config().block_size;
  ATTN_CHECK(!question.empty() && index_t(question.size()) + 1 < block, value_error,
             "answer_greedily: the question takes ", question.size(),
             " characters; it must be non-empty and leave room in the block of ", block);
  std::vector<std::int32_t> prompt(question.begin(), question.end());
  prompt.push_back(mask_id);
  nn::SampleConfig c;
  c.temperature = 0;  // greedy: the most likely character each time
  c.stop_token = mask_id;
  c.max_tokens = block - index_t(prompt.size());  // positions stay inside the block
  std::vector<std::int32_t> out = nn::generate(model, prompt, c);
  if (!out.empty() && out.back() == mask_id) out.pop_back();
  return tok.decode(out);
}

// Exact-match accuracy over a QA file, with the prediction for every question in file order.
struct QAEvaluation {
  index_t correct = 0, total = 0;
  std::vector<std::string> predictions;
  double accuracy() const { return total > 0 ? double(correct) / double(total) : 0.0; }
};

// Answers every question of `data` greedily (answer_greedily) and counts exact matches.
// `progress(done, total)`, when given, is called after each question.
template <class Model>
QAEvaluation evaluate_greedy(Model& model, const CharTokenizer& tok, const QADataset& data,
                             const std::function<void(index_t, index_t)>& progress = {}) {
  QAEvaluation r;
  r.total = data.size();
  r.predictions.reserve(std::size_t(r.total));
  for (index_t i = 0; i < data.size(); ++i) {
    r.predictions.push_back(answer_greedily(model, tok, data.question_ids(i)));
    if (r.predictions.back() == data.pair(i).answer) ++r.correct;
    if (progress) progress(i + 1, r.total);
  }
  return r;
}

// Exact-match accuracy of answering `answer` to every question (the "London" baseline).
inline QAEvaluation evaluate_constant(const QADataset& data, const std::string& answer) {
  QAEvaluation r;
  r.total = data.size();
  r.predictions.assign(std::size_t(r.total), answer);
  for (index_t i = 0; i < data.size(); ++i)
    if (data.pair(i).answer == answer) ++r.correct;
  return r;
}

// How many right answers the same answers would get if they ignored the questions. Deal the
// predictions to the questions of `data` in a uniformly random order: a prediction p lands on a
// question whose answer is p with probability share(p) = #{i : answer_i = p} / n, so
//   expected = Σ_j share(prediction_j),
// the mean number of exact matches of such an order. A constant answer ("London") scores exactly
// its expectation; a model that retrieves facts scores clearly above it. `p_at_least` is the
// permutation test's p-value for the observed count `correct`: (k + 1) / (shuffles + 1), where k
// of `shuffles` seeded random orders get at least `correct` right (a Monte Carlo estimate,
// within about √(p (1 − p) / shuffles) of the exact fraction of all n! orders; never 0).
struct ChanceLevel {
  index_t correct = 0;      // exact matches in the given order
  double expected = 0.0;    // mean exact matches over all orders
  double p_at_least = 1.0;  // share of random orders with >= correct matches
  index_t shuffles = 0;
};

inline ChanceLevel chance_level(const QADataset& data, std::span<const std::string> predictions,
                                index_t shuffles = 10000, std::uint64_t seed = 1) {
  const index_t n = data.size();
  ATTN_CHECK(index_t(predictions.size()) == n, shape_error, "chance_level: ", predictions.size(),
             " predictions for ", n, " questions");
  ATTN_CHECK(shuffles >= 1, value_error, "chance_level: shuffles must be >= 1, got ", shuffles);
  // Answers as small integers; a prediction that is nobody's answer gets -1 and never matches.
  std::unordered_map<std::string_view, std::int32_t> id;
  std::vector<std::int32_t> answer(static_cast<std::size_t>(n)), guess(answer.size());
  std::vector<index_t> count;
  for (index_t i = 0; i < n; ++i) {
    const auto [it, added] = id.try_emplace(data.pair(i).answer, std::int32_t(count.size()));
    if (added) count.push_back(0);
    answer[std::size_t(i)] = it->second;
    ++count[std::size_t(it->second)];
  }
  ChanceLevel c;
  c.shuffles = shuffles;
  for (index_t j = 0; j < n; ++j) {
    const auto it = id.find(predictions[std::size_t(j)]);
    guess[std::size_t(j)] = it == id.end() ? -1 : it->second;
    if (guess[std::size_t(j)] >= 0)
      c.expected += double(count[std::size_t(guess[std::size_t(j)])]) / double(n);
  }
  const auto matches = [&] {
    index_t m = 0;
    for (std::size_t i = 0; i < answer.size(); ++i) m += answer[i] == guess[i];
    return m;
  };
  c.correct = matches();
  Rng rng(seed);
  index_t at_least = 0;
  for (index_t s = 0; s < shuffles; ++s) {
    shuffle(std::span<std::int32_t>(guess), rng);
    at_least += matches() >= c.correct;
  }
  c.p_at_least = double(at_least + 1) / double(shuffles + 1);
  return c;
}

// A predictions file: one line per question, the prediction with '\\', '\n', '\r' and '\t'
// written as the two characters \\, \n, \r, \t, so that every prediction stays on its line.
inline std::string predictions_text(std::span<const std::string> predictions) {
  std::string out;
  for (const std::string& p : predictions) {
    for (char ch : p) {
      const char* escaped = ch == '\\'   ? "\\\\"
                            : ch == '\n' ? "\\n"
                            : ch == '\r' ? "\\r"
                            : ch == '\t' ? "\\t"
                                         : nullptr;
      if (escaped != nullptr)
        out += escaped;
      else
        out += ch;
    }
    out += '\n';
  }
  return out;
}

}  // namespace attn::data
