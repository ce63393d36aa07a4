// examples/char_gpt/export_hf.hpp: char_gpt's architectures (--arch) and its export to the Hugging
// Face format (--export-hf), in a file of their own so that train.cpp does not parse the JSON
// library and the two compile side by side.
#pragma once

#include <attn/nn/transformer.hpp>

#include <string>

#include "../common/attention_variants.hpp"

namespace char_gpt {

// The architecture a model's configuration is: "gpt2", "llama", or "char_gpt" (the demo's).
std::string arch_of(const attn::nn::GPTConfig& c);

// A new model's configuration `c` made into architecture `arch` (gpt2: tanh GELU, tied head;
// llama: RMSNorm, SwiGLU of width 8·d_model/3 rounded up to a multiple of 8, no biases, untied
// head; char_gpt: as it is).
void apply_arch(attn::nn::GPTConfig& c, const std::string& arch);

// The attention variant an architecture's format holds ("" for char_gpt, which has none).
std::string arch_attention(const std::string& arch);

// Writes `model` (architecture gpt2 or llama, attention arch_attention's) into `dir` as
// transformers saves it (attn::io::hf::save_model).
void export_hf(const std::string& dir, attn::nn::GPT<examples::AnyCausal>& model);

}  // namespace char_gpt
