// examples/common/attention_variants.hpp: the attention variants the example trainers offer by
// name (--attention standard, poly2, linear, ...), and the calls that pick one at run time, so
// a program that trains a model and one that loads its checkpoint agree on what a name means.
// Does not build models or read checkpoints; the programs do.
#pragma once

#include <attn/approx/linformer.hpp>
#include <attn/attn.hpp>

#include "attention_names.hpp"

#include <map>
#include <string>
#include <vector>

namespace examples {

template <class Score, class Kernel, class Projection>
using CausalMha = attn::MultiHeadAttention<Score, Kernel, attn::mask::Causal,
                                           attn::Heads<attn::dynamic>, Projection, float>;
using Standard = attn::nn::CausalSelfAttention;
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

// Calls f.template operator()<Attn>() with the module type a name stands for.
template <class F>
decltype(auto) with_attention(const std::string& name, F&& f) {
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

// Every variant behind one type: a trainer that builds nn::GPT<AnyCausal> compiles its model,
// training loop and checkpoint code once, and only the attention modules once per variant.
using AnyCausal = attn::nn::AnyAttention<float, attn::mask::Causal>;
using MakeAttention = AnyCausal (*)(const attn::MultiHeadConfig&);

// The factory that builds the variant a name stands for (for nn::GPT<AnyCausal>(config, make)).
inline MakeAttention attention_factory(const std::string& name) {
  return with_attention(name, []<class Attn>() -> MakeAttention { return &AnyCausal::make<Attn>; });
}

}  // namespace examples
