// examples/common/attention_variants.hpp: the attention variants the example trainers offer by
// name (--attention standard, poly2, linear, ...), and the calls that pick one at run time, so
// a program that trains a model and one that loads its checkpoint agree on what a name means.
// Does not build models or read checkpoints; the programs do.
#pragma once

#include <attn/approx/linformer.hpp>
#include <attn/attn.hpp>

#include "attention_names.hpp"

#include <cstddef>
#include <string>
#include <tuple>
#include <utility>

namespace examples {

template <class Score, class Kernel, class Projection>
using CausalMha = attn::MultiHeadAttention<Score, Kernel, attn::mask::Causal,
                                           attn::Heads<attn::dynamic>, Projection, float>;
using Standard = attn::nn::CausalSelfAttention;
using Symmetric = CausalMha<attn::score::ScaledDot, attn::kernel::Softmax, attn::projection::Tied>;
using Euclidean =
    CausalMha<attn::score::NegSqEuclidean, attn::kernel::Softmax, attn::projection::Separate>;
using ScaledEuclidean =
    CausalMha<attn::score::ScaledNegSqEuclidean, attn::kernel::Softmax, attn::projection::Separate>;
using Poly2 =
    CausalMha<attn::score::ScaledDot, attn::kernel::Polynomial<2>, attn::projection::Separate>;
using Linear =
    CausalMha<attn::score::ScaledDot, attn::kernel::EluPlusOne, attn::projection::Separate>;
using LinearScaled = CausalMha<attn::score::HeadScaled<attn::score::ScaledDot>,
                               attn::kernel::EluPlusOne, attn::projection::Separate>;
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

// Attn built with its config edited by Edit: the variants that differ from another by a
// run-time setting only, so they share its compiled code.
template <class Attn, attn::MultiHeadConfig (*Edit)(attn::MultiHeadConfig)>
struct WithConfig : Attn {
  explicit WithConfig(attn::MultiHeadConfig c) : Attn(Edit(c)) {}
};

// A learned sink logit per head (attn::attention_sink).
inline attn::MultiHeadConfig with_sinks(attn::MultiHeadConfig c) {
  c.sinks = true;
  return c;
}
// T5's relative-position buckets, a decoder's (one direction; 32 buckets, max distance 128).
inline attn::MultiHeadConfig with_t5_bias(attn::MultiHeadConfig c) {
  c.position_bias = attn::LearnedPositionBias::t5;
  c.t5_bidirectional = false;
  return c;
}
// ALiBi with learned slopes, the paper's at the start.
inline attn::MultiHeadConfig with_learned_alibi(attn::MultiHeadConfig c) {
  c.position_bias = attn::LearnedPositionBias::alibi;
  return c;
}

// Rotary with the half-split pairs (x_c, x_{c+Dh/2}) of GPT-NeoX and Llama: Rotary's code, a
// run-time setting of its score.
struct RotaryHalves : Rotary {
  explicit RotaryHalves(const attn::MultiHeadConfig& c) : Rotary(c) {
    score.pairs = attn::RotaryPairs::halves;
  }
};

// The module type of each registry entry (attention_names.hpp), in the registry's order.
using AttentionTypes =
    std::tuple<Standard, Symmetric, Euclidean, Poly2, Linear, Synthesizer, Rotary, Alibi, Cosine,
               Bilinear, Additive, Linformer<32>, WithConfig<Standard, with_sinks>,
               WithConfig<Standard, with_t5_bias>, WithConfig<Standard, with_learned_alibi>,
               RotaryHalves, ScaledEuclidean, LinearScaled>;
static_assert(std::tuple_size_v<AttentionTypes> == std::size(attention_registry),
              "every attention name needs its type, in the registry's order");

namespace detail {
template <std::size_t I, class F>
decltype(auto) with_attention_at(std::size_t index, F&& f) {
  if constexpr (I + 1 < std::tuple_size_v<AttentionTypes>)
    if (index != I) return with_attention_at<I + 1>(index, std::forward<F>(f));
  return f.template operator()<std::tuple_element_t<I, AttentionTypes>>();
}
}  // namespace detail

// Calls f.template operator()<Attn>() with the module type a name (or an alias) stands for;
// value_error for an unknown name.
template <class F>
decltype(auto) with_attention(const std::string& name, F&& f) {
  return detail::with_attention_at<0>(attention_index(name), std::forward<F>(f));
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
