// examples/char_gpt/export_hf.cpp: see export_hf.hpp.
#include "export_hf.hpp"

#include <attn/io/hf.hpp>

namespace char_gpt {

namespace nn = attn::nn;

std::string arch_of(const nn::GPTConfig& c) {
  if (c.norm == nn::NormKind::layer && c.feed_forward == nn::FeedForwardKind::gelu_tanh &&
      c.tie_weights && c.bias && c.positions == nn::PositionEncoding::learned)
    return "gpt2";
  if (c.norm == nn::NormKind::rms && c.feed_forward == nn::FeedForwardKind::swiglu && !c.bias &&
      c.positions == nn::PositionEncoding::none)
    return "llama";
  return "char_gpt";
}

void apply_arch(nn::GPTConfig& c, const std::string& arch) {
  if (arch == "gpt2") {
    c.feed_forward = nn::FeedForwardKind::gelu_tanh;
    c.tie_weights = true;
  } else if (arch == "llama") {
    c.norm = nn::NormKind::rms;
    c.norm_eps = 1e-5;
    c.feed_forward = nn::FeedForwardKind::swiglu;
    c.hidden = (8 * c.d_model / 3 + 7) / 8 * 8;
    c.bias = false;
    c.tie_weights = false;
  }
}

std::string arch_attention(const std::string& arch) {
  return arch == "gpt2" ? "standard" : arch == "llama" ? "rotary-halves" : "";
}

void export_hf(const std::string& dir, nn::GPT<examples::AnyCausal>& model) {
  namespace hf = attn::io::hf;
  const std::string arch = arch_of(model.config());
  ATTN_CHECK(arch != "char_gpt", attn::value_error,
             "char_gpt: --export-hf writes a gpt2 or llama model, not the demo's architecture");
  hf::save_model(dir,
                 hf::config_of(model.config(),
                               arch == "gpt2" ? hf::Architecture::gpt2 : hf::Architecture::llama),
                 model);
}

}  // namespace char_gpt
