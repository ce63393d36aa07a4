// The birth-place data (XCS224N ps5): the PAD/MASK vocabulary, span corruption (lengths, ids,
// reachable truncations, the 1/4 masked fraction), the QA examples and their targets, greedy
// answering and exact match, and the predictions file; on small strings and on the real files.
#include <doctest/doctest.h>

#include <attn/attn.hpp>
#include <attn/io/atomic_file.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "../test_util.hpp"

using attn::index_t;
using attn::Tensor;
using attn::data::CharTokenizer;
using attn::data::mask_id;
using attn::data::pad_id;
using attn::data::QADataset;
using attn::data::SpanCorruption;
using attn::data::SpanCut;
namespace nn = attn::nn;

namespace {

std::string repo_file(const std::string& name) {
  const auto bytes =
      attn::io::read_file(std::filesystem::path(ATTN_TESTS_SOURCE_DIR) / ".." / "data" / name);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::vector<std::int32_t> ids_of(const CharTokenizer& tok, const std::string& s) {
  return tok.encode(s);
}

}  // namespace

TEST_CASE("masked_vocabulary: PAD = 0, MASK = 1, then the corpus's code points in order") {
  const CharTokenizer tok = attn::data::masked_vocabulary("b\na é✓b");
  CHECK(tok.size() == 8);  // □ ⁇ \n space a b é ✓
  CHECK(tok.vocabulary() == "□⁇\n abé✓");
  CHECK(tok.id_of("□") == pad_id);
  CHECK(tok.id_of("⁇") == mask_id);
  CHECK(tok.id_of("\n") == 2);
  CHECK(tok.id_of("é") == 6);
  CHECK(tok.decode(tok.encode("é✓ab")) == "é✓ab");
  CHECK(attn::test::message_of([] {
          attn::data::masked_vocabulary("a□");
        }).find("contains the PAD (U+25A1) or MASK (U+2047)") != std::string::npos);
  CHECK(attn::test::message_of([] { attn::data::masked_vocabulary("a⁇"); }) != "");
}

TEST_CASE("masked_vocabulary of data/wiki.txt covers the QA files") {
  const std::string wiki = repo_file("wiki.txt");
  const CharTokenizer tok = attn::data::masked_vocabulary(wiki);
  const CharTokenizer plain = CharTokenizer::from_corpus(wiki);
  CHECK(tok.size() == plain.size() + 2);
  CHECK(tok.vocabulary().substr(0, 6) == "□⁇");  // two 3-byte code points
  CHECK(tok.vocabulary().substr(6) == plain.vocabulary());
  const SpanCorruption docs(tok, wiki, 128);
  CHECK(docs.size() == 2937);  // the non-empty lines
  // Every character of the QA files is in the pretraining vocabulary (multi-byte ones included).
  const QADataset train(tok, repo_file("birth_places_train.tsv"), 128, "birth_places_train.tsv");
  const QADataset dev(tok, repo_file("birth_dev.tsv"), 128, "birth_dev.tsv");
  CHECK(train.size() == 2000);
  CHECK(dev.size() == 500);
  // The "London" baseline of the problem set: 25 of the 500 dev answers are London.
  const auto london = attn::data::evaluate_constant(dev, "London");
  CHECK(london.correct == 25);
  CHECK(london.total == 500);
  CHECK(london.accuracy() == doctest::Approx(0.05));
  CHECK(london.predictions.size() == 500);
}

TEST_CASE("span corruption: prefix ⁇ suffix ⁇ masked □…, x and y shifted by one") {
  // One document of 40 code points, half of them two-byte (lengths count code points, not bytes).
  std::string doc;
  for (int i = 0; i < 20; ++i) doc += i % 2 ? "é" : "ab";
  const std::string corpus = "\n" + doc + "\n\nxyz\n";
  const CharTokenizer tok = attn::data::masked_vocabulary(corpus);
  const index_t B = 32;
  const SpanCorruption data(tok, corpus, B);
  REQUIRE(data.size() == 2);  // empty lines are not documents
  const auto d0 = data.document(0);
  REQUIRE(d0.size() == 30);
  CHECK(data.document(1).size() == 3);
  CHECK(data.max_truncation() == 28);

  attn::Rng rng(5);
  std::vector<std::int32_t> x(static_cast<std::size_t>(B)), y(static_cast<std::size_t>(B));
  for (int trial = 0; trial < 2000; ++trial) {
    const index_t d = trial % 2;
    attn::Rng copy = rng;
    const SpanCut c = data.example(d, rng, x, y);
    const auto doc_ids = data.document(d);
    const index_t L = c.truncated;
    if (doc_ids.size() >= 4) {
      CHECK(L >= 4);
      CHECK(L <= std::min<index_t>(index_t(doc_ids.size()), data.max_truncation()));
    } else {
      CHECK(L == index_t(doc_ids.size()));  // a short document is used whole
    }
    CHECK(c.prefix >= 0);
    CHECK(c.prefix + c.masked <= L);
    if (L >= 4) {
      CHECK(c.masked >= 1);
      CHECK(2 * c.masked < L);
    }
    // The same draws give the same cut (draw_cut is what example used).
    CHECK(data.draw_cut(d, copy).prefix == c.prefix);
    const std::vector<std::int32_t> s = data.masked_string(d, c);
    REQUIRE(s.size() == std::size_t(B + 1));
    for (index_t i = 0; i < B; ++i) {
      CHECK(x[std::size_t(i)] == s[std::size_t(i)]);
      CHECK(y[std::size_t(i)] == s[std::size_t(i + 1)]);
    }
    // Layout: prefix ⁇ suffix ⁇ masked, then only PAD; exactly two MASKs.
    std::vector<std::int32_t> expect(doc_ids.begin(), doc_ids.begin() + c.prefix);
    expect.push_back(mask_id);
    expect.insert(expect.end(), doc_ids.begin() + c.prefix + c.masked, doc_ids.begin() + L);
    expect.push_back(mask_id);
    expect.insert(expect.end(), doc_ids.begin() + c.prefix, doc_ids.begin() + c.prefix + c.masked);
    expect.resize(std::size_t(B + 1), pad_id);
    CHECK(s == expect);
    CHECK(std::count(s.begin(), s.end(), mask_id) == 2);
    CHECK(std::count(s.begin(), s.end(), pad_id) == B + 1 - (L + 2));
  }
}

TEST_CASE("span corruption: every truncation length is reachable, masked fraction 1/4") {
  std::string doc;
  for (int i = 0; i < 300; ++i) doc += char('a' + i % 26);
  const CharTokenizer tok = attn::data::masked_vocabulary(doc);
  const index_t B = 128;
  const SpanCorruption data(tok, doc, B);
  attn::Rng rng(11);
  std::map<index_t, std::pair<double, int>> masked_by_length;  // L -> (Σ m, count)
  std::set<index_t> masked_values;
  double fraction = 0;
  int above = 0, below = 0;
  const int n = 60000;
  for (int i = 0; i < n; ++i) {
    const SpanCut c = data.draw_cut(0, rng);
    auto& [sum, count] = masked_by_length[c.truncated];
    sum += double(c.masked);
    ++count;
    fraction += double(c.masked) / double(c.truncated);
    above += 4 * c.masked > c.truncated;
    below += 4 * c.masked < c.truncated;
    if (c.truncated == 112) masked_values.insert(c.masked);
  }
  // Lengths 4 .. ⌊7·128/8⌋ = 112, every one of them, and no other.
  CHECK(masked_by_length.size() == 109);
  CHECK(masked_by_length.begin()->first == 4);
  CHECK(masked_by_length.rbegin()->first == 112);
  // The masked fraction is 1/4 on average over many samples: the standard error of the mean of
  // m/L (spread <= ~0.15) over 60000 draws is ~6e-4.
  CHECK(fraction / n == doctest::Approx(0.25).epsilon(0.01));
  // ... and at each length separately (≈ 550 draws each; m/L spread ~0.13, so ~±0.017 in L/4
  // units at 3 standard errors; L = 4 has m = 1 exactly).
  for (const auto& [L, acc] : masked_by_length) {
    const double mean = acc.first / acc.second;
    CHECK_MESSAGE(std::abs(mean - double(L) / 4) <= 0.03 * double(L) + 0.01, "L = ", L);
  }
  // Random: sometimes more and sometimes less than L/4, over the whole range 1 .. L/2 − 1.
  CHECK(above > n / 4);
  CHECK(below > n / 4);
  CHECK(*masked_values.begin() == 1);
  CHECK(*masked_values.rbegin() == 55);
  CHECK(masked_values.size() == 55);
}

TEST_CASE("span corruption: batches are seeded, rows independent of each other") {
  const std::string corpus = "the first document is here\nsecond one, a bit longer than that\nc3";
  const CharTokenizer tok = attn::data::masked_vocabulary(corpus);
  const SpanCorruption data(tok, corpus, 16);
  Tensor<std::int32_t> x1, y1, x2, y2;
  attn::Rng a(3), b(3);
  const std::vector<index_t> docs{0, 1, 2, 1};
  data.batch(docs, a, x1, y1);
  data.batch(docs, b, x2, y2);
  CHECK(x1.shape() == attn::Shape{4, 16});
  CHECK(std::equal(x1.begin(), x1.end(), x2.begin()));
  CHECK(std::equal(y1.begin(), y1.end(), y2.begin()));
  // The third row is the short document "c3" whole: c3 → prefix/suffix/masked of 2 characters.
  int masks = 0;
  for (index_t i = 0; i < 16; ++i) masks += x1[2 * 16 + i] == mask_id;
  CHECK(masks == 2);
  // Row i draws from its own sub-generator: a batch of {0} then {…} equals the first row.
  Tensor<std::int32_t> x3, y3;
  attn::Rng c(3);
  data.batch(std::vector<index_t>{0}, c, x3, y3);
  CHECK(std::equal(x3.begin(), x3.end(), x1.begin()));

  const auto order = attn::data::shuffled_indices(10, a);
  std::vector<index_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (index_t i = 0; i < 10; ++i) CHECK(sorted[std::size_t(i)] == i);

  CHECK(attn::test::message_of([&] { SpanCorruption(tok, corpus, 4); }).find("block size") !=
        std::string::npos);
  CHECK(attn::test::message_of([&] { SpanCorruption(tok, "\n\n", 16); }).find("no documents") !=
        std::string::npos);
  CHECK(attn::test::message_of([&] {
          SpanCorruption(CharTokenizer::from_corpus(corpus), corpus, 16);
        }).find("must start with PAD") != std::string::npos);
  CHECK(attn::test::message_of([&] { data.document(3); }).find("document 3 outside [0, 3)") !=
        std::string::npos);
  CHECK(attn::test::message_of([&] {
          data.masked_string(2, SpanCut{3, 0, 1});
        }).find("does not fit document 2") != std::string::npos);
}

TEST_CASE("QA examples: q ⁇ a ⁇ □…, targets PAD over the question, then the shifted sequence") {
  const std::string corpus = "Where was Zoë born?\tLondonParisAl";
  const CharTokenizer tok = attn::data::masked_vocabulary(corpus);
  const index_t B = 32;
  const QADataset data(tok, "Where was Zoë born?\tParis\r\n\nWhere was Al born?\tLondon\n", B,
                       "tiny.tsv");
  REQUIRE(data.size() == 2);
  CHECK(data.pair(0).question == "Where was Zoë born?");
  CHECK(data.pair(0).answer == "Paris");  // the '\r' of a CRLF line is dropped
  CHECK(data.pair(1).answer == "London");

  const auto q = ids_of(tok, "Where was Zoë born?");
  const auto a = ids_of(tok, "Paris");
  REQUIRE(q.size() == 19);  // ë is one character
  std::vector<std::int32_t> s = q;
  s.push_back(mask_id);
  s.insert(s.end(), a.begin(), a.end());
  s.push_back(mask_id);
  s.resize(std::size_t(B + 1), pad_id);
  CHECK(data.sequence(0) == s);

  Tensor<std::int32_t> x, y;
  data.batch(std::vector<index_t>{1, 0}, x, y);
  CHECK(x.shape() == attn::Shape{2, B});
  const std::int32_t* x0 = x.data() + B;  // row 1 = pair 0
  const std::int32_t* y0 = y.data() + B;
  for (index_t t = 0; t < B; ++t) {
    CHECK(x0[t] == s[std::size_t(t)]);
    if (t < 18)
      CHECK(y0[t] == pad_id);  // inside the question: not trained
    else
      CHECK(y0[t] == s[std::size_t(t + 1)]);
  }
  CHECK(y0[18] == mask_id);         // after the question's last character: ⁇
  CHECK(y0[19] == tok.id_of("P"));  // then the answer
  CHECK(y0[23] == tok.id_of("s"));
  CHECK(y0[24] == mask_id);  // and the closing ⁇
  CHECK(y0[25] == pad_id);   // padding: ignored by the loss
  CHECK(std::count(y0, y0 + B, pad_id) == 18 + (B - 25));

  // Errors name the file and the line.
  const auto error = [&](const std::string& tsv) {
    return attn::test::message_of([&] { QADataset(tok, tsv, B, "f.tsv"); });
  };
  CHECK(error("Where was Al born?London\n") ==
        "f.tsv:1: expected 'question<TAB>answer' (exactly one tab)");
  CHECK(error("Where\tAl\tLondon\n").find("exactly one tab") != std::string::npos);
  CHECK(error("\nWhere was Al born?\t\n") == "f.tsv:2: empty question or answer");
  CHECK(
      error("Where was Xi born?\tParis\n").find("f.tsv:1: CharTokenizer::encode: character 'X'") !=
      std::string::npos);
  CHECK(error("Where was Al born?\t⁇\n") == "f.tsv:1: contains the PAD or MASK character");
  CHECK(error("Where was Al born? Where was Al born?\tParis\n").find("more than the block size") !=
        std::string::npos);
  CHECK(error("\n\n").find("no question/answer pairs") != std::string::npos);
}

namespace {

// A stand-in language model for the decoding logic: at every position it puts the largest logit
// on the next id of a script, whatever the input; config().block_size bounds the positions.
struct ScriptedModel {
  using T = float;
  std::vector<std::int32_t> script;
  index_t vocab = 0;
  nn::GPTConfig cfg;
  std::size_t next = 0;
  std::vector<index_t> prompt_lengths;
  bool training_flag = true;

  const nn::GPTConfig& config() const { return cfg; }
  bool training() const { return training_flag; }
  void set_training(bool on) { training_flag = on; }
  std::vector<attn::KVCache<T>> make_caches() const { return std::vector<attn::KVCache<T>>(1); }
  attn::Var<T> decode(attn::Tape<T>& tape, const Tensor<std::int32_t>& ids,
                      std::vector<attn::KVCache<T>>&) {
    const index_t t = ids.shape()[1];
    prompt_lengths.push_back(t);
    auto logits = Tensor<T>::zeros({1, t, vocab});
    logits[(t - 1) * vocab + script[next++ % script.size()]] = 1;
    return tape.leaf(std::move(logits));
  }
  attn::Var<T> operator()(attn::Tape<T>& tape, const Tensor<std::int32_t>& ids) {
    std::vector<attn::KVCache<T>> c;
    return decode(tape, ids, c);
  }
};

}  // namespace

TEST_CASE("greedy answers stop at the next ⁇; exact match; predictions file") {
  const CharTokenizer tok = attn::data::masked_vocabulary("Where was Al born?\tParisLondon\\\n");
  const QADataset data(tok, "Where was Al born?\tParis\nWhere was Al born?\tLondon\n", 40, "t");
  ScriptedModel m;
  m.vocab = tok.size();
  m.cfg.block_size = 40;
  for (std::int32_t id : ids_of(tok, "Paris")) m.script.push_back(id);
  m.script.push_back(mask_id);  // then the script starts again for the next question
  const auto r = attn::data::evaluate_greedy(m, tok, data);
  CHECK(r.total == 2);
  CHECK(r.correct == 1);  // "Paris" twice: the first answer is right, the second wrong
  CHECK(r.accuracy() == 0.5);
  CHECK(r.predictions == std::vector<std::string>{"Paris", "Paris"});
  // With the cache, the prompt "Where was Al born?⁇" goes in whole, then one id at a time.
  CHECK(m.prompt_lengths == std::vector<index_t>{19, 1, 1, 1, 1, 1, 19, 1, 1, 1, 1, 1});
  CHECK(m.training_flag);  // evaluation restored the training flag

  // Without a ⁇ the answer runs to the end of the block: 40 − 19 characters.
  ScriptedModel endless = m;
  endless.script = {tok.id_of("a")};
  CHECK(attn::data::answer_greedily(endless, tok, data.question_ids(0)) == std::string(21, 'a'));

  const std::vector<std::string> preds{"Paris", "New\nYork", "a\\b\tc", ""};
  CHECK(attn::data::predictions_text(preds) == "Paris\nNew\\nYork\na\\\\b\\tc\n\n");
}

TEST_CASE("the QA loss ignores PAD targets") {
  const std::string corpus = "Where was Al born?\tParis";
  const CharTokenizer tok = attn::data::masked_vocabulary(corpus);
  const QADataset data(tok, "Where was Al born?\tParis\n", 32, "t");
  using Attn =
      attn::MultiHeadAttention<attn::score::ScaledDot, attn::kernel::Softmax, attn::mask::Causal,
                               attn::Heads<attn::dynamic>, attn::projection::Separate, float>;
  nn::GPTConfig c;
  c.vocab_size = tok.size();
  c.block_size = 32;
  c.layers = 1;
  c.heads = 2;
  c.d_model = 16;
  c.seed = 1;
  nn::GPT<Attn> model(c);
  model.set_training(false);
  Tensor<std::int32_t> x, y;
  data.batch(std::vector<index_t>{0}, x, y);
  attn::Tape<float> tape;
  const auto logits = model(tape, x);  // [1, 32, V]
  const float loss = attn::cross_entropy(logits, y, pad_id).item();
  // By hand: the mean of −log softmax over the 7 positions whose target is not PAD (⁇ Paris ⁇).
  const index_t V = tok.size();
  double total = 0;
  int count = 0;
  for (index_t t = 0; t < 32; ++t) {
    if (y[t] == pad_id) continue;
    const float* row = logits.value().data() + t * V;
    double mx = row[0], z = 0;
    for (index_t v = 0; v < V; ++v) mx = std::max<double>(mx, row[v]);
    for (index_t v = 0; v < V; ++v) z += std::exp(double(row[v]) - mx);
    total += mx + std::log(z) - double(row[y[t]]);
    ++count;
  }
  CHECK(count == 7);
  CHECK(loss == doctest::Approx(total / count).epsilon(1e-5));
}
