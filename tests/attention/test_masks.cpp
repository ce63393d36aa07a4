// Masks against independent statements of their patterns: small matrices written out by hand,
// BigBird's definition as explicit sets of blocks, and every tile classification against a count
// over the tile's elements. Includes only mask.hpp: nothing here runs attention.
#include <doctest/doctest.h>

#include <attn/attention/mask.hpp>
#include <map>
#include <set>
#include <string>
#include <vector>

using attn::index_t;
using attn::Tensor;
using attn::TileKind;
namespace mask = attn::mask;

namespace {

// pattern[b][i][j] == 'x' where query i of batch entry b may attend to key j, '.' where not.
using Pattern = std::vector<std::vector<std::string>>;

template <class M>
void expect_pattern(const M& m, const Pattern& pattern) {
  const auto batch = static_cast<index_t>(pattern.size());
  const auto tq = static_cast<index_t>(pattern[0].size());
  const auto tk = static_cast<index_t>(pattern[0][0].size());
  m.validate(batch, tq, tk);
  for (index_t b = 0; b < batch; ++b)
    for (index_t i = 0; i < tq; ++i)
      for (index_t j = 0; j < tk; ++j) {
        CAPTURE(b);
        CAPTURE(i);
        CAPTURE(j);
        const char want = pattern[static_cast<std::size_t>(b)][static_cast<std::size_t>(i)]
                                 [static_cast<std::size_t>(j)];
        CHECK(m.allowed(b, i, j, tq, tk) == (want == 'x'));
      }
}

// The tile's kind by counting its allowed elements (not the library's classify_elementwise).
template <class M>
TileKind count_kind(const M& m, index_t b, index_t i0, index_t i1, index_t j0, index_t j1,
                    index_t tq, index_t tk) {
  index_t allowed = 0;
  for (index_t i = i0; i < i1; ++i)
    for (index_t j = j0; j < j1; ++j) allowed += m.allowed(b, i, j, tq, tk) ? 1 : 0;
  if (allowed == (i1 - i0) * (j1 - j0)) return TileKind::all;
  return allowed == 0 ? TileKind::none : TileKind::partial;
}

// The tiles the checks visit: a grid of each tile shape (the last row and column of tiles cut
// short, as the kernels cut them), plus random rectangles.
struct Tile {
  index_t i0, i1, j0, j1;
};
std::vector<Tile> tiles_of(index_t tq, index_t tk, attn::Rng& rng) {
  std::vector<Tile> tiles;
  for (const auto& [br, bc] :
       {std::pair<index_t, index_t>{1, 1}, {4, 4}, {8, 16}, {16, 8}, {64, 32}})
    for (index_t i0 = 0; i0 < tq; i0 += br)
      for (index_t j0 = 0; j0 < tk; j0 += bc)
        tiles.push_back({i0, std::min(tq, i0 + br), j0, std::min(tk, j0 + bc)});
  for (int t = 0; t < 200; ++t) {
    const auto i0 = static_cast<index_t>(rng.uniform_int(static_cast<std::uint64_t>(tq)));
    const auto j0 = static_cast<index_t>(rng.uniform_int(static_cast<std::uint64_t>(tk)));
    tiles.push_back(
        {i0, i0 + 1 + static_cast<index_t>(rng.uniform_int(static_cast<std::uint64_t>(tq - i0))),
         j0, j0 + 1 + static_cast<index_t>(rng.uniform_int(static_cast<std::uint64_t>(tk - j0)))});
  }
  return tiles;
}

struct LengthPair {
  index_t tq, tk;
};
constexpr LengthPair length_pairs[] = {{1, 1}, {13, 29}, {40, 40}, {37, 70}, {70, 37}};
constexpr index_t batch = 3;

// Calls f(b, t, kind) for every tile t visited and every batch entry b, with the kind the mask's
// tile() gives and the failure context captured.
template <class M, class F>
void for_each_tile(const M& m, index_t tq, index_t tk, attn::Rng& rng, F&& f) {
  m.validate(batch, tq, tk);
  for (const Tile& t : tiles_of(tq, tk, rng))
    for (index_t b = 0; b < batch; ++b) {
      CAPTURE(b);
      CAPTURE(t.i0);
      CAPTURE(t.i1);
      CAPTURE(t.j0);
      CAPTURE(t.j1);
      f(b, t, m.tile(b, t.i0, t.i1, t.j0, t.j1, tq, tk));
    }
}

// A mask's own tile() must equal the count over the tile's elements, for every tile visited.
template <class M>
void check_tiles_exact(const M& m, index_t tq, index_t tk, attn::Rng& rng) {
  for_each_tile(m, tq, tk, rng, [&](index_t b, const Tile& t, TileKind got) {
    REQUIRE(got == count_kind(m, b, t.i0, t.i1, t.j0, t.j1, tq, tk));
  });
}

// A composition's tile() must be the truth table of its parts' counted kinds, and never claim
// all or none where its own elements disagree.
template <bool IsAnd, class M>
void check_tiles_composed(const M& m, index_t tq, index_t tk, attn::Rng& rng) {
  for_each_tile(m, tq, tk, rng, [&](index_t b, const Tile& t, TileKind got) {
    const TileKind x = count_kind(m.first, b, t.i0, t.i1, t.j0, t.j1, tq, tk);
    const TileKind y = count_kind(m.second, b, t.i0, t.i1, t.j0, t.j1, tq, tk);
    TileKind want = TileKind::partial;
    if (IsAnd) {
      if (x == TileKind::none || y == TileKind::none) want = TileKind::none;
      if (x == TileKind::all && y == TileKind::all) want = TileKind::all;
    } else {
      if (x == TileKind::all || y == TileKind::all) want = TileKind::all;
      if (x == TileKind::none && y == TileKind::none) want = TileKind::none;
    }
    REQUIRE(got == want);
    const TileKind truth = count_kind(m, b, t.i0, t.i1, t.j0, t.j1, tq, tk);
    REQUIRE((got == TileKind::partial || got == truth));
  });
}

Tensor<std::uint8_t> random_matrix(attn::Shape s, double p, attn::Rng& rng) {
  Tensor<std::uint8_t> m(s);
  for (auto& x : m) x = static_cast<std::uint8_t>(rng.uniform() < p);
  return m;
}

}  // namespace

TEST_CASE("each mask allows exactly the pattern written out by hand") {
  expect_pattern(mask::None{}, {{"xxx", "xxx"}});
  // End-aligned: the last query sees the last key (Tk − Tq = 2).
  expect_pattern(mask::Causal{}, {{"xxx..",  //
                                   "xxxx.",  //
                                   "xxxxx"}});
  expect_pattern(mask::Causal{}, {{"..",  // Tq > Tk: the first rows see nothing
                                   "..",  //
                                   "x.",  //
                                   "xx"}});
  expect_pattern(mask::CausalTopLeft{}, {{"x....",  //
                                          "xx...",  //
                                          "xxx.."}});
  expect_pattern(mask::SlidingWindow{2, 1}, {{"xx....",  //
                                              "xxx...",  //
                                              "xxxx..",  //
                                              ".xxxx.",  //
                                              "..xxxx",  //
                                              "...xxx"}});
  expect_pattern(mask::SlidingWindow::causal(2), {{"xx...",  // p = i + 1
                                                   ".xx..",  //
                                                   "..xx.",  //
                                                   "...xx"}});
  expect_pattern(mask::Padding({3, 0, 5}), {{"xxx..", "xxx.."},  //
                                            {".....", "....."},  //
                                            {"xxxxx", "xxxxx"}});
  expect_pattern(mask::LeftPadding({2, 5, 0}), {{"..xxx", "..xxx"},  //
                                                {".....", "....."},  //
                                                {"xxxxx", "xxxxx"}});
  // A left-padded generation batch: entry 0 has 2 padding tokens, entry 1 none.
  expect_pattern(mask::And{mask::Causal{}, mask::LeftPadding({2, 0})}, {{".....",  //
                                                                         ".....",  //
                                                                         "..x..",  //
                                                                         "..xx.",  //
                                                                         "..xxx"},
                                                                        {"x....",  //
                                                                         "xx...",  //
                                                                         "xxx..",  //
                                                                         "xxxx.",  //
                                                                         "xxxxx"}});
  // One decoding step of that batch: one query, a cache of 6 keys; the padding stays padding.
  expect_pattern(mask::And{mask::Causal{}, mask::LeftPadding({2, 0})}, {{"..xxxx"}, {"xxxxxx"}});
  // The diagonal plus one global token (key 0 seen by all, query 0 sees all).
  Tensor<std::uint8_t> global({5, 5});
  for (index_t t = 0; t < 5; ++t) global(0, t) = global(t, 0) = 1;
  expect_pattern(mask::Or{mask::SlidingWindow{0, 0}, mask::Custom(global)}, {{"xxxxx",  //
                                                                              "xx...",  //
                                                                              "x.x..",  //
                                                                              "x..x.",  //
                                                                              "x...x"}});
}

TEST_CASE("Custom: one matrix for every batch entry, or one per entry") {
  Tensor<std::uint8_t> shared({2, 3});
  shared(0, 1) = shared(1, 0) = shared(1, 2) = 1;
  expect_pattern(mask::Custom(shared), {{".x.", "x.x"}, {".x.", "x.x"}});
  Tensor<std::uint8_t> each({2, 2, 3});
  each(0, 0, 0) = each(0, 1, 1) = 1;
  each(1, 0, 2) = each(1, 1, 0) = each(1, 1, 2) = 1;
  expect_pattern(mask::Custom(each), {{"x..", ".x."}, {"..x", "x.x"}});
}

TEST_CASE("BigBird allows exactly the paper's window, global and random blocks") {
  // Six blocks of two positions; window 1 (the block and one on each side), one global block.
  // Without random blocks, query block a sees these key blocks:
  const std::vector<std::set<index_t>> fixed = {
      {0, 1, 2, 3, 4, 5},  // block 0 is global: it sees everything
      {0, 1, 2},           // {0} global, {0, 1, 2} window
      {0, 1, 2, 3},        //
      {0, 2, 3, 4},        //
      {0, 3, 4, 5},        //
      {0, 4, 5}};
  auto expand = [](const std::vector<std::set<index_t>>& blocks, index_t block, index_t tq,
                   index_t tk) {
    std::vector<std::string> rows;
    for (index_t i = 0; i < tq; ++i) {
      std::string row;
      for (index_t j = 0; j < tk; ++j)
        row += blocks[static_cast<std::size_t>(i / block)].count(j / block) ? 'x' : '.';
      rows.push_back(row);
    }
    return Pattern{rows};
  };
  expect_pattern(mask::BigBird{2, 1, 1, 0, 0}, expand(fixed, 2, 12, 12));
  // Tq != Tk: queries are blocked like keys (three query blocks, a partial last key block).
  expect_pattern(mask::BigBird{2, 1, 1, 0, 0}, expand(fixed, 2, 6, 11));
  // Window 0 and two global blocks.
  expect_pattern(mask::BigBird{3, 0, 2, 0, 0},
                 expand({{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2}, {0, 1, 3}}, 3, 12, 12));
  // Random blocks add, for each query block a, the blocks random_block(a, r) names, r < random.
  const mask::BigBird random{2, 1, 1, 2, 17};
  std::vector<std::set<index_t>> with_random = fixed;
  for (index_t a = 0; a < 6; ++a)
    for (index_t r = 0; r < 2; ++r)
      with_random[static_cast<std::size_t>(a)].insert(random.random_block(a, r, 6));
  expect_pattern(random, expand(with_random, 2, 12, 12));
  CHECK(with_random != fixed);  // the draws added something
}

TEST_CASE("BigBird's random blocks: in range, fixed by the seed, uniform over the key blocks") {
  const index_t key_blocks = 8, draws = 8000;
  std::vector<index_t> counts(key_blocks, 0);
  const mask::BigBird a{4, 1, 1, 3, 5}, b{4, 1, 1, 3, 6};
  index_t differ = 0;
  for (index_t q = 0; q < draws / 2; ++q)
    for (index_t r = 0; r < 2; ++r) {
      const index_t c = a.random_block(q, r, key_blocks);
      REQUIRE(c >= 0);
      REQUIRE(c < key_blocks);
      CHECK(c == a.random_block(q, r, key_blocks));  // the same draw every call
      ++counts[static_cast<std::size_t>(c)];
      differ += c != b.random_block(q, r, key_blocks);
    }
  // Pearson's chi-square over 8 cells (7 degrees of freedom): 24.3 is its 0.999 quantile.
  double chi2 = 0;
  const double expected = double(draws) / double(key_blocks);
  for (const index_t n : counts) chi2 += (double(n) - expected) * (double(n) - expected) / expected;
  CHECK(chi2 < 24.3);
  // Another seed draws another pattern: agreement near 1/8 by chance.
  CHECK(double(differ) / double(draws) == doctest::Approx(7.0 / 8.0).epsilon(0.03));
}

TEST_CASE("each mask's tile classification equals a count over the tile's elements") {
  attn::Rng rng(5);
  for (const LengthPair& z : length_pairs) {
    const index_t tq = z.tq, tk = z.tk;
    CAPTURE(tq);
    CAPTURE(tk);
    check_tiles_exact(mask::None{}, tq, tk, rng);
    check_tiles_exact(mask::Causal{}, tq, tk, rng);
    check_tiles_exact(mask::CausalTopLeft{}, tq, tk, rng);
    check_tiles_exact(mask::SlidingWindow{5, 2}, tq, tk, rng);
    check_tiles_exact(mask::SlidingWindow::causal(8), tq, tk, rng);
    check_tiles_exact(mask::Padding({tk, 0, tk / 2}), tq, tk, rng);
    check_tiles_exact(mask::LeftPadding({0, tk, tk / 3}), tq, tk, rng);
    check_tiles_exact(mask::Custom(random_matrix({tq, tk}, 0.7, rng)), tq, tk, rng);
    check_tiles_exact(mask::Custom(random_matrix({batch, tq, tk}, 0.97, rng)), tq, tk, rng);
    check_tiles_exact(mask::BigBird{4, 1, 1, 2, 3}, tq, tk, rng);
    check_tiles_exact(mask::BigBird{3, 0, 0, 1, 9}, tq, tk, rng);
  }
}

TEST_CASE("And / Or: tiles from the parts' tiles, never claiming more than the elements say") {
  attn::Rng rng(6);
  for (const LengthPair& z : length_pairs) {
    const index_t tq = z.tq, tk = z.tk;
    CAPTURE(tq);
    CAPTURE(tk);
    check_tiles_composed<true>(mask::And{mask::Causal{}, mask::LeftPadding({0, tk, tk / 3})}, tq,
                               tk, rng);
    check_tiles_composed<true>(mask::And{mask::SlidingWindow{6, 0}, mask::Causal{}}, tq, tk, rng);
    check_tiles_composed<true>(
        mask::And{mask::BigBird{4, 1, 1, 1, 2}, mask::Custom(random_matrix({tq, tk}, 0.9, rng))},
        tq, tk, rng);
    check_tiles_composed<false>(mask::Or{mask::SlidingWindow{2, 2}, mask::CausalTopLeft{}}, tq, tk,
                                rng);
    check_tiles_composed<false>(
        mask::Or{mask::Padding({1, 0, tk}), mask::Custom(random_matrix({batch, tq, tk}, 0.1, rng))},
        tq, tk, rng);
    // Nested: a causal window over the real keys, or a global first key.
    check_tiles_composed<false>(
        mask::Or{mask::And{mask::SlidingWindow::causal(5),
                           mask::LeftPadding({std::min<index_t>(2, tk), 0, 1})},
                 mask::Padding({1, 1, 1})},
        tq, tk, rng);
  }
}

TEST_CASE("composed masks: flags from the parts, and the parts' errors") {
  static_assert(mask::And<mask::Causal, mask::SlidingWindow>::host_device);
  static_assert(!mask::And<mask::Causal, mask::Padding>::host_device);
  static_assert(mask::Or<mask::Padding, mask::LeftPadding>::key_only);
  static_assert(!mask::And<mask::Causal, mask::LeftPadding>::key_only);
  const mask::And both{mask::Causal{}, mask::LeftPadding({1, 2})};
  CHECK_NOTHROW(both.validate(2, 4, 4));
  CHECK_THROWS_WITH_AS(both.validate(3, 4, 4), "mask::LeftPadding: 2 starts for a batch of 3",
                       attn::shape_error);
  CHECK_THROWS_WITH_AS(both.validate(2, 4, 1), "mask::LeftPadding: start 2 outside [0, 1]",
                       attn::value_error);
  CHECK_THROWS_WITH_AS(mask::LeftPadding{}.validate(1, 1, 1), "mask::LeftPadding: no starts given",
                       attn::value_error);
  const mask::Or either{mask::Custom(Tensor<std::uint8_t>({2, 4, 4})), mask::None{}};
  CHECK_NOTHROW(either.validate(2, 4, 4));
  CHECK_THROWS_WITH_AS(
      either.validate(3, 4, 4),
      "mask::Custom: the matrix is [2, 4, 4] but attention needs [4, 4] or [3, 4, 4]",
      attn::shape_error);
}
