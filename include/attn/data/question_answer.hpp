// attn/data/question_answer.hpp: the finetuning data of the birth-place experiment, "question ⁇
// answer ⁇" padded with □, from a TSV of question/answer pairs; greedy answering and exact-match
// accuracy of a language model on them, and the accuracy the same answers would get by chance;
// how many of the questions' facts a pretrained model recalls in its corpus's own format. Does
// not read or write files (the example does) nor normalise answers: a prediction counts only when
// it equals the answer character for character.
#pragma once

#include <algorithm>
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

// ---- What pretraining stored: the questions' facts recalled in the corpus's own format ---------

// The person of a birth-place question: NAME in "Where was NAME born?" (the problem set's
// wording); empty for any other question.
inline std::string_view birth_question_subject(std::string_view question) {
  constexpr std::string_view head = "Where was ", tail = " born?";
  if (question.size() <= head.size() + tail.size() || !question.starts_with(head) ||
      !question.ends_with(tail))
    return {};
  return question.substr(head.size(), question.size() - head.size() - tail.size());
}

// A fact of the pretraining corpus as a span-corruption prompt. For a subject and an answer: the
// first document that starts with the subject, followed by a character that is not an ASCII
// letter or digit, and holds the answer's characters after the subject within its first
// L = min(|document|, ⌊7B/8⌋) characters (the most a pretraining example keeps of a document),
// and not a second time after them. The prompt masks the answer's first such occurrence:
//   prefix ⁇ suffix ⁇     (the model is to write the masked content, the answer, then □)
// with prefix and suffix the characters before and after it among the first L: the pretraining
// example of that truncation and masked span (SpanCorruption draws it when 2 |answer| < L). So the
// fact is asked in the format the model was trained on, with the context it was trained with;
// the suffix never holds the answer, which would let the model copy it. `document` is -1 and the
// prompt empty when no document states the fact so.
struct FactPrompt {
  index_t document = -1;
  std::vector<std::int32_t> prompt;
};

inline FactPrompt fact_prompt(const CharTokenizer& tok, const SpanCorruption& corpus,
                              std::span<const std::int32_t> subject,
                              std::span<const std::int32_t> answer) {
  ATTN_CHECK(!subject.empty() && !answer.empty(), value_error,
             "fact_prompt: the subject and the answer must be non-empty");
  const auto word_character = [&](std::int32_t id) {
    const std::string c = tok.decode(std::span(&id, 1));
    return c.size() == 1 && ((c[0] >= 'a' && c[0] <= 'z') || (c[0] >= 'A' && c[0] <= 'Z') ||
                             (c[0] >= '0' && c[0] <= '9'));
  };
  const std::size_t window = std::size_t(corpus.max_truncation());
  for (index_t d = 0; d < corpus.size(); ++d) {
    const std::span<const std::int32_t> doc = corpus.document(d);
    if (doc.size() <= subject.size() || !std::equal(subject.begin(), subject.end(), doc.begin()) ||
        word_character(doc[subject.size()]))
      continue;
    const std::span<const std::int32_t> seen = doc.first(std::min(doc.size(), window));
    const auto at = std::search(seen.begin() + std::ptrdiff_t(subject.size()), seen.end(),
                                answer.begin(), answer.end());
    if (at == seen.end() || 2 * answer.size() >= seen.size()) continue;
    const auto after = at + std::ptrdiff_t(answer.size());
    if (std::search(after, seen.end(), answer.begin(), answer.end()) != seen.end()) continue;
    FactPrompt f{d, std::vector<std::int32_t>(seen.begin(), at)};
    f.prompt.push_back(mask_id);
    f.prompt.insert(f.prompt.end(), after, seen.end());
    f.prompt.push_back(mask_id);
    return f;
  }
  return {};
}

// The model's completion of a span-corruption prompt: greedy decoding of `max_tokens` ids, fewer
// when it writes □ (not included) or the block is full; the decoded characters.
template <class Model>
std::string complete_span_greedily(Model& model, const CharTokenizer& tok,
                                   std::span<const std::int32_t> prompt, index_t max_tokens) {
  const index_t block = model.config().block_size;
  ATTN_CHECK(!prompt.empty() && index_t(prompt.size()) < block, value_error,
             "complete_span_greedily: the prompt takes ", prompt.size(),
             " ids; it must be non-empty and leave room in the block of ", block);
  ATTN_CHECK(max_tokens >= 1, value_error, "complete_span_greedily: max_tokens must be >= 1, got ",
             max_tokens);
  nn::SampleConfig c;
  c.temperature = 0;
  c.stop_token = pad_id;
  c.max_tokens = std::min(max_tokens, block - index_t(prompt.size()));
  std::vector<std::int32_t> out = nn::generate(model, prompt, c);
  if (!out.empty() && out.back() == pad_id) out.pop_back();
  return tok.decode(out);
}

// Whether a completion of a fact prompt recalls the answer: it begins with the answer, after at
// most one space. The loss never counts a PAD target (nor does the problem set's), so a pretrained
// model has never learnt to end a masked span: it writes the span and goes on with the text after
// it. And it has learnt that a span may begin with a space; one before the answer, where the
// prefix already ends with one, misplaces the span's boundary, not the fact.
inline bool recalls(std::string_view completion, std::string_view answer) {
  if (completion.starts_with(' ') && !answer.starts_with(' ')) completion.remove_prefix(1);
  return completion.starts_with(answer);
}

// How many of the facts that the questions of `data` ask a (pretrained) model writes out in the
// pretraining format: per question, its subject (`subject_of(question)`; empty: none), the
// fact_prompt of subject and answer in `corpus`, and the greedy completion of that prompt, |answer|
// + 1 characters, which recalls the fact when it begins with the answer (`recalls`).
// `completions` has one entry per question, "" where none was probed (`was_probed[i]` false).
// `progress(done, total)` as in evaluate_greedy.
struct FactRecall {
  index_t recalled = 0, probed = 0, total = 0;
  std::vector<std::string> completions;
  std::vector<bool> was_probed, was_recalled;
};

template <class Model>
FactRecall recall_facts(Model& model, const CharTokenizer& tok, const QADataset& data,
                        const SpanCorruption& corpus,
                        const std::function<std::string_view(std::string_view)>& subject_of,
                        const std::function<void(index_t, index_t)>& progress = {}) {
  FactRecall r;
  r.total = data.size();
  r.completions.assign(std::size_t(r.total), std::string());
  r.was_probed.assign(std::size_t(r.total), false);
  r.was_recalled.assign(std::size_t(r.total), false);
  for (index_t i = 0; i < data.size(); ++i) {
    const std::string_view subject = subject_of(data.pair(i).question);
    if (!subject.empty()) {
      const std::vector<std::int32_t> ids = tok.encode(subject);
      const std::span<const std::int32_t> answer = data.answer_ids(i);
      const FactPrompt f = fact_prompt(tok, corpus, ids, answer);
      if (f.document >= 0) {
        std::string& c = r.completions[std::size_t(i)];
        c = complete_span_greedily(model, tok, f.prompt, index_t(answer.size()) + 1);
        r.was_probed[std::size_t(i)] = true;
        ++r.probed;
        if (recalls(c, data.pair(i).answer)) {
          r.was_recalled[std::size_t(i)] = true;
          ++r.recalled;
        }
      }
    }
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

namespace detail {
// The permutation test of a count: (k + 1) / (shuffles + 1), where k of `shuffles` seeded random
// orders of `order` (shuffled in place, one after the other) give count() >= observed.
template <class Count>
double permutation_p(std::span<std::int32_t> order, index_t observed, index_t shuffles,
                     std::uint64_t seed, Count&& count) {
  Rng rng(seed);
  index_t at_least = 0;
  for (index_t s = 0; s < shuffles; ++s) {
    shuffle(order, rng);
    at_least += count() >= observed;
  }
  return double(at_least + 1) / double(shuffles + 1);
}
}  // namespace detail

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
  c.p_at_least = detail::permutation_p(guess, c.correct, shuffles, seed, matches);
  return c;
}

// The chance level of recall_facts' count: the completions of the probed questions dealt to the
// probed questions in a uniformly random order (a completion that begins with a frequent place
// recalls every person born there). With n probed questions, completions c_j and answers a_i,
//   expected = (1/n) Σ_j Σ_i recalls(c_j, a_i),
// and `p_at_least` the permutation test's p-value for the observed count, as in chance_level.
inline ChanceLevel recall_chance_level(const QADataset& data, const FactRecall& r,
                                       index_t shuffles = 10000, std::uint64_t seed = 1) {
  ATTN_CHECK(r.total == data.size() && index_t(r.completions.size()) == r.total &&
                 index_t(r.was_probed.size()) == r.total,
             shape_error, "recall_chance_level: a recall of ", r.total, " questions for ",
             data.size());
  ATTN_CHECK(shuffles >= 1, value_error, "recall_chance_level: shuffles must be >= 1, got ",
             shuffles);
  std::vector<index_t> probed;
  for (index_t i = 0; i < r.total; ++i)
    if (r.was_probed[std::size_t(i)]) probed.push_back(i);
  const std::size_t n = probed.size();
  std::vector<char> match(n * n);  // match[j * n + i]: completion j recalls answer i
  ChanceLevel c;
  c.shuffles = shuffles;
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t i = 0; i < n; ++i) {
      match[j * n + i] =
          recalls(r.completions[std::size_t(probed[j])], data.pair(probed[i]).answer);
      c.expected += match[j * n + i];
    }
  if (n == 0) return c;
  c.expected /= double(n);
  std::vector<std::int32_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = std::int32_t(i);
  const auto matches = [&] {
    index_t m = 0;
    for (std::size_t j = 0; j < n; ++j) m += match[j * n + std::size_t(order[j])];
    return m;
  };
  c.correct = matches();
  c.p_at_least = detail::permutation_p(order, c.correct, shuffles, seed, matches);
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
