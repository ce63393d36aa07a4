// data: the char tokenizer (UTF-8, vocabulary round trip, errors) and the LM batch sampler.
#include <doctest/doctest.h>

#include <attn/data/data.hpp>
#include <string>
#include <vector>

#include "../test_util.hpp"

using attn::data::CharTokenizer;
using attn::data::Split;
using attn::data::TextBatches;

TEST_CASE("CharTokenizer: vocabulary in code point order, encode/decode round trip") {
  const std::string corpus = "hello, wörld ✓\n";
  const CharTokenizer tok = CharTokenizer::from_corpus(corpus);
  CHECK(tok.size() == 12);  // \n space , d e h l o r w ö ✓
  CHECK(tok.vocabulary() == "\n ,dehlorwö✓");
  const auto ids = tok.encode("wörld");
  CHECK(ids == std::vector<std::int32_t>{9, 10, 8, 6, 3});
  CHECK(tok.decode(ids) == "wörld");
  CHECK(tok.decode(tok.encode(corpus)) == corpus);
  const CharTokenizer again = CharTokenizer::from_vocabulary(tok.vocabulary());
  CHECK(again.encode(corpus) == tok.encode(corpus));
  CHECK(tok.id_of("✓") == 11);
  CHECK(tok.id_of("x") == -1);
}

TEST_CASE("CharTokenizer: clear errors") {
  const CharTokenizer tok = CharTokenizer::from_corpus("abc");
  CHECK(attn::test::message_of([&] { tok.encode("abd"); }) ==
        "CharTokenizer::encode: character 'd' (U+0064) at position 2 is not in the vocabulary");
  CHECK(attn::test::message_of([&] { tok.encode("a\xC3"); }) ==
        "CharTokenizer::encode: invalid UTF-8 at byte 1");
  CHECK(attn::test::message_of([&] {
          CharTokenizer::from_corpus("\xC0\x80");
        }).find("invalid UTF-8 at byte 0") != std::string::npos);  // overlong NUL
  CHECK(attn::test::message_of([&] {
          CharTokenizer::from_corpus("\xED\xA0\x80");
        }).find("invalid UTF-8") != std::string::npos);  // surrogate
  CHECK(attn::test::message_of([&] {
          tok.decode(std::vector<std::int32_t>{0, 3});
        }).find("id 3 at position 1") != std::string::npos);
  CHECK(attn::test::message_of([&] {
          CharTokenizer::from_vocabulary("aba");
        }).find("appears twice") != std::string::npos);
}

TEST_CASE("spread_sample: the start of each equal piece, joined in order; one piece is a prefix") {
  std::vector<std::int32_t> t(103);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = std::int32_t(i);
  // Of [0, 100): pieces [0, 25), [25, 50), [50, 75), [75, 100), 20 % of each = 5 tokens.
  const std::vector<std::int32_t> four = attn::data::spread_sample(t, 100, 0.2, 4);
  const std::vector<std::int32_t> want{0,  1,  2,  3,  4,  25, 26, 27, 28, 29,
                                       50, 51, 52, 53, 54, 75, 76, 77, 78, 79};
  CHECK(four == want);
  // One piece: the first fraction of the range (what --data-fraction did before --data-chunks).
  const std::vector<std::int32_t> one = attn::data::spread_sample(t, 100, 0.2, 1);
  CHECK(one == std::vector<std::int32_t>(t.begin(), t.begin() + 20));
  // Unequal pieces (floor bounds [0, 33), [33, 66), [66, 100)) and the whole range.
  const std::vector<std::int32_t> three = attn::data::spread_sample(t, 100, 0.1, 3);
  CHECK(three == std::vector<std::int32_t>{0, 1, 2, 33, 34, 35, 66, 67, 68});
  CHECK(attn::data::spread_sample(t, 100, 1.0, 7) ==
        std::vector<std::int32_t>(t.begin(), t.begin() + 100));
  CHECK(attn::test::message_of<attn::value_error>([&] {
          attn::data::spread_sample(t, 100, 0.2, 0);
        }).find("spread_sample: 0 pieces of a range of 100 tokens") != std::string::npos);
  CHECK(attn::test::message_of<attn::value_error>([&] {
          attn::data::spread_sample(t, 104, 0.2, 2);
        }).find("a range of 104 tokens out of 103") != std::string::npos);
  CHECK(attn::test::message_of<attn::value_error>([&] {
          attn::data::spread_sample(t, 100, 0.0, 2);
        }).find("the fraction must be in (0, 1]") != std::string::npos);
}

TEST_CASE("TextBatches: targets are the inputs shifted by one, splits are disjoint, seeded") {
  std::vector<std::int32_t> tokens(100);
  for (int i = 0; i < 100; ++i) tokens[std::size_t(i)] = i;
  const TextBatches batches(tokens, 0.9);
  CHECK(batches.size(Split::train) == 90);
  CHECK(batches.size(Split::validation) == 10);
  attn::Tensor<std::int32_t> x, y, x2, y2;
  attn::Rng rng(4), rng2(4);
  batches.sample(Split::train, 3, 8, rng, x, y);
  batches.sample(Split::train, 3, 8, rng2, x2, y2);
  CHECK(x.shape() == attn::Shape{3, 8});
  for (attn::index_t i = 0; i < x.numel(); ++i) {
    CHECK(y[i] == x[i] + 1);
    CHECK(y[i] < 90);  // never reads past the training split
    CHECK(x[i] == x2[i]);
  }
  batches.sample(Split::validation, 2, 4, rng, x, y);
  for (attn::index_t i = 0; i < x.numel(); ++i) CHECK(x[i] >= 90);
  CHECK(attn::test::message_of([&] {
          batches.sample(Split::validation, 2, 10, rng, x, y);
        }).find("validation split has 10 tokens") != std::string::npos);
}
