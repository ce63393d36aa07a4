// benchmarks/train_step: tokens per second of full GPT training steps (forward, backward, gradient
// clipping, AdamW) for the reference configurations, the peak resident memory, and the
// model FLOP rate against this machine's SGEMM rate measured in the same run.
// Does not use Google Benchmark: one configuration per process, so peak RSS belongs to it.
//
//   build/release/benchmarks/bench_train_step --config A --threads 2 --steps 10
//   build/release/benchmarks/bench_train_step --config B --threads 2 --steps 5
#include <sys/resource.h>

#include <attn/attn.hpp>
#include <attn/optim/optim.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

namespace {

using attn::index_t;

struct Config {
  const char* name;
  index_t vocab, layers, heads, embd, block, batch;
};
constexpr Config configs[] = {{"A", 256, 4, 8, 256, 128, 32}, {"B", 65, 6, 6, 384, 256, 16}};

using Attn =
    attn::MultiHeadAttention<attn::score::ScaledDot, attn::kernel::Softmax, attn::mask::Causal,
                             attn::Heads<attn::dynamic>, attn::projection::Separate, float>;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
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
  std::string which = "A";
  int threads = 2, steps = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--config"))
      which = argv[i + 1];
    else if (!std::strcmp(argv[i], "--threads"))
      threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--steps"))
      steps = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--config A|B] [--threads N] [--steps N]\n", argv[0]);
      return 2;
    }
  }
  const Config* cfg = nullptr;
  for (const Config& c : configs)
    if (which == c.name) cfg = &c;
  if (cfg == nullptr || threads < 1 || steps < 1) {
    std::fprintf(stderr, "bad arguments (config A or B, threads >= 1, steps >= 1)\n");
    return 2;
  }
  attn::set_num_threads(threads);

  attn::nn::GPTConfig c;
  c.vocab_size = cfg->vocab;
  c.block_size = cfg->block;
  c.layers = cfg->layers;
  c.heads = cfg->heads;
  c.d_model = cfg->embd;
  c.seed = 1;
  attn::nn::GPT<Attn> model(c);
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
  step();  // warm-up: the tape and the optimizer allocate their buffers here
  step();
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) step();
  const double secs = seconds_since(t0);
  const double tokens = double(cfg->batch * cfg->block) * steps;

  // Model FLOPs per token (PaLM appendix B): 6·N for the matmuls with the N non-embedding weights
  // (forward 2N, backward 4N) plus 12·L·T·D for the attention scores and weighted values, causal
  // or not (the convention counts the full T x T product).
  const index_t n =
      attn::nn::parameter_count(model) - cfg->vocab * cfg->embd - cfg->block * cfg->embd;
  const double flops_per_token = 6.0 * double(n + cfg->vocab * cfg->embd) +
                                 12.0 * double(cfg->layers * cfg->block * cfg->embd);
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double peak_gib = double(ru.ru_maxrss) / (1024.0 * 1024.0);
  const double model_gflops = flops_per_token * tokens / secs / 1e9;
  const double gemm = sgemm_gflops(1024);
  std::printf(
      "config %s (vocab %lld, %lld layers, %lld heads, %lld embd, block %lld, batch %lld), "
      "%d threads, %d steps\n"
      "  tokens/s %.0f | %.1f ms/step | loss %.4f | peak RSS %.2f GiB\n"
      "  model %.1f GFLOP/s = %.0f%% of attn SGEMM (n = 1024, same threads) %.1f GFLOP/s\n",
      cfg->name, (long long)cfg->vocab, (long long)cfg->layers, (long long)cfg->heads,
      (long long)cfg->embd, (long long)cfg->block, (long long)cfg->batch, threads, steps,
      tokens / secs, 1e3 * secs / steps, loss, peak_gib, model_gflops, 100 * model_gflops / gemm,
      gemm);
}
