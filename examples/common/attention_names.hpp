// examples/common/attention_names.hpp: the names of the attention variants the example trainers
// offer (--attention standard, poly2, linear, ...) with one line of help each, for a command line
// that need not compile the modules: attention_variants.hpp maps the names to module types.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace examples {

// name -> one line of help, in the order --help lists them.
inline const std::map<std::string, std::string>& attention_help() {
  static const std::map<std::string, std::string> help{
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
  };
  return help;
}

inline std::vector<std::string> attention_names() {
  std::vector<std::string> names;
  for (const auto& [name, help] : attention_help()) names.push_back(name);
  return names;
}

}  // namespace examples
