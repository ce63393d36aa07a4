// examples/common/attention_names.hpp: the one registry of the attention variants the example
// programs offer by name (--attention standard, poly2, linear, ...; birthplace's --variant), with
// one line of help each and the aliases a program's own vocabulary adds ("vanilla", the problem
// set's name for minGPT's attention). Light on purpose: a command line lists and checks the names
// without compiling the modules; attention_variants.hpp gives each entry its module type, in the
// same order.
#pragma once

#include <attn/core/error.hpp>

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace examples {

struct AttentionName {
  const char* name;
  const char* help;
};

// The variants; attention_variants.hpp's AttentionTypes lists their types in this order.
inline constexpr AttentionName attention_registry[] = {
    {"standard", "scaled dot product, softmax (exponential kernel), separate W_Q and W_K"},
    {"symmetric", "tied W_Q = W_K (symmetric scores), softmax"},
    {"euclidean", "negative squared Euclidean distance -|q-k|^2, softmax"},
    {"poly2", "degree-2 polynomial kernel (q.k/sqrt(d))^2, normalised (materialised weights)"},
    {"linear", "elu(x)+1 feature maps, O(T) causal linear attention"},
    {"synthesizer", "dense synthesizer: scores ReLU(x A + b1) B + b2 from each token alone"},
    {"rotary", "rotary positions (RoPE): q, k turned by their positions (use --positions none)"},
    {"alibi", "ALiBi: scaled dot minus a per-head slope times the distance (--positions none)"},
    {"cosine", "cosine of q and k times a learned per-head scale (query-key normalisation)"},
    {"bilinear", "bilinear q^T W_h k / sqrt(d), a learned W_h per head (identity at start)"},
    {"additive", "additive (MLP) score w^T tanh(W1 q + W2 k), materialised weights"},
    {"linformer32", "Linformer: keys and values projected along time to 32 rows (causal)"},
    {"sink", "scaled dot with a learned sink logit per head in the softmax (attention sinks)"},
    {"t5bias",
     "scaled dot plus T5's learned relative-position buckets (32, causal; --positions none)"},
    {"alibi-learned",
     "ALiBi with learned per-head slopes, the paper's at the start "
     "(--positions none)"},
    {"rotary-halves",
     "rotary positions in GPT-NeoX's and Llama's half-split layout (Llama's attention; "
     "--positions none)"},
    {"euclidean-scaled",
     "negative squared Euclidean distance at the scaled dot's temperature -|q-k|^2/sqrt(d)"},
    {"linear-scaled",
     "elu(x)+1 feature maps of g q and g k, g a learned scale per head (1 at the start), O(T)"},
};

// Another name of a registry entry.
struct AttentionAlias {
  const char* alias;
  const char* name;
};
inline constexpr AttentionAlias attention_aliases[] = {
    {"vanilla", "standard"},  // the birth-place problem set's name (minGPT's CausalSelfAttention)
};

// The registry position of `name` or of the variant it is an alias of; value_error when it is
// neither.
inline std::size_t attention_index(std::string_view name) {
  for (const AttentionAlias& a : attention_aliases)
    if (name == a.alias) name = a.name;
  for (std::size_t i = 0; i < std::size(attention_registry); ++i)
    if (name == attention_registry[i].name) return i;
  throw attn::value_error("unknown attention '" + std::string(name) + "'");
}

// name -> one line of help, in the order --help lists them (by name); with `aliases`, the
// aliases too, each described as the variant it stands for.
inline std::map<std::string, std::string> attention_help(bool aliases = false) {
  std::map<std::string, std::string> help;
  for (const AttentionName& a : attention_registry) help.emplace(a.name, a.help);
  if (aliases)
    for (const AttentionAlias& a : attention_aliases)
      help.emplace(a.alias, std::string("the same as ") + a.name);
  return help;
}

// The help of an option that takes a variant: "\n  name: help" for each, in attention_help's
// order.
inline std::string attention_choices_help(bool aliases = false) {
  std::string text;
  for (const auto& [name, help] : attention_help(aliases)) text += "\n  " + name + ": " + help;
  return text;
}

// The names a command line accepts (with `aliases`, the aliases too).
inline std::vector<std::string> attention_names(bool aliases = false) {
  std::vector<std::string> names;
  for (const auto& [name, help] : attention_help(aliases)) names.push_back(name);
  return names;
}

}  // namespace examples
