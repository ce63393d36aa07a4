// The birth-place data (XCS224N ps5): the PAD/MASK vocabulary, span corruption (lengths, ids,
// reachable truncations, the 1/4 masked fraction), the QA examples and their targets, greedy
// answering and exact match, the predictions file, and the recall of the questions' facts in the
// pretraining format; on small strings and on the real files.
#include <doctest/doctest.h>

#include <attn/attn.hpp>
#include <attn/data/data.hpp>
#include <attn/data/question_answer.hpp>
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
  for (const auto& [length, acc] : masked_by_length) {
    const double L = double(length);  // a copy: clang 14 cannot capture a structured binding
    const double mean = acc.first / acc.second;
    CHECK_MESSAGE(std::abs(mean - L / 4) <= 0.03 * L + 0.01, "L = ", L);
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

TEST_CASE("fact_prompt: the document that states a subject's fact, the answer masked in it") {
  const std::string corpus =
      "Al Bo. Al Bo was born in Paris, France.\n"  // 0: 39 characters
      "Al Boz. Al Boz was born in Rome.\n"         // 1: "Al Bo" followed by a letter
      "Cy. Cy left Oslo for Oslo.\n"               // 2: the answer twice after "Cy"
      "Di. Di was born in Lima.\n"                 // 3: "Lima" ends at character 23
      "Ed, Constantinople.\n";                     // 4: a masked span that long is never drawn
  const CharTokenizer tok = attn::data::masked_vocabulary(corpus);
  const SpanCorruption docs(tok, corpus, 40);  // ⌊7 · 40 / 8⌋ = 35 characters seen of a document
  const auto prompt = [&](const std::string& subject, const std::string& answer,
                          const SpanCorruption& c) {
    return attn::data::fact_prompt(tok, c, ids_of(tok, subject), ids_of(tok, answer));
  };
  const auto masked = [&](const std::string& prefix, const std::string& suffix) {
    std::vector<std::int32_t> ids = ids_of(tok, prefix);
    ids.push_back(mask_id);
    for (std::int32_t id : ids_of(tok, suffix)) ids.push_back(id);
    ids.push_back(mask_id);
    return ids;
  };

  auto f = prompt("Al Bo", "Paris", docs);
  CHECK(f.document == 0);
  CHECK(f.prompt == masked("Al Bo. Al Bo was born in ", ", Fra"));  // the first 35 characters
  CHECK(prompt("Al Bo", "Rome", docs).document == -1);              // "Al Boz" is someone else
  f = prompt("Al Boz", "Rome", docs);
  CHECK(f.document == 1);
  CHECK(f.prompt == masked("Al Boz. Al Boz was born in ", "."));
  CHECK(prompt("Cy", "Oslo", docs).document == -1);  // the suffix would give the answer away
  f = prompt("Cy", "Cy", docs);                      // after the subject, not in it
  CHECK(f.document == 2);
  CHECK(f.prompt == masked("Cy. ", " left Oslo for Oslo."));
  CHECK(prompt("Di", "Lima", docs).prompt == masked("Di. Di was born in ", "."));
  const SpanCorruption short_blocks(tok, corpus, 16);  // 14 characters seen: Lima is beyond them
  CHECK(prompt("Di", "Lima", short_blocks).document == -1);
  CHECK(prompt("Al Bo", "Paris", short_blocks).document == -1);
  CHECK(prompt("Ed", "Constantinople", docs).document == -1);  // 2 · 14 >= 19
  CHECK(prompt("Ed", "C", docs).prompt == masked("Ed, ", "onstantinople."));
  CHECK(prompt("Fa", "Paris", docs).document == -1);  // nobody's document
  CHECK(attn::test::message_of([&] { prompt("", "Paris", docs); }) ==
        "fact_prompt: the subject and the answer must be non-empty");

  CHECK(attn::data::birth_question_subject("Where was Al Bo born?") == "Al Bo");
  CHECK(attn::data::birth_question_subject("Where was born?").empty());
  CHECK(attn::data::birth_question_subject("Where is Al Bo?").empty());
  CHECK(attn::data::birth_question_subject("Where was Al Bo born").empty());
}

TEST_CASE("recall_facts: each question's fact prompt completed greedily up to □, exact match") {
  const std::string corpus = "Al Bo. Al Bo was born in Paris.\nCy. Cy was born in Oslo.\n";
  const CharTokenizer tok = attn::data::masked_vocabulary(corpus + "Where was Zed born?\tRome");
  const SpanCorruption docs(tok, corpus, 40);
  const QADataset data(
      tok, "Where was Al Bo born?\tParis\nWhere was Cy born?\tOslo\nWhere was Zed born?\tRome\n",
      40, "t");
  ScriptedModel m;
  m.vocab = tok.size();
  m.cfg.block_size = 40;
  for (std::int32_t id : ids_of(tok, "Paris")) m.script.push_back(id);
  m.script.push_back(pad_id);  // then the script starts again for the next prompt
  const auto r = attn::data::recall_facts(m, tok, data, docs, attn::data::birth_question_subject);
  CHECK(r.total == 3);
  CHECK(r.probed == 2);    // nobody's document names Zed
  CHECK(r.recalled == 1);  // "Paris" twice: right for Al Bo, wrong for Cy
  CHECK(r.completions == std::vector<std::string>{"Paris", "Paris", ""});
  CHECK(r.was_probed == std::vector<bool>{true, true, false});
  CHECK(r.was_recalled == std::vector<bool>{true, false, false});
  // "Al Bo. Al Bo was born in ⁇.⁇" (28 ids) goes in whole, then one id at a time, |Paris| + 1
  // ids at most (the script's □ ends it); then Cy's 22 and |Oslo| + 1 ids.
  CHECK(m.prompt_lengths == std::vector<index_t>{28, 1, 1, 1, 1, 1, 22, 1, 1, 1, 1});
  CHECK(m.training_flag);

  // Without a □ a completion runs for max_tokens, or to the end of the block: 40 − 28 ids.
  ScriptedModel endless = m;
  endless.script = {tok.id_of("a")};
  const auto f = attn::data::fact_prompt(tok, docs, ids_of(tok, "Al Bo"), ids_of(tok, "Paris"));
  CHECK(attn::data::complete_span_greedily(endless, tok, f.prompt, 3) == "aaa");
  CHECK(attn::data::complete_span_greedily(endless, tok, f.prompt, 100) == std::string(12, 'a'));
  CHECK(attn::test::message_of([&] {
          attn::data::complete_span_greedily(endless, tok, f.prompt, 0);
        }).find("max_tokens must be >= 1") != std::string::npos);

  // A completion recalls the answer when it begins with it, after at most one space.
  CHECK(attn::data::recalls("Paris", "Paris"));
  CHECK(attn::data::recalls(" Paris, Fr", "Paris"));
  CHECK(attn::data::recalls("Parisi", "Paris"));  // the model goes on with the text after the span
  CHECK_FALSE(attn::data::recalls("  Paris", "Paris"));
  CHECK_FALSE(attn::data::recalls("Pari", "Paris"));
  CHECK_FALSE(attn::data::recalls(" Oslo.", "Paris"));
}

TEST_CASE("recall_chance_level: the completions dealt to the probed questions at random") {
  const CharTokenizer tok = attn::data::masked_vocabulary("Where was ABCD born?\tParisOslo. ");
  const QADataset data(tok,
                       "Where was A born?\tParis\nWhere was B born?\tOslo\nWhere was C "
                       "born?\tParis\nWhere was D born?\tOslo\n",
                       40, "t");
  attn::data::FactRecall r;
  r.total = 4;
  r.completions = {"Paris.", "Paris.", "Oslo. ", ""};
  r.was_probed = {true, true, true, false};  // D is left out of the dealing
  r.was_recalled = {true, false, false, false};
  r.probed = 3;
  r.recalled = 1;
  // Completions 0 and 1 recall answers 0 and 2, completion 2 answer 1: 5 of 9 pairs, so 5/3 on
  // average; every one of the 6 orders gets at least the 1 of the given order (1 or 3).
  const auto c = attn::data::recall_chance_level(data, r, 2000);
  CHECK(c.correct == 1);
  CHECK(c.expected == doctest::Approx(5.0 / 3.0));
  CHECK(c.p_at_least == 1.0);
  r.completions = {"Paris.", "Oslo. ", "Oslo. ", ""};  // 2 right, 4 of 9 pairs
  const auto d = attn::data::recall_chance_level(data, r, 20000);
  CHECK(d.correct == 2);
  CHECK(d.expected == doctest::Approx(4.0 / 3.0));
  // Orders with 2 right (none has 3): completion 0 on answer 0 or 2 and one of the Oslos on
  // answer 1, 4 of the 6.
  CHECK(d.p_at_least == doctest::Approx(4.0 / 6.0).epsilon(0.03));
  r.total = 3;
  CHECK(attn::test::message_of([&] {
          attn::data::recall_chance_level(data, r);
        }).find("recall_chance_level: a recall of 3 questions for 4") == 0);
}

TEST_CASE("chance_level: mean matches over all orders of the answers, permutation p-value") {
  const CharTokenizer tok = attn::data::masked_vocabulary("Where was born?\tABCDZ");
  const QADataset data(tok,
                       "Where was A born?\tA\nWhere was B born?\tA\nWhere was C born?\tB\n"
                       "Where was D born?\tC\n",
                       40, "t");
  // One right answer in this order (the first); "Z" is nobody's answer.
  const std::vector<std::string> preds{"A", "B", "A", "Z"};
  const attn::data::ChanceLevel c = attn::data::chance_level(data, preds, 100000, 7);
  CHECK(c.correct == 1);
  CHECK(c.expected == doctest::Approx(0.5 + 0.25 + 0.5 + 0.0));
  CHECK(c.shuffles == 100000);

  // Enumerate all 4! orders: their mean is `expected`, their share with >= 1 match is the exact p.
  std::vector<std::size_t> order{0, 1, 2, 3};
  int orders = 0, at_least = 0, total = 0;
  do {
    int m = 0;
    for (std::size_t i = 0; i < 4; ++i) m += preds[order[i]] == data.pair(index_t(i)).answer;
    ++orders;
    total += m;
    at_least += m >= 1;
  } while (std::next_permutation(order.begin(), order.end()));
  CHECK(orders == 24);
  CHECK(double(total) / orders == doctest::Approx(c.expected).epsilon(1e-12));
  CHECK(c.p_at_least == doctest::Approx(double(at_least) / orders).epsilon(0.02));
  CHECK(at_least < orders);  // so the test above could fail: p is not trivially 1

  // A constant answer scores exactly its expectation, and every order does as well.
  const attn::data::ChanceLevel a =
      attn::data::chance_level(data, attn::data::evaluate_constant(data, "A").predictions, 50);
  CHECK(a.correct == 2);
  CHECK(a.expected == doctest::Approx(2.0));
  CHECK(a.p_at_least == 1.0);

  // Bad input: a clear error naming the operation.
  CHECK_THROWS_AS(attn::data::chance_level(data, std::vector<std::string>{"A"}), attn::shape_error);
  CHECK(attn::test::message_of<attn::value_error>([&] {
          attn::data::chance_level(data, preds, 0);
        }).find("chance_level: shuffles must be >= 1") != std::string::npos);

  // The problem set's baseline: "London" is right 25 times, exactly what chance gives it.
  const QADataset dev(attn::data::masked_vocabulary(repo_file("wiki.txt")),
                      repo_file("birth_dev.tsv"), 128, "birth_dev.tsv");
  const auto london = attn::data::evaluate_constant(dev, "London");
  const attn::data::ChanceLevel l = attn::data::chance_level(dev, london.predictions, 20);
  CHECK(l.correct == 25);
  CHECK(l.expected == doctest::Approx(25.0));
  CHECK(l.p_at_least == 1.0);
}

namespace {

using TestAttn =
    attn::MultiHeadAttention<attn::score::ScaledDot, attn::kernel::Softmax, attn::mask::Causal,
                             attn::Heads<attn::dynamic>, attn::projection::Separate, float>;

nn::GPTConfig tiny_config(const CharTokenizer& tok, index_t block) {
  nn::GPTConfig c;
  c.vocab_size = tok.size();
  c.block_size = block;
  c.layers = 1;
  c.heads = 2;
  c.d_model = 16;
  c.seed = 1;
  return c;
}

}  // namespace

TEST_CASE("the QA loss ignores PAD targets") {
  const std::string corpus = "Where was Al born?\tParis";
  const CharTokenizer tok = attn::data::masked_vocabulary(corpus);
  const QADataset data(tok, "Where was Al born?\tParis\n", 32, "t");
  nn::GPT<TestAttn> model(tiny_config(tok, 32));
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

TEST_CASE("trim_padding drops the all-PAD tail without changing the loss or the gradients") {
  const std::string corpus = "Where was Al born?\tParisLondonBo";
  const CharTokenizer tok = attn::data::masked_vocabulary(corpus);
  const QADataset data(
      tok, "Where was Al born?\tParis\nWhere was Bo born?\tLondon\nWhere was Al born?\tLo\n", 48,
      "t");
  nn::GPT<TestAttn> model(tiny_config(tok, 48));
  model.set_training(false);
  const auto loss_and_grads = [&](const Tensor<std::int32_t>& x, const Tensor<std::int32_t>& y) {
    attn::Tape<float> tape;
    model.for_each_parameter([](const std::string&, attn::Parameter<float>& p) { p.zero_grad(); });
    const auto loss = attn::cross_entropy(model(tape, x), y, pad_id);
    tape.backward(loss);
    std::vector<float> grads;
    model.for_each_parameter([&](const std::string&, attn::Parameter<float>& p) {
      grads.insert(grads.end(), p.grad.begin(), p.grad.end());
    });
    return std::pair{loss.item(), grads};
  };
  Tensor<std::int32_t> x, y;
  data.batch(std::vector<index_t>{0, 1, 2}, x, y);
  const auto [full_loss, full_grads] = loss_and_grads(x, y);
  Tensor<std::int32_t> xt = x, yt = y;
  // The longest row, "Where was Bo born?⁇London⁇" (26 characters), has its last target, the
  // closing ⁇, at position 24.
  CHECK(attn::data::trim_padding(xt, yt) == 25);
  CHECK(xt.shape() == attn::Shape{3, 25});
  for (index_t r = 0; r < 3; ++r)
    for (index_t t = 0; t < 25; ++t) {
      CHECK(xt[r * 25 + t] == x[r * 48 + t]);
      CHECK(yt[r * 25 + t] == y[r * 48 + t]);
    }
  const auto [trim_loss, trim_grads] = loss_and_grads(xt, yt);
  CHECK(trim_loss == doctest::Approx(full_loss).epsilon(1e-6));
  REQUIRE(trim_grads.size() == full_grads.size());
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < full_grads.size(); ++i) {
    worst = std::max(worst, double(std::abs(trim_grads[i] - full_grads[i])));
    scale = std::max(scale, double(std::abs(full_grads[i])));
  }
  CHECK(scale > 0);
  CHECK(worst <= 1e-5 * scale);
  // Nothing to trim: unchanged; all targets PAD: one column is kept.
  CHECK(attn::data::trim_padding(xt, yt) == 25);
  Tensor<std::int32_t> xp(attn::Shape{2, 5}, 3), yp(attn::Shape{2, 5}, pad_id);
  CHECK(attn::data::trim_padding(xp, yp) == 1);
  CHECK(attn::test::message_of([&] { attn::data::trim_padding(xp, x); }).find("same shape") !=
        std::string::npos);
}

namespace {

// A small world of invented people (two-syllable names), each born in one of a few invented places
// (person i in place i mod places), one document "X was born in Y." each. The QA pairs ask
// "X was born in" ⁇ Y ⁇ (the fact's own wording: a model this small, trained for seconds, learns
// to retrieve with it; the real task's "Where was X born?" needs far more pretraining). Every
// third group of `places` people is held out of finetuning, so each place has held-out people.
struct InventedWorld {
  std::string corpus, train_tsv, heldout_tsv;
};

InventedWorld invent_world(std::uint64_t seed, int people, int places) {
  attn::Rng rng(seed);
  const std::string consonants = "bdfgklmnprstvz", vowels = "aeiou";
  std::set<std::string> used;
  const auto word = [&] {  // two syllables, capitalised, not used before
    std::string w;
    do {
      w.clear();
      for (int i = 0; i < 2; ++i) {
        w += consonants[rng.uniform_int(consonants.size())];
        w += vowels[rng.uniform_int(vowels.size())];
      }
      w[0] = char(w[0] - 'a' + 'A');
    } while (!used.insert(w).second);
    return w;
  };
  std::vector<std::string> place(static_cast<std::size_t>(places));
  for (auto& p : place) p = word();
  InventedWorld w;
  for (int i = 0; i < people; ++i) {
    const std::string name = word(), where = place[std::size_t(i % places)];
    w.corpus += name + " was born in " + where + ".\n";
    (i / places % 3 == 2 ? w.heldout_tsv : w.train_tsv) += name + " was born in\t" + where + "\n";
  }
  return w;
}

// `steps` AdamW steps (β₂ 0.99, no weight decay, gradient clip 1) at `lr` (after a linear warmup
// over `warmup` steps) on batches of 32 examples, the rows drawn from `rng`; `fill(rows, rng, x,
// y)` makes the batch.
template <class Model, class Fill>
void train_steps(Model& model, int steps, int warmup, double lr, attn::Rng& rng, Fill&& fill) {
  auto params = attn::optim::parameters_of<float>(model);
  attn::optim::AdamConfig ac;
  ac.beta2 = 0.99;
  attn::optim::AdamW<float> opt(params, ac);
  attn::Tape<float> tape;
  Tensor<std::int32_t> x, y;
  std::vector<index_t> rows(32);
  for (int step = 0; step < steps; ++step) {
    fill(rows, rng, x, y);
    attn::data::trim_padding(x, y);
    tape.clear();
    const auto loss = attn::cross_entropy(model(tape, x), y, pad_id);
    tape.backward(loss);
    attn::optim::clip_grad_norm(params, 1.0);
    opt.set_lr(lr * std::min(1.0, double(step + 1) / double(std::max(warmup, 1))));
    opt.step();
    opt.zero_grad();
  }
}

}  // namespace

// 600 pretraining steps: on a Zen 3 at 450 the pretrained model still answers only 6 of 16
// (measured), at 600 all 16 (with d_model 48: 11); on an AVX-512 Xeon (family 6 model 167), whose
// rounding takes another trajectory, 9 of 16 at 600. Guessing gets 2 of 16, and 8 or more has a
// probability of 3e-4 by chance. 33 s wall on one core of the loaded dev machine (load 7),
// in the ci build; skipped under ASan.
TEST_CASE("pretraining on invented facts lets the finetuned model answer held-out people" *
          doctest::skip(attn::test::under_sanitizer)) {
  // 48 people in 8 places; 16 held out. Pretraining: span corruption of the 48 documents.
  // Finetuning: the 32 training QA pairs, briefly after pretraining (as the problem set's 10
  // epochs after 650), long enough from scratch to answer the training questions. Without
  // pretraining, nothing tells the model where a held-out person was born: it can only guess
  // (1 in 8). With it, the fact is in the weights and finetuning teaches how to say it.
  const InventedWorld w = invent_world(1, 48, 8);
  const CharTokenizer tok = attn::data::masked_vocabulary(w.corpus);
  const index_t block = 64;
  const SpanCorruption pretraining(tok, w.corpus, block);
  const QADataset train(tok, w.train_tsv, block, "train"),
      heldout(tok, w.heldout_tsv, block, "held");
  REQUIRE(train.size() == 32);
  REQUIRE(heldout.size() == 16);

  nn::GPTConfig c;
  c.vocab_size = tok.size();
  c.block_size = block;
  c.layers = 2;
  c.heads = 4;
  c.d_model = 64;
  c.seed = 1;
  const auto random_rows = [](std::vector<index_t>& rows, attn::Rng& rng, index_t n) {
    for (index_t& r : rows) r = index_t(rng.uniform_int(std::uint64_t(n)));
  };
  const auto corrupt = [&](std::vector<index_t>& rows, attn::Rng& rng, Tensor<std::int32_t>& x,
                           Tensor<std::int32_t>& y) {
    random_rows(rows, rng, pretraining.size());
    pretraining.batch(rows, rng, x, y);
  };
  const auto qa = [&](std::vector<index_t>& rows, attn::Rng& rng, Tensor<std::int32_t>& x,
                      Tensor<std::int32_t>& y) {
    random_rows(rows, rng, train.size());
    train.batch(rows, x, y);
  };

  nn::GPT<TestAttn> pretrained(c);
  attn::Rng rng_pretrained(8);
  train_steps(pretrained, 600, 20, 5e-3, rng_pretrained, corrupt);
  train_steps(pretrained, 20, 0, 1e-3, rng_pretrained, qa);
  nn::GPT<TestAttn> scratch(c);
  attn::Rng rng_scratch(8);
  train_steps(scratch, 150, 0, 1e-3, rng_scratch, qa);

  const auto with = attn::data::evaluate_greedy(pretrained, tok, heldout);
  const auto without = attn::data::evaluate_greedy(scratch, tok, heldout);
  const auto without_train = attn::data::evaluate_greedy(scratch, tok, train);
  MESSAGE("held-out people answered: ", with.correct, "/16 with pretraining, ", without.correct,
          "/16 without (which answers ", without_train.correct, "/32 training questions)");
  CHECK(without_train.correct >= 24);  // finetuning from scratch works on the people it saw
  CHECK(without.correct <= 5);         // but cannot know the others (guessing: 2 of 16)
  CHECK(with.correct >= 8);            // pretraining put the facts in the weights
  CHECK(with.correct >= without.correct + 6);
}
