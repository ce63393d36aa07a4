// examples/common/model_config.hpp: a GPT configuration from the model options the example
// trainers share (vocabulary, block, layers, heads, width, dropout, seed), and back: the options
// a checkpoint's model stands for, which a run from that checkpoint may not contradict.
// Does not check the options: the trainers and GPT's constructor do.
#pragma once

#include <attn/nn/transformer.hpp>

#include <attn/train/settings.hpp>

#include <cstdint>
#include <map>
#include <string>

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

// The options --layers, --heads, --embd and --block of a checkpoint's model, for
// attn::train::Settings::check_given (a trainer adds the other model options it has). With
// `resuming`, --dropout too: a new run from the weights picks its own.
inline std::map<std::string, std::string> model_values(const attn::nn::GPTConfig& c,
                                                       bool resuming) {
  std::map<std::string, std::string> v{{"layers", std::to_string(c.layers)},
                                       {"heads", std::to_string(c.heads)},
                                       {"embd", std::to_string(c.d_model)},
                                       {"block", std::to_string(c.block_size)}};
  if (resuming) v["dropout"] = attn::train::shortest_text(c.dropout);
  return v;
}

}  // namespace examples
