// examples/common/attention_variants.hpp: the attention variants the example trainers offer by
// name (--attention standard, poly2, linear, ...), and the calls that pick one at run time, so
// a program that trains a model and one that loads its checkpoint agree on what a name means.
// Does not build models or read checkpoints; the programs do.
#pragma once

#include <attn/approx/linformer.hpp>
#include <attn/attn.hpp>

#include <map>
#include <string>
#include <vector>

namespace examples {

template <class Score, class Kernel, class Projection>
using CausalMha = attn::MultiHeadAttention<Score, Kernel, attn::mask::Causal,
                                           attn::Heads<attn::dynamic>, Projection, float>;
using Standard =
    CausalMha<attn::score::ScaledDot, attn::kernel::Softmax, attn::projection::Separate>;
using Symmetric = CausalMha<attn::score::ScaledDot, attn::kernel::Softmax, attn::projection::Tied>;
using Euclidean =
    CausalMha<attn::score::NegSqEuclidean, attn::kernel::Softmax, attn::projection::Separate>;
using Poly2 =
    CausalMha<attn::score::ScaledDot, attn::kernel::Polynomial<2>, attn::projection::Separate>;
using Linear =
    CausalMha<attn::score::ScaledDot, attn::kernel::EluPlusOne, attn::projection::Separate>;
using Rotary = CausalMha<attn::score::Rotary, attn::kernel::Softmax, attn::projection::Separate>;
using Alibi = CausalMha<attn::score::Alibi, attn::kernel::Softmax, attn::projection::Separate>;
using Cosine = CausalMha<attn::score::Cosine, attn::kernel::Softmax, attn::projection::Separate>;
using Bilinear =
    CausalMha<attn::score::Bilinear, attn::kernel::Softmax, attn::projection::Separate>;
using Additive =
    CausalMha<attn::score::Additive, attn::kernel::Softmax, attn::projection::Separate>;
using Synthesizer =
    CausalMha<attn::score::Synthesizer, attn::kernel::Softmax, attn::projection::Separate>;
template <attn::index_t K>
using Linformer =
    attn::approx::LinformerAttention<K, attn::mask::Causal, attn::Heads<attn::dynamic>, float>;

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

// Calls f.template operator()<Attn>() with the module type a name stands for.
template <class F>
int with_attention(const std::string& name, F&& f) {
  if (name == "standard") return f.template operator()<Standard>();
  if (name == "symmetric") return f.template operator()<Symmetric>();
  if (name == "euclidean") return f.template operator()<Euclidean>();
  if (name == "poly2") return f.template operator()<Poly2>();
  if (name == "linear") return f.template operator()<Linear>();
  if (name == "synthesizer") return f.template operator()<Synthesizer>();
  if (name == "rotary") return f.template operator()<Rotary>();
  if (name == "alibi") return f.template operator()<Alibi>();
  if (name == "cosine") return f.template operator()<Cosine>();
  if (name == "bilinear") return f.template operator()<Bilinear>();
  if (name == "additive") return f.template operator()<Additive>();
  if (name == "linformer32") return f.template operator()<Linformer<32>>();
  throw attn::value_error("unknown attention '" + name + "'");
}

}  // namespace examples
