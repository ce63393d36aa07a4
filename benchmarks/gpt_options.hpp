// benchmarks/gpt_options.hpp: the command-line options bench_train_step and bench_generate share
// (CLI11): the GPT configuration by name, the thread count, attn::gemm's backend and precision.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "gpt_configs.hpp"

namespace bench {

// --config NAME, one of gpt_shapes' names.
inline CLI::Option* add_config_option(CLI::App& app, std::string& name) {
  std::vector<std::string> names;
  for (const GptShape& s : gpt_shapes) names.emplace_back(s.name);
  return app.add_option("--config", name, "GPT configuration")
      ->check(CLI::IsMember(names))
      ->capture_default_str();
}

// --threads N, OpenMP threads.
inline CLI::Option* add_threads_option(CLI::App& app, int& threads) {
  return app.add_option("--threads", threads, "OpenMP threads")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
}

// --gemm: auto (the library's default backend), eigen, openblas (when attn was built with it),
// and the benchmark's own `extra` choices where OpenBLAS is there.
inline CLI::Option* add_gemm_option(CLI::App& app, std::string& gemm,
                                    const std::vector<std::string>& extra = {}) {
  std::vector<std::string> choices{"auto", "eigen"};
  if (attn::have_openblas()) {
    choices.emplace_back("openblas");
    choices.insert(choices.end(), extra.begin(), extra.end());
  }
  return app.add_option("--gemm", gemm, "attn::gemm's backend")
      ->check(CLI::IsMember(choices))
      ->capture_default_str();
}

// --precision of attn's float products: float32, or bf16 (where the CPU has AVX512_BF16; else
// float32, which the output names).
inline CLI::Option* add_precision_option(CLI::App& app, std::string& precision) {
  return app.add_option("--precision", precision, "attn's matrix products: float32 or bf16")
      ->check(CLI::IsMember({"float32", "bf16"}))
      ->capture_default_str();
}

// Applies --precision.
inline void set_precision(const std::string& precision) {
  attn::set_matmul_precision(precision == "bf16" ? attn::MatmulPrecision::bf16
                                                 : attn::MatmulPrecision::float32);
}

}  // namespace bench
