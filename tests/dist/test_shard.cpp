// The data-parallel split without MPI (attn/dist/shard.hpp): shard rows, the rank plan, shard seeds
// and ShardGradients' fold, held to plain loops written here: the left fold in shard order, in
// float, bit for bit, and not the same bits as another order (so the test sees the order).
// Does not communicate: tests/dist/test_dist.cpp runs the same fold across MPI ranks.
#include <doctest/doctest.h>

#include <attn/autodiff/tape.hpp>
#include <attn/core/rng.hpp>
#include <attn/dist/shard.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "../test_util.hpp"
#include "shard_fixture.hpp"

using attn::index_t;
using attn::test::message_of;
namespace dist = attn::dist;

TEST_CASE("dist::shard_rows: contiguous, in order, covering the batch, sizes within one") {
  for (index_t rows : {0, 1, 5, 7, 32, 33}) {
    for (index_t shards : {1, 2, 3, 4, 8}) {
      CAPTURE(rows);
      CAPTURE(shards);
      index_t next = 0, smallest = rows, largest = 0;
      for (index_t s = 0; s < shards; ++s) {
        const dist::RowRange r = dist::shard_rows(rows, shards, s);
        CHECK(r.begin == next);
        CHECK(r.end >= r.begin);
        next = r.end;
        smallest = std::min(smallest, r.size());
        largest = std::max(largest, r.size());
      }
      CHECK(next == rows);
      CHECK(largest - smallest <= 1);
    }
  }
  CHECK(dist::shard_rows(10, 4, 3) == dist::RowRange{7, 10});  // ⌊3·10/4⌋ = 7
  CHECK(message_of<attn::value_error>([] { (void)dist::shard_rows(4, 2, 2); }).find("shard_rows") !=
        std::string::npos);
}

TEST_CASE("dist::ShardPlan: ranks run equal contiguous runs of shards; uneven splits refused") {
  const dist::ShardPlan p(6, 3, 1);
  CHECK(p.per_rank() == 2);
  CHECK(p.first() == 2);
  CHECK(p.runs(2));
  CHECK(p.runs(3));
  CHECK_FALSE(p.runs(1));
  CHECK_FALSE(p.runs(4));
  const std::string m = message_of<attn::value_error>([] { (void)dist::ShardPlan(4, 3, 0); });
  CHECK(m.find("4 shards cannot be split evenly over 3 ranks") != std::string::npos);
  CHECK(message_of<attn::value_error>([] { (void)dist::ShardPlan(4, 2, 2); }).find("rank 2") !=
        std::string::npos);
}

TEST_CASE("dist::shard_seeds: the s-th split of Rng(step seed)") {
  const auto seeds = dist::shard_seeds(42, 3);
  attn::Rng r(42);
  REQUIRE(seeds.size() == 3);
  for (const std::uint64_t s : seeds) CHECK(s == r.split());
}

TEST_CASE("dist::ShardGradients: the fold in shard order, bit for bit, in one buffer") {
  attn::test::ShardFixture f;  // three parameters of odd sizes
  for (const index_t shards : {1, 2, 3, 5}) {
    CAPTURE(shards);
    dist::ShardGradients<float> g(f.named(), shards);
    REQUIRE(g.size() == f.size());
    for (index_t s = 0; s < shards; ++s) {
      f.set_gradients(s);
      g.capture(s, f.loss(s));
      for (const auto& p : f.params) CHECK(p.grad[0] == 0.0f);  // left zero for the next shard
    }
    const double loss = g.fold();
    const std::vector<float> expected = f.folded(0, shards);
    CHECK(f.differences(f.gradients(), expected) == 0);
    CHECK(loss == f.folded_loss(shards));
    if (shards >= 3) CHECK(f.folded_in_reverse(shards) != expected);  // the order shows in the bits
  }
  dist::ShardGradients<float> g(f.named(), 2);
  f.set_gradients(0);
  CHECK(message_of<attn::value_error>([&] { g.capture(1, 0.0); }).find("out of order") !=
        std::string::npos);
  CHECK(message_of<attn::value_error>([&] { (void)g.fold(); }).find("0 of 2 shards") !=
        std::string::npos);
}

TEST_CASE("dist::ShardGradients: blocks lay every shard's block b together (the send layout)") {
  attn::test::ShardFixture f;
  const index_t shards = 2, blocks = 3;
  dist::ShardGradients<float> g(f.named(), shards, blocks);
  for (index_t s = 0; s < shards; ++s) {
    f.set_gradients(s);
    g.capture(s, f.loss(s));
  }
  for (index_t b = 0; b < blocks; ++b)
    for (index_t s = 0; s < shards; ++s)
      for (index_t e = 0; e < g.block_size(b); ++e) {
        const index_t flat = g.block_begin(b) + e;
        REQUIRE(g.data()[shards * g.block_begin(b) + s * g.block_size(b) + e] ==
                f.gradient(s, flat));
      }
  CHECK(message_of<attn::value_error>([&] { (void)g.fold(); }).find("GradientReducer") !=
        std::string::npos);
}
