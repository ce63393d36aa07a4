// benchmarks/hf_generate: tokens per second of greedy generation with the key/value cache from a
// model of a Hugging Face config.json (io::hf::make_model: GPT-2 or Llama, random weights, which
// do not change the speed), the attn side of benchmarks/hf_generate.py (transformers).
//
//   build/release/benchmarks/bench_hf_generate --model benchmarks/hf_shapes/gpt2-124m
//       --threads 2 --prompt 16 --tokens 128     (one command line)
//
// The prompt is tokens 1, 2, ..., --prompt. One untimed call, then --reps timed calls (default
// 3); prints the median's tokens/s (new tokens over the call's seconds, the prompt's pass
// included, as transformers' generate is timed).
#include <CLI/CLI.hpp>
#include <attn/io/hf.hpp>
#include <attn/nn/generate.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  std::string model_dir;
  int threads = 2, reps = 3;
  attn::index_t prompt_length = 16, tokens = 128;
  CLI::App app{"bench_hf_generate: tokens/s of greedy generation from a Hugging Face config"};
  app.add_option("--model", model_dir, "directory with config.json")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--threads", threads, "OpenMP threads")->check(CLI::Range(1, 256));
  app.add_option("--prompt", prompt_length, "prompt tokens")->check(CLI::Range(1, 1 << 20));
  app.add_option("--tokens", tokens, "new tokens")->check(CLI::Range(1, 1 << 20));
  app.add_option("--reps", reps, "timed calls (median)")->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);
  try {
    attn::set_num_threads(threads);
    const attn::io::hf::Config config = attn::io::hf::read_config(model_dir);
    attn::io::hf::Model<float> model = attn::io::hf::make_model<float>(config);
    model.set_training(false);
    std::vector<std::int32_t> prompt;
    for (attn::index_t i = 0; i < prompt_length; ++i)
      prompt.push_back(std::int32_t((i + 1) % config.model.vocab_size));
    attn::nn::SampleConfig s;
    s.max_tokens = tokens;
    s.temperature = 0;
    (void)attn::nn::generate(model, prompt, s);  // untimed
    std::vector<double> seconds;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<std::int32_t> out = attn::nn::generate(model, prompt, s);
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (attn::index_t(out.size()) != tokens) return 1;
    }
    std::sort(seconds.begin(), seconds.end());
    const double median = seconds[seconds.size() / 2];
    std::printf(
        "attn %s (%s, %lld parameters), %d threads, prompt %lld, %lld new tokens: "
        "%.1f tokens/s (%.3f s)\n",
        model_dir.c_str(),
        config.architecture == attn::io::hf::Architecture::gpt2 ? "gpt2" : "llama",
        (long long)attn::nn::parameter_count(model), threads, (long long)prompt_length,
        (long long)tokens, double(tokens) / median, median);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
