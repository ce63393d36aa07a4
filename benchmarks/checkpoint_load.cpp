// benchmarks/checkpoint_load: how long reading a GPT checkpoint into a model takes:
// load_safetensors (read, validate, verify the checksums) + get_gpt_config (bounded) +
// get_parameters (shapes, finite weights). Prints the best of --reps (default 15) in ms. Give it
// any checkpoint of char_gpt or birthplace; the loaders' speed is what docs/io.md quotes.
//
//   build/release/benchmarks/bench_checkpoint_load runs/char_gpt/checkpoint.safetensors
//   build/release/benchmarks/bench_checkpoint_load CHECKPOINT --reps 30
#include <algorithm>
#include <attn/attn.hpp>
#include <attn/io/checkpoint.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0) {
    std::fprintf(stderr, "usage: bench_checkpoint_load CHECKPOINT [--reps N]\n");
    return argc < 2 ? 2 : 0;
  }
  int reps = 15;
  if (argc == 4 && std::strcmp(argv[2], "--reps") == 0) reps = std::atoi(argv[3]);
  if (reps < 1 || (argc != 2 && argc != 4)) {
    std::fprintf(stderr, "error: give CHECKPOINT [--reps N] with N >= 1\n");
    return 2;
  }
  try {
    double best = 1e300;
    attn::index_t parameters = 0;
    for (int i = 0; i < reps; ++i) {
      const auto t = std::chrono::steady_clock::now();
      const attn::io::Safetensors file = attn::io::load_safetensors(argv[1]);
      attn::nn::GPT<attn::nn::CausalSelfAttention> model(attn::io::get_gpt_config(file, argv[1]));
      attn::io::get_parameters(file, model, argv[1]);
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
      parameters = attn::nn::parameter_count(model);
    }
    std::printf("%s: %lld parameters, best of %d: %.1f ms\n", argv[1], (long long)parameters, reps,
                best * 1e3);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
