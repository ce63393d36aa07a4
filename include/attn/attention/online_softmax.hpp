// attn/attention/online_softmax.hpp: softmax attention computed tile by tile with a running
// max and sum (Milakov & Gimelshein 2018; FlashAttention, Dao et al. 2022), so the Tq x Tk
// weight matrix is never stored unless it is small enough to keep for backward. Backward
// recomputes each tile's weights from the saved log-sum-exp (or reads the kept ones), in one
// pass per (batch, key/value head) or two passes, chosen by shape. Whole tiles that the mask
// rules out are skipped (causal: about half), and so are the blocks of a partial tile that it
// rules out (TileBlocks). Tile products run on tile_gemm.hpp's kernels.
// Does not support score kernels other than exp; see materialized.hpp for those.
//
// The kernel's parts, one file each: kernel_common.hpp (dropout, the entry checks), tile_layout.hpp
// (tile sizes, operand layouts, scratch), score_tiles.hpp (masked score tiles and their live
// blocks), fused_forward.hpp, fused_backward.hpp (and its plan); this file is the entry point,
// which hands every score of the dot family to the kernels as one form (DotForm).
//
// Shapes: q [B, H, Tq, Dh], k [B, Hk, Tk, Dh], v [B, Hk, Tk, Dv] -> o [B, H, Tq, Dv], where
// Hk divides H (query head h reads key/value head h / (H / Hk): multi- or grouped-query).
#pragma once

#include <algorithm>
#include <type_traits>

#include "../autodiff/autodiff.hpp"
#include "fused_backward.hpp"
#include "fused_forward.hpp"
#include "geometry.hpp"
#include "kernel_common.hpp"
#include "learned_bias.hpp"
#include "mask.hpp"
#include "partials.hpp"
#include "score.hpp"

namespace attn {

namespace detail {

// What the fused kernels use of a score is alpha(Dh), beta_k and the position bias (beta_q
// cancels under softmax). The scores of the dot family (beta_k = 0, no bias: Dot, ScaledDot and
// the module scores run as one of them) are handed to the kernels as this one type with alpha
// a run-time value, so they share one compiled kernel instead of one each.
struct DotForm {
  static constexpr const char* name = "dot_form";
  static constexpr double beta_q = 0, beta_k = 0;
  double a = 1;
  double alpha(index_t) const { return a; }
  template <class T>
  double operator()(const T* q, const T* k, index_t d) const {
    return a * score::detail::dot(q, k, d);
  }
};

template <ScorePolicy Score>
inline constexpr bool runs_as_dot_form = Score::beta_k == 0 && !HasPositionBias<Score> &&
                                         !HasSoftCap<Score> && !std::is_same_v<Score, DotForm>;

}  // namespace detail

namespace detail {

// The fused attention node (and with `partial` its log-sum-exp as a second output).
template <ScorePolicy Score, MaskPolicy Mask, class T>
AttentionPartial<T> fused_attention(const Var<T>& q, const Var<T>& k, const Var<T>& v,
                                    const Score& score, const Mask& mask, Tensor<T>* weights,
                                    const AttentionDropout& dropout, const AttentionBackward& plan,
                                    index_t key_length, bool partial, const LearnedBias<T>* bias) {
  Tape<T>& tape = q.tape();
  const AttentionGeometry g = checked_geometry(q, k, v, "attention", key_length);
  mask.validate(g.B, g.Tq, g.Tk);
  dropout.check("attention");
  check_score(score, "attention");
  BiasTables<T> tables;
  if (bias) {
    tape.check(bias->values, "attention");
    tables = bias_tables(bias->form, bias->values.value(), g, "attention");
  }
  const BiasTables<T>* learned = bias ? &tables : nullptr;
  auto [o, node] = tape.push(Shape{g.B, g.H, g.Tq, g.Dv}, "attention",
                             q.requires_grad() || k.requires_grad() || v.requires_grad() ||
                                 (bias && bias->values.requires_grad()));
  const bool keep = node.requires_grad && save_weights_for_backward(plan, g);
  node.saved.resize(partial ? 4 : keep ? 3 : 2);
  node.saved[0].resize(Shape{g.B * g.H * g.Tq});
  if (keep) node.saved[2].resize(Shape{g.B * g.H * g.Tq * g.Tk});
  online_softmax_forward(score, mask, dropout, g, q.value().data(), k.value().data(),
                         v.value().data(), node.value->data(), node.saved[0].data(),
                         keep ? node.saved[2].data() : nullptr, learned);
  if (weights) {
    weights->resize(Shape{g.B, g.H, g.Tq, g.Tk});
    if (keep)
      std::copy_n(node.saved[2].data(), weights->numel(), weights->data());
    else
      online_softmax_weights(score, mask, g, q.value().data(), k.value().data(),
                             node.saved[0].data(), weights->data(), learned);
  }
  if (node.requires_grad) {
    const Mask* stored = node.template keep_value<Mask>(mask);
    tape.set_backward(
        node, OnlineSoftmaxOp<Score, Mask>{q.index(), k.index(), v.index(), g, score, dropout,
                                           stored, keep, backward_walk(plan, g), partial,
                                           bias ? bias->values.index() : std::int32_t{-1},
                                           bias ? bias->form : LearnedBiasForm{}});
  }
  if (!partial) return {o, {}};
  // The kernels leave beta_q ‖q‖² out of the scores (it cancels in softmax); the log-sum-exp
  // has it.
  Tensor<T> lse(Shape{g.B, g.H, g.Tq});
  const T* qv = q.value().data();
  for (index_t r = 0; r < lse.numel(); ++r)
    lse[r] = node.saved[0][r] +
             (Score::beta_q != 0 ? T(Score::beta_q) * squared_norm<T>(qv + r * g.Dh, g.Dh) : T{0});
  return {o, push_second_output(tape, o, node, 3, lse.shape(), lse.data(), "attention.lse")};
}

}  // namespace detail

// Softmax attention o_i = Σ_j softmax_j(s(q_i, k_j) | mask) v_j by the online-softmax algorithm.
// When `weights` is given it receives the [B, H, Tq, Tk] weights before dropout (not
// differentiable); `dropout` drops weights (training); `plan` picks how backward runs;
// key_length > 0 attends to the first key_length rows of each head of k and v only (a decoding
// cache with spare capacity, read in place; see geometry.hpp); `bias`, when given, is added to
// the scores and gets its gradient (learned_bias.hpp).
template <ScorePolicy Score, MaskPolicy Mask, class T>
Var<T> online_softmax_attention(const Var<T>& q, const Var<T>& k, const Var<T>& v,
                                const Score& score, const Mask& mask, Tensor<T>* weights = nullptr,
                                const AttentionDropout& dropout = {},
                                const AttentionBackward& plan = {}, index_t key_length = 0,
                                const LearnedBias<T>* bias = nullptr) {
  if constexpr (detail::runs_as_dot_form<Score>)
    return online_softmax_attention(q, k, v, detail::DotForm{score.alpha(q.shape().last())}, mask,
                                    weights, dropout, plan, key_length, bias);
  else
    return detail::fused_attention(q, k, v, score, mask, weights, dropout, plan, key_length, false,
                                   bias)
        .output;
}

// The same attention as a partial result (partials.hpp): the output and each row's log-sum-exp
// log Σ_j e^{s_ij} over the allowed keys (−∞ for a row with none; beta_q ‖q‖², which cancels
// in the softmax, is left out of the kernels' scores but not of this), both differentiable. The
// log-sum-exp is of the weights before dropout; `weights` as for online_softmax_attention.
// Merging the partials over disjoint key sets with merge_attention gives the attention over
// their union.
template <ScorePolicy Score, MaskPolicy Mask, class T>
AttentionPartial<T> online_softmax_attention_partial(
    const Var<T>& q, const Var<T>& k, const Var<T>& v, const Score& score, const Mask& mask,
    const AttentionDropout& dropout = {}, const AttentionBackward& plan = {},
    index_t key_length = 0, Tensor<T>* weights = nullptr, const LearnedBias<T>* bias = nullptr) {
  if constexpr (detail::runs_as_dot_form<Score>)
    return online_softmax_attention_partial(q, k, v, detail::DotForm{score.alpha(q.shape().last())},
                                            mask, dropout, plan, key_length, weights, bias);
  else
    return detail::fused_attention(q, k, v, score, mask, weights, dropout, plan, key_length, true,
                                   bias);
}

}  // namespace attn
