// examples/common/model_config.hpp: a GPT configuration from the model options the example
// trainers share (vocabulary, block, layers, heads, width, dropout, seed).
// Does not check the options: the trainers and GPT's constructor do.
#pragma once

#include <attn/nn/transformer.hpp>

#include <cstdint>

namespace examples {

// A GPT configuration from a trainer's model options (everything else at GPTConfig's defaults).
struct ModelShape {
  attn::index_t vocab = 0, block = 0, layers = 0, heads = 0, d_model = 0;
  double dropout = 0;
  std::uint64_t seed = 0;
};
inline attn::nn::GPTConfig gpt_config(const ModelShape& m) {
  attn::nn::GPTConfig c;
  c.vocab_size = m.vocab;
  c.block_size = m.block;
  c.layers = m.layers;
  c.heads = m.heads;
  c.d_model = m.d_model;
  c.dropout = m.dropout;
  c.seed = m.seed;
  return c;
}

}  // namespace examples
