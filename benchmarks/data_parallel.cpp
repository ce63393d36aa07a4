// benchmarks/data_parallel: tokens per second of GPT training steps for the reference
// configurations A and B, as one process with T threads or as R MPI ranks splitting every batch
// (attn::dist::DataParallel::step, what char_gpt runs), and the time of the fixed-order gradient
// all-reduce alone, for the scaling model in docs/distributed.md. Rank 0 prints a table.
// Does not use Google Benchmark (every rank must run the same steps) nor choose the launch: run it
// once alone and once under mpirun, and compare the rows.
//
//   build/release/benchmarks/bench_data_parallel --threads 2 --steps 4
//   mpirun -np 2 --bind-to core --mca pml ob1 --mca btl self,vader,tcp
//     --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo
//     build/release/benchmarks/bench_data_parallel --threads 1 --steps 4
// (one command; as root, with OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 set).
#include <algorithm>
#include <attn/attn.hpp>
#include <attn/dist.hpp>
#include <attn/dist/data_parallel.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "gpt_configs.hpp"

namespace {

using attn::index_t;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// CPU seconds of this process (all its threads).
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

struct Row {
  const char* config;
  index_t params;
  double step_s, cpu_s, all_reduce_s;  // cpu_s: per step, all ranks and threads together
};

// `steps` timed steps (after one untimed) of configuration `cfg` split over the ranks of `dp`;
// then, with several ranks, ten all-reduces of the model's gradients alone.
Row measure(const bench::GptShape& cfg, attn::dist::DataParallel& dp, attn::dist::Context& world,
            int steps) {
  attn::nn::GPT<attn::nn::CausalSelfAttention> model(bench::gpt_config(cfg));
  dp.broadcast_parameters(model);
  auto params = attn::optim::parameters_of<float>(model);
  attn::optim::AdamConfig ac;
  ac.lr = 1e-4;
  ac.weight_decay = 0.1;
  attn::optim::AdamW<float> opt(params, ac);
  attn::Tensor<std::int32_t> x({cfg.batch, cfg.block}), y({cfg.batch, cfg.block});  // [B, T]
  attn::Rng rng(2);  // the same global batch on every rank
  for (index_t i = 0; i < x.numel(); ++i) {
    x[i] = std::int32_t(rng.uniform_int(std::uint64_t(cfg.vocab)));
    y[i] = std::int32_t(rng.uniform_int(std::uint64_t(cfg.vocab)));
  }
  attn::Tape<float> tape;
  const index_t shards = dp.shards(0, cfg.batch);
  std::vector<double> step_s;
  double cpu0 = 0;
  for (int s = 0; s <= steps; ++s) {
    if (s == 1) cpu0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    dp.step(model, tape, opt, params, x, y, -100, 1e-4, 1.0, std::uint64_t(s), 0, shards);
    if (s > 0) step_s.push_back(seconds_since(t0));  // step 0 allocates the buffers
  }
  const double cpu[1] = {(cpu_seconds() - cpu0) / steps};
  double cpu_all = 0;
  for (const double c : attn::dist::all_gather<double>(world, cpu)) cpu_all += c;
  Row row{cfg.name, attn::nn::parameter_count(model), median(step_s), cpu_all, 0.0};
  if (world.size() > 1) {
    attn::dist::GradientReducer<float> reducer(world, params, 1);
    std::vector<double> reduce_s;
    for (int i = 0; i <= 10; ++i) {
      for (const auto& p : params) p.param->grad.fill(1e-3f);
      reducer.capture(0, 0.0);
      attn::dist::any(world, false);  // start together, so that the time is the reduce's
      const auto t0 = std::chrono::steady_clock::now();
      reducer.reduce();
      if (i > 0) reduce_s.push_back(seconds_since(t0));
    }
    row.all_reduce_s = median(reduce_s);
  }
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  attn::dist::DataParallel dp(argc, argv);
  attn::dist::Context world;  // the same job (MPI is initialised): for the all-reduce timing
  std::string configs = "A,B";
  int threads = 1, steps = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--config"))
      configs = argv[i + 1];
    else if (!std::strcmp(argv[i], "--threads"))
      threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--steps"))
      steps = std::atoi(argv[i + 1]);
    else
      threads = 0;
  }
  if (threads < 1 || steps < 1 || argc % 2 == 0) {
    if (dp.leader())
      std::fprintf(stderr, "usage: %s [--config A,B] [--threads N] [--steps N]\n", argv[0]);
    return dp.finish(2);
  }
  attn::set_num_threads(threads);
  double load[3] = {0, 0, 0};
  if (dp.leader()) {
    getloadavg(load, 3);
    std::printf("%d rank(s) x %d thread(s), median of %d steps; load average at start %.2f\n",
                dp.ranks(), threads, steps, load[0]);
    std::printf("%-6s | %10s | %8s | %8s | %12s | %13s | %17s\n", "config", "parameters", "step ms",
                "tokens/s", "CPU ms/step", "all-reduce ms", "MB sent/rank/step");
  }
  std::size_t at = 0;
  while (at <= configs.size()) {
    const std::size_t comma = std::min(configs.find(',', at), configs.size());
    const std::string name = configs.substr(at, comma - at);
    at = comma + 1;
    const bench::GptShape* cfg = bench::find_gpt_shape(name.c_str());
    if (cfg == nullptr) {
      if (dp.leader()) std::fprintf(stderr, "unknown configuration '%s'\n", name.c_str());
      return dp.finish(2);
    }
    const Row r = measure(*cfg, dp, world, steps);
    // Each rank sends (R−1)/R of the gradient in each of the two phases (one shard per rank).
    const double r_ranks = dp.ranks();
    const double mb_sent = 2.0 * (r_ranks - 1) / r_ranks * double(r.params) * 4 / 1e6;
    if (dp.leader())
      std::printf("%-6s | %10lld | %8.1f | %8.0f | %12.1f | %13.1f | %17.1f\n", r.config,
                  (long long)r.params, 1e3 * r.step_s, double(cfg->batch * cfg->block) / r.step_s,
                  1e3 * r.cpu_s, 1e3 * r.all_reduce_s, mb_sent);
    std::fflush(stdout);
  }
  if (dp.leader()) {
    getloadavg(load, 3);
    std::printf("load average at end %.2f\n", load[0]);
  }
  return dp.finish(0);
}
