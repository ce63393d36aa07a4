// attn::dist over MPI, run by ctest as 1, 2 and 3 ranks (mpirun on loopback): the small
// collectives, the parameter broadcast and replica check, the gradient all-reduce held bit for bit
// to a plain left fold over all shards computed on every rank from the shards' seeds, and a small
// GPT trained 20 steps as R ranks against one process running the same shards in turn (bitwise
// equal losses and parameters).
// With --fail stop|kill it instead stalls or kills rank 1 inside a collective, for the failure
// tests (tests/dist/failure.sh): the other ranks must end, not hang.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <unistd.h>
#include <attn/dist.hpp>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../test_util.hpp"
#include "shard_fixture.hpp"
#include "sharded_run.hpp"

using attn::index_t;
using attn::test::message_of;
namespace dist = attn::dist;

namespace {

dist::Context* world = nullptr;

}  // namespace

TEST_CASE("dist::Context: rank and size") {
  REQUIRE(world != nullptr);
  CHECK(world->size() >= 1);
  CHECK(world->rank() >= 0);
  CHECK(world->rank() < world->size());
  CHECK(world->leader() == (world->rank() == 0));
}

TEST_CASE("dist::all_gather, any, broadcast") {
  dist::Context& w = *world;
  // Rank r contributes r + 1 values 10 r + i: the result is every rank's, in rank order.
  std::vector<double> mine;
  for (int i = 0; i <= w.rank(); ++i) mine.push_back(10.0 * w.rank() + i);
  const std::vector<double> all = dist::all_gather<double>(w, mine);
  std::vector<double> expected;
  for (int r = 0; r < w.size(); ++r)
    for (int i = 0; i <= r; ++i) expected.push_back(10.0 * r + i);
  CHECK(all == expected);

  CHECK(dist::any(w, w.rank() == w.size() - 1));
  CHECK_FALSE(dist::any(w, false));
  CHECK(dist::any(w, true));

  double x = w.leader() ? 2.5 : -1.0;
  std::string s = w.leader() ? std::string("from rank 0") : std::string(w.rank(), 'x');
  dist::broadcast(w, x);
  dist::broadcast(w, s);
  CHECK(x == 2.5);
  CHECK(s == "from rank 0");
}

TEST_CASE("dist::broadcast_parameters makes the replicas equal; check_replicas sees a difference") {
  dist::Context& w = *world;
  attn::test::ShardFixture f, &m = f;  // a module: f.for_each_parameter
  for (auto& p : f.params)
    for (index_t j = 0; j < p.value.numel(); ++j) p.value[j] = float(w.rank() * 100 + j);
  if (w.size() > 1)
    CHECK(message_of<attn::dist_error>([&] {
            dist::check_replicas(w, m);
          }).find("the parameters of rank 1 differ from rank 0's") != std::string::npos);
  dist::broadcast_parameters(w, m);
  for (auto& p : f.params)
    for (index_t j = 0; j < p.value.numel(); ++j) REQUIRE(p.value[j] == float(j));
  dist::check_replicas(w, m);  // throws when they differ
}

TEST_CASE("dist::GradientReducer: the left fold over all shards in shard order, bit for bit") {
  dist::Context& w = *world;
  for (const index_t per_rank : {1, 2}) {
    CAPTURE(per_rank);
    const index_t shards = per_rank * w.size();
    attn::test::ShardFixture f;
    dist::GradientReducer<float> reducer(w, f.named(), per_rank);
    for (int step = 0; step < 2; ++step) {  // twice: the buffers are reused
      const index_t offset = step * 100;    // other shard gradients in the second step
      for (index_t j = 0; j < per_rank; ++j) {
        const index_t s = w.rank() * per_rank + j;
        f.set_gradients(offset + s);
        reducer.capture(j, f.loss(s));
      }
      const double loss = reducer.reduce();
      // The oracle: every shard's gradient regenerated here, folded by a plain loop.
      CHECK(f.differences(f.gradients(), f.folded(offset, offset + shards)) == 0);
      CHECK(loss == f.folded_loss(shards));
    }
  }
}

TEST_CASE("dist::GradientReducer: ranks with different models are refused by name") {
  dist::Context& w = *world;
  if (w.size() == 1) return;
  std::vector<attn::Parameter<float>> params;
  params.emplace_back(attn::Tensor<float>::zeros(attn::Shape{4 + w.rank()}));
  std::vector<attn::optim::NamedParameter<float>> named{{"w", &params[0], true}};
  const std::string m =
      message_of<attn::dist_error>([&] { dist::GradientReducer<float> r(w, named, 1); });
  CHECK(m.find("rank 1 has 5 gradient elements in 1 shards, rank 0 has 4") != std::string::npos);
}

TEST_CASE("data-parallel GPT: R ranks give the bits of one process running the same shards") {
  dist::Context& w = *world;
  int argc = 0;
  char** argv = nullptr;
  attn::dist::DataParallel ranks(argc, argv);  // joins the running MPI job (w's)
  attn::dist::DataParallel alone;              // one process
  REQUIRE(ranks.ranks() == w.size());
  for (const index_t per_rank : {1, 2}) {
    const index_t shards = per_rank * w.size();
    if (shards == 1) continue;  // one shard in one process is train_step itself
    CAPTURE(shards);
    const attn::test::ShardedRun a = attn::test::sharded_run(ranks, shards, 0, 20, 0.1);
    const attn::test::ShardedRun b = attn::test::sharded_run(alone, shards, 0, 20, 0.1);
    REQUIRE(a.losses.size() == 20);
    for (std::size_t i = 0; i < a.losses.size(); ++i) {
      CAPTURE(i);
      CHECK(a.losses[i] == b.losses[i]);  // exact
    }
    CHECK(a.parameters == b.parameters);
  }
  // With micro-batches inside each shard (gradient accumulation on the rank).
  const attn::test::ShardedRun a = attn::test::sharded_run(ranks, 2 * w.size(), 2, 6, 0.1);
  const attn::test::ShardedRun b = attn::test::sharded_run(alone, 2 * w.size(), 2, 6, 0.1);
  CHECK(a.losses == b.losses);
  CHECK(a.parameters == b.parameters);
}

namespace {

// Rank 1 stops (SIGSTOP) or dies (SIGKILL) while the others wait in GradientReducer::reduce with
// a timeout of `timeout` seconds; a rank that gets a dist_error prints it and ends the job.
int fail(dist::Context& w, const std::string& how, double timeout) {
  w.set_timeout(timeout);
  attn::test::ShardFixture f;
  dist::GradientReducer<float> reducer(w, f.named(), 1);
  if (w.rank() == 1) {
    std::fprintf(stderr, "test_dist: rank 1 (pid %d) now %s\n", int(getpid()),
                 how == "kill" ? "dies" : "stops");
    std::fflush(stderr);
    std::raise(how == "kill" ? SIGKILL : SIGSTOP);
  }
  try {
    f.set_gradients(w.rank());
    reducer.capture(0, 0.0);
    reducer.reduce();
  } catch (const attn::dist_error& e) {
    std::fprintf(stderr, "test_dist: error: %s\n", e.what());
    std::fflush(stderr);
    w.abort(3);
  }
  std::fprintf(stderr, "test_dist: rank %d: the reduce completed without rank 1\n", w.rank());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  dist::Context context(argc, argv, 60.0);
  world = &context;
  for (int i = 1; i + 2 < argc; ++i)  // --fail stop|kill <timeout seconds>
    if (std::strcmp(argv[i], "--fail") == 0)
      return fail(context, argv[i + 1], std::atof(argv[i + 2]));
  doctest::Context tests(argc, argv);
  const int failed = tests.run();
  if (tests.shouldExit()) return failed;
  return dist::any(context, failed != 0) ? 1 : 0;  // the job fails when any rank failed
}
