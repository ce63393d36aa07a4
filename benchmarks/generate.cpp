// benchmarks/generate: tokens per second of sampling text from a GPT with and without the
// key/value cache (nn::generate, SampleConfig::use_cache), the ratio measured in the same run.
// Does not train: the weights are the random initialisation (speed does not depend on them).
//
//   build/release/benchmarks/bench_generate --config B --threads 2 --tokens 500
//   build/release/benchmarks/bench_generate --config A --threads 2 --prompt 16 --tokens 256
//
// The prompt is tokens 1, 2, ..., --prompt (default 1). Each path runs once untimed; the cached
// one is then timed --reps times (default 5; the median is printed, one call takes a fraction of
// a second), the uncached one once. --gemm picks attn::gemm's backend (auto: the library's
// default; eigen; openblas). benchmarks/torch_generate.py is the PyTorch side
// (benchmarks/vs_torch.py generate runs both).
#include <algorithm>
#include <attn/attn.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpt_configs.hpp"

namespace {

using attn::index_t;

using Config = bench::GptShape;

using Attn =
    attn::MultiHeadAttention<attn::score::ScaledDot, attn::kernel::Softmax, attn::mask::Causal,
                             attn::Heads<attn::dynamic>, attn::projection::Separate, float>;

}  // namespace

int main(int argc, char** argv) {
  std::string which = "B";
  int threads = 2;
  index_t tokens = 500, prompt_length = 1;
  int reps = 5;
  std::string gemm = "auto";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--config"))
      which = argv[i + 1];
    else if (!std::strcmp(argv[i], "--threads"))
      threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--tokens"))
      tokens = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--prompt"))
      prompt_length = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps"))
      reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--gemm"))
      gemm = argv[i + 1];
    else {
      std::fprintf(
          stderr,
          "usage: %s [--config demo|A|B] [--threads N] [--prompt N] [--tokens N] [--reps R] "
          "[--gemm auto|eigen|openblas]\n",
          argv[0]);
      return 2;
    }
  }
  const Config* cfg = bench::find_gpt_shape(which.c_str());
  const bool gemm_ok =
      gemm == "auto" || gemm == "eigen" || (gemm == "openblas" && attn::have_openblas());
  if (cfg == nullptr || threads < 1 || tokens < 1 || reps < 1 || prompt_length < 1 ||
      prompt_length > cfg->block || !gemm_ok) {
    std::fprintf(stderr,
                 "bad arguments (config demo, A or B; threads, tokens, reps >= 1; 1 <= prompt <= "
                 "the configuration's block; gemm auto, eigen, or openblas when built with "
                 "OpenBLAS)\n");
    return 2;
  }
  attn::set_num_threads(threads);
  if (gemm == "eigen") attn::set_gemm_backend(attn::GemmBackend::eigen);
  if (gemm == "openblas") attn::set_gemm_backend(attn::GemmBackend::openblas);

  attn::nn::GPT<Attn> model(bench::gpt_config(*cfg));
  std::vector<std::int32_t> prompt(static_cast<std::size_t>(prompt_length));
  for (index_t i = 0; i < prompt_length; ++i)
    prompt[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i + 1) % cfg->vocab);

  std::printf(
      "config %s (vocab %lld, %lld layers, %lld heads, %lld embd, block %lld), %d threads, "
      "%lld tokens from a %lld-token prompt, GEMM: %s\n",
      cfg->name, (long long)cfg->vocab, (long long)cfg->layers, (long long)cfg->heads,
      (long long)cfg->embd, (long long)cfg->block, threads, (long long)tokens,
      (long long)prompt_length, attn::gemm_backend_name().c_str());
  double rate[2] = {0, 0};
  std::vector<std::int32_t> drawn[2];
  for (const bool cached : {true, false}) {
    attn::nn::SampleConfig s;
    s.max_tokens = tokens;
    s.temperature = 0.8;
    s.seed = 7;
    s.use_cache = cached;
    attn::nn::generate(model, prompt, s);  // warm-up
    std::vector<double> times;
    for (int r = 0; r < (cached ? reps : 1); ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      drawn[cached] = attn::nn::generate(model, prompt, s);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    const double secs = times[times.size() / 2];
    rate[cached] = double(drawn[cached].size()) / secs;
    std::printf("  %-8s %9.0f tokens/s  (%.3f s)\n", cached ? "cache" : "no cache", rate[cached],
                secs);
  }
  std::printf("  cache / no cache: %.1fx\n", rate[1] / rate[0]);
  // Beyond the block the two samplers see different contexts (the cached one restarts from half
  // a block), so their draws are compared only up to there.
  const std::size_t same = std::size_t(std::min<index_t>(tokens, cfg->block - prompt_length));
  const bool agree =
      std::equal(drawn[0].begin(), drawn[0].begin() + std::ptrdiff_t(same), drawn[1].begin());
  std::printf("  the first %zu tokens agree: %s\n", same, agree ? "yes" : "NO");
  return agree ? 0 : 1;
}
