// examples/common/model_config.hpp: a GPT configuration from the model options the example
// trainers share (vocabulary, block, layers, heads, width, dropout, seed), and back: the options
// a checkpoint's model stands for, which a run from that checkpoint may not contradict; the
// configuration a run trains, new or from a checkpoint's model, checked against the options.
// Does not check the options' ranges: the settings tables and GPT's constructor do.
#pragma once

#include <attn/nn/transformer.hpp>

#include <attn/train/settings.hpp>

#include <cstdint>
#include <map>
#include <optional>
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

// The configuration a run trains. A new model (`saved` empty): `shape`'s, --heads dividing
// --embd. A run from a checkpoint's model (`saved`, read from `source`): that model, whose
// vocabulary must be the tokenizer's (`shape.vocab`; io_error), with no model option given now
// contradicting it (Settings::check_given on model_values and `extra`, the program's other model
// options as the checkpoint's model has them: a value_error naming both values); a new run from
// its weights (not `resuming`) picks its own dropout.
inline attn::nn::GPTConfig run_config(const std::optional<attn::nn::GPTConfig>& saved,
                                      const std::string& source, bool resuming,
                                      const attn::train::Settings& settings,
                                      const ModelShape& shape,
                                      std::map<std::string, std::string> extra = {}) {
  if (!saved) {
    ATTN_CHECK(shape.heads > 0 && shape.d_model % shape.heads == 0, attn::value_error, "--heads ",
               shape.heads, " does not divide --embd ", shape.d_model);
    return gpt_config(shape);
  }
  extra.merge(model_values(*saved, resuming));
  settings.check_given(extra, source,
                       resuming ? "a resumed run keeps its settings (the model comes from the "
                                  "checkpoint)"
                                : "a run from a checkpoint's weights keeps its model");
  ATTN_CHECK(saved->vocab_size == shape.vocab, attn::io_error, source, ": config.vocab_size ",
             saved->vocab_size, " differs from its vocabulary's ", shape.vocab, " characters");
  attn::nn::GPTConfig c = *saved;
  if (!resuming) c.dropout = shape.dropout;
  return c;
}

}  // namespace examples
