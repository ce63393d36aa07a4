// benchmarks/gpt_configs.hpp: the GPT configurations the benchmarks share (the reference A and B,
// and scripts/demo's char_gpt default), looked up by name, and the nn::GPTConfig of each.
// Does not parse command lines or time anything: each benchmark does its own.
#pragma once

#include <attn/attn.hpp>

#include <cstring>

namespace bench {

using attn::index_t;

struct GptShape {
  const char* name;
  index_t vocab, layers, heads, embd, block, batch;
};

// demo: scripts/demo's char_gpt default; A and B: the reference configurations of the training
// benchmarks.
inline constexpr GptShape gpt_shapes[] = {
    {"demo", 65, 4, 4, 128, 64, 32}, {"A", 256, 4, 8, 256, 128, 32}, {"B", 65, 6, 6, 384, 256, 16}};

// The shape called `name`, or nullptr.
inline const GptShape* find_gpt_shape(const char* name) {
  for (const GptShape& s : gpt_shapes)
    if (std::strcmp(name, s.name) == 0) return &s;
  return nullptr;
}

// Seed 1, everything else at GPTConfig's defaults.
inline attn::nn::GPTConfig gpt_config(const GptShape& s) {
  attn::nn::GPTConfig c;
  c.vocab_size = s.vocab;
  c.block_size = s.block;
  c.layers = s.layers;
  c.heads = s.heads;
  c.d_model = s.embd;
  c.seed = 1;
  return c;
}

}  // namespace bench
