// benchmarks/train_step: tokens per second of full GPT training steps (forward, backward, gradient
// clipping, AdamW) for the reference configurations A and B, the peak resident memory, the model
// FLOP rate against this machine's SGEMM rate measured in the same run, and the tokens per second
// the step's products would give at that rate (a ceiling: everything else free).
// Does not use Google Benchmark: one configuration per process, so peak RSS belongs to it.
//
//   build/release/benchmarks/bench_train_step --config A --threads 2 --steps 10
//   build/release/benchmarks/bench_train_step --config B --threads 2 --steps 5
//   build/release/benchmarks/bench_train_step --config A --threads 1 --gemm compare --steps 4
//   build/release/benchmarks/bench_train_step --config A --gemm-shapes
//   build/release/benchmarks/bench_train_step --config A --dropout 0.1
//   build/release/benchmarks/bench_train_step --config A --precision bf16
//
// --gemm picks attn::gemm's backend (auto: the library's default; eigen; openblas); compare
// alternates the two, a few steps each, in one process, and reports both (for A/B figures on a
// shared machine: load changes affect both alike). Besides wall-clock tokens/s it prints the
// process CPU seconds per step, which a loaded machine inflates less (at 1 thread).
// --gemm-shapes instead times attn::gemm alone on the configuration's GEMM shapes (one thread,
// CPU time of the calling thread, backends interleaved) and exits. --dropout P trains with dropout
// P on the embeddings, the residual branches and the attention weights (A and B have none; the
// birth-place trainer's model, close to A, uses 0.1). --precision bf16 computes attn::gemm's
// products from bf16 operands (MatmulPrecision::bf16; the SGEMM rate printed is then the bf16 one).
#include <sys/resource.h>

#include <algorithm>
#include <attn/attn.hpp>
#include <attn/optim/optim.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "gpt_options.hpp"

namespace {

using attn::index_t;

using Config = bench::GptShape;

using Attn =
    attn::MultiHeadAttention<attn::score::ScaledDot, attn::kernel::Softmax, attn::mask::Causal,
                             attn::Heads<attn::dynamic>, attn::projection::Separate, float>;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// CPU seconds of the whole process (all threads).
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// CPU seconds of the calling thread.
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// GFLOP/s of attn::gemm per backend, one thread, on the products one training step of `cfg`
// runs (rows = batch · block): the forward projections and their two backward products.
void gemm_shapes(const Config& cfg, const std::vector<attn::GemmBackend>& backends) {
  struct Product {
    const char* what;
    index_t m, n, k;
    bool ta, tb;
  };
  const index_t rows = cfg.batch * cfg.block, d = cfg.embd;
  const Product products[] = {
      {"x Wᵀ, W [D, D]       ", rows, d, d, false, true},
      {"x Wᵀ, W [4D, D] (fc) ", rows, 4 * d, d, false, true},
      {"x Wᵀ, W [D, 4D] (proj)", rows, d, 4 * d, false, true},
      {"dx = dy W, W [D, D]  ", rows, d, d, false, false},
      {"dW = dyᵀ x, [D, D]   ", d, d, rows, true, false},
      {"dW = dyᵀ x, [4D, D]  ", 4 * d, d, rows, true, false},
      {"n = 1024 square      ", 1024, 1024, 1024, false, false},
  };
  attn::set_num_threads(1);
  attn::Rng rng(3);
  std::printf(
      "attn::gemm, 1 thread, GFLOP/s from thread CPU time (median of 5 interleaved rounds)\n");
  std::printf("%-24s %6s %6s %6s", "product", "M", "N", "K");
  for (const attn::GemmBackend b : backends)
    std::printf(" | %-34s", attn::gemm_backend_name(b).c_str());
  std::printf("\n");
  for (const Product& p : products) {
    const auto a = attn::Tensor<float>::randn({p.m * p.k}, rng);
    const auto b = attn::Tensor<float>::randn({p.k * p.n}, rng);
    attn::Tensor<float> c({p.m * p.n});
    std::vector<std::vector<double>> rates(backends.size());
    for (int round = 0; round < 6; ++round)
      for (std::size_t i = 0; i < backends.size(); ++i) {
        attn::set_gemm_backend(backends[i]);
        int reps = 0;
        const double t0 = thread_cpu_seconds();
        do {
          attn::gemm(a.data(), p.ta, b.data(), p.tb, c.data(), p.m, p.n, p.k);
          ++reps;
        } while (thread_cpu_seconds() - t0 < 0.2);
        const double secs = thread_cpu_seconds() - t0;
        if (round > 0) rates[i].push_back(2.0 * double(p.m * p.n * p.k) * reps / secs / 1e9);
      }
    std::printf("%-24s %6lld %6lld %6lld", p.what, (long long)p.m, (long long)p.n, (long long)p.k);
    for (auto& r : rates) {
      std::sort(r.begin(), r.end());
      std::printf(" | %-34.1f", r[r.size() / 2]);
    }
    std::printf("\n");
  }
}

// GFLOP/s of attn's GEMM on n x n float matrices with the current thread count.
double sgemm_gflops(index_t n) {
  attn::Rng rng(1);
  const auto a = attn::Tensor<float>::randn({n, n}, rng),
             b = attn::Tensor<float>::randn({n, n}, rng);
  attn::Tensor<float> c({n, n});
  attn::gemm(a.data(), false, b.data(), false, c.data(), n, n, n);
  const auto t0 = std::chrono::steady_clock::now();
  int reps = 0;
  do {
    attn::gemm(a.data(), false, b.data(), false, c.data(), n, n, n);
    ++reps;
  } while (seconds_since(t0) < 1.0);
  return 2.0 * double(n) * double(n) * double(n) * reps / seconds_since(t0) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  std::string which = "A", gemm = "auto", precision = "float32";
  int threads = 2, steps = 10;
  double dropout = 0.0;
  bool shapes = false;
  CLI::App app{"bench_train_step: tokens/s of full GPT training steps"};
  bench::add_config_option(app, which);
  bench::add_threads_option(app, threads);
  app.add_option("--steps", steps, "timed steps")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  bench::add_gemm_option(app, gemm, {"compare"});
  bench::add_precision_option(app, precision);
  app.add_flag("--gemm-shapes", shapes, "time attn::gemm alone on the configuration's shapes");
  app.add_option("--dropout", dropout, "dropout while training (embeddings, residuals, weights)")
      ->check(CLI::Range(0.0, 0.95))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const Config* cfg = bench::find_gpt_shape(which.c_str());
  attn::set_num_threads(threads);
  bench::set_precision(precision);
  // The backends to time, in turn.
  std::vector<attn::GemmBackend> backends{attn::gemm_backend()};
  if (gemm == "eigen") backends = {attn::GemmBackend::eigen};
  if (gemm == "openblas") backends = {attn::GemmBackend::openblas};
  if (gemm == "compare") backends = {attn::GemmBackend::eigen, attn::GemmBackend::openblas};
  if (shapes) {
    if (gemm == "auto" && attn::have_openblas())
      backends = {attn::GemmBackend::eigen, attn::GemmBackend::openblas};
    gemm_shapes(*cfg, backends);
    return 0;
  }

  attn::nn::GPTConfig config = bench::gpt_config(*cfg);
  config.dropout = dropout;
  attn::nn::GPT<Attn> model(config);
  auto params = attn::optim::parameters_of<float>(model);
  attn::optim::AdamConfig ac;
  ac.lr = 1e-4;
  ac.weight_decay = 0.1;
  attn::optim::AdamW<float> opt(params, ac);
  attn::Tensor<std::int32_t> x({cfg->batch, cfg->block}), y({cfg->batch, cfg->block});
  attn::Rng rng(2);
  for (index_t i = 0; i < x.numel(); ++i) {
    x[i] = std::int32_t(rng.uniform_int(std::uint64_t(cfg->vocab)));
    y[i] = std::int32_t(rng.uniform_int(std::uint64_t(cfg->vocab)));
  }
  attn::Tape<float> tape;
  double loss = 0;
  auto step = [&] {
    tape.clear();
    const auto l = model.loss(tape, x, y);
    tape.backward(l);
    attn::optim::clip_grad_norm(params, 1.0);
    opt.step();
    opt.zero_grad();
    loss = l.item();
  };
  attn::set_gemm_backend(backends.front());
  step();  // warm-up: the tape and the optimizer allocate their buffers here
  step();
  // Per backend: wall seconds, CPU seconds, steps. With two backends, rounds of two steps each
  // alternate until every backend has run `steps` steps.
  std::vector<double> wall(backends.size()), cpu(backends.size());
  std::vector<int> done(backends.size());
  const int chunk = backends.size() > 1 ? 2 : steps;
  for (int round = 0; done.back() < steps; ++round)
    for (std::size_t b = 0; b < backends.size(); ++b) {
      attn::set_gemm_backend(backends[b]);
      if (backends.size() > 1) step();  // one untimed step after switching
      const int n = std::min(chunk, steps - done[b]);
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = cpu_seconds();
      for (int s = 0; s < n; ++s) step();
      wall[b] += seconds_since(t0);
      cpu[b] += cpu_seconds() - c0;
      done[b] += n;
    }
  const double tokens = double(cfg->batch * cfg->block) * steps;

  // Model FLOPs per token (PaLM appendix B): 6·N for the matmuls with the N non-embedding weights
  // (forward 2N, backward 4N) plus 12·L·T·D for the attention scores and weighted values, causal
  // or not (the convention counts the full T x T product).
  const index_t n =
      attn::nn::parameter_count(model) - cfg->vocab * cfg->embd - cfg->block * cfg->embd;
  const double flops_per_token = 6.0 * double(n + cfg->vocab * cfg->embd) +
                                 12.0 * double(cfg->layers * cfg->block * cfg->embd);
  // The FLOPs the step performs in products, for the most it could reach at the SGEMM rate: the
  // same 6 per weight and token, but only the causal half of each T x T product, and the fused
  // backward's products as it runs them: the scores recomputed (unless the weights are kept),
  // dP, dV, dK and dQ, each 2·T·D per token and layer like the forward's two.
  const double T = double(cfg->block), D = double(cfg->embd);
  const bool kept =
      double(cfg->batch) * double(cfg->heads) * T * T <= double(attn::attn_saved_weights_limit);
  const double product_flops_per_token =
      6.0 * (12.0 * double(cfg->layers) * D * D + double(cfg->vocab) * D) +
      double(cfg->layers) * T * D * (kept ? 12.0 : 14.0) / 2.0;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double peak_gib = double(ru.ru_maxrss) / (1024.0 * 1024.0);
  double load[3] = {0, 0, 0};
  const bool have_load = getloadavg(load, 3) == 3;
  std::printf(
      "config %s (vocab %lld, %lld layers, %lld heads, %lld embd, block %lld, batch %lld, "
      "dropout %g), %d threads, %d steps, products %s; load average %.2f\n"
      "  loss %.4f | peak RSS %.2f GiB\n",
      cfg->name, (long long)cfg->vocab, (long long)cfg->layers, (long long)cfg->heads,
      (long long)cfg->embd, (long long)cfg->block, (long long)cfg->batch, dropout, threads, steps,
      attn::matmul_precision_name().c_str(), have_load ? load[0] : -1.0, loss, peak_gib);
  for (std::size_t b = 0; b < backends.size(); ++b) {
    attn::set_gemm_backend(backends[b]);
    const double model_gflops = flops_per_token * tokens / wall[b] / 1e9;
    const double sgemm = sgemm_gflops(1024);
    const double ceiling = sgemm * 1e9 / product_flops_per_token;  // tokens/s
    std::printf(
        "  GEMM %s:\n"
        "    tokens/s %.0f | %.1f ms/step | %.1f CPU ms/step\n"
        "    model %.1f GFLOP/s = %.0f%% of attn SGEMM (n = 1024, same threads) %.1f GFLOP/s\n"
        "    its products at that SGEMM rate: tokens/s %.0f (the step measured: %.0f%% of it)\n",
        attn::gemm_backend_name().c_str(), tokens / wall[b], 1e3 * wall[b] / steps,
        1e3 * cpu[b] / steps, model_gflops, 100 * model_gflops / sgemm, sgemm, ceiling,
        100 * tokens / wall[b] / ceiling);
  }
}
