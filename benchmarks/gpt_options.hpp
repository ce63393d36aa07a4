// benchmarks/gpt_options.hpp: the command-line options bench_train_step and bench_generate share
// (CLI11): the GPT configuration by name, the thread count, and attn::gemm's backend.
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

}  // namespace bench
