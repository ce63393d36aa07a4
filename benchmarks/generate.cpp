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
#include <string>
#include <vector>

#include "gpt_options.hpp"

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
  CLI::App app{"bench_generate: tokens/s of GPT sampling with and without the key/value cache"};
  bench::add_config_option(app, which);
  bench::add_threads_option(app, threads);
  app.add_option("--tokens", tokens, "new tokens per call")
      ->check(CLI::Range(index_t{1}, index_t{1} << 30))
      ->capture_default_str();
  app.add_option("--prompt", prompt_length, "prompt length (at most the configuration's block)")
      ->check(CLI::Range(index_t{1}, index_t{1} << 30))
      ->capture_default_str();
  app.add_option("--reps", reps, "timed calls with the cache (median)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  bench::add_gemm_option(app, gemm);
  CLI11_PARSE(app, argc, argv);
  const Config* cfg = bench::find_gpt_shape(which.c_str());
  if (prompt_length > cfg->block) {
    std::fprintf(stderr, "--prompt %lld: at most the configuration's block, %lld\n",
                 static_cast<long long>(prompt_length), static_cast<long long>(cfg->block));
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
