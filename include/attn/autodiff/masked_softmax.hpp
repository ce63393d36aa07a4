// attn/autodiff/masked_softmax.hpp: softmax over the last axis restricted to the entries a mask
// allows, for attention whose scores are given as a tensor (learned score functions) rather than
// formed from q·k inside the attention operator. Does not compute scores, drop weights or
// multiply by values; it knows masks only through their allowed(b, i, j, Tq, Tk) predicate.
#pragma once

#include <cmath>
#include <concepts>
#include <limits>

#include "nn_ops.hpp"

namespace attn {

namespace detail {

// Anything that answers "may query i of batch entry b attend to key j?" (every mask:: policy).
template <class M>
concept PairPredicate = std::copy_constructible<M> && requires(const M& m, index_t i) {
  { m.allowed(i, i, i, i, i) } -> std::convertible_to<bool>;
};

// Every pair allowed: the default predicate of the pairwise ops.
struct AllPairs {
  bool allowed(index_t, index_t, index_t, index_t, index_t) const { return true; }
};

// Calls mask.validate(B, Tq, Tk) when the predicate has one (mask policies do), so a Padding
// mask with the wrong batch size throws before any element is read.
template <class M>
void validate_pairs(const M& mask, index_t batch, index_t tq, index_t tk) {
  if constexpr (requires { mask.validate(batch, tq, tk); }) mask.validate(batch, tq, tk);
}

}  // namespace detail

// Weights from scores s [B, Tq, Tk] or [B, H, Tq, Tk] (or a plain [Tq, Tk], batch entry 0) under
// a mask: for row i of batch entry b,
//     y_ij = exp(s_ij − m_i) / Σ_{l allowed} exp(s_il − m_i)   for allowed j,   y_ij = 0 otherwise,
// with m_i the largest allowed score of the row (subtracted so no exp overflows; it cancels in
// the ratio). A row with no allowed key (or only −∞ scores) is all zeros, never 0/0 = NaN.
// Backward is the softmax one, dx_j = y_j (dy_j − Σ_l dy_l y_l): masked entries have y_j = 0 and
// so receive no gradient, and an empty row passes none.
template <class T, detail::PairPredicate Mask>
Var<T> masked_softmax(const Var<T>& scores, const Mask& mask) {
  Tape<T>& tape = scores.tape();
  tape.check(scores, "masked_softmax");
  const Shape& s = scores.shape();
  ATTN_CHECK(s.rank() >= 2, shape_error, "masked_softmax: scores must be [Tq, Tk], [B, Tq, Tk] or ",
             "[B, H, Tq, Tk], got ", s);
  const index_t tq = s.dim(-2), tk = s.dim(-1), batch = s.rank() >= 3 ? s[0] : 1;
  detail::validate_pairs(mask, batch, tq, tk);
  auto [y, node] = tape.push(s, "masked_softmax", scores.requires_grad());
  const index_t rows = tk > 0 ? s.numel() / tk : 0;
  const index_t rows_per_batch = batch > 0 ? rows / batch : 0;
  const T* xv = scores.value().data();
  T* yv = node.value->data();
  parallel_for(rows, double(tk) * 8, [&](index_t r) {
    const index_t b = r / rows_per_batch, i = r % tq;
    const T* x = xv + r * tk;
    T* o = yv + r * tk;
    T m = -std::numeric_limits<T>::infinity();
    for (index_t j = 0; j < tk; ++j)
      if (mask.allowed(b, i, j, tq, tk)) m = std::max(m, x[j]);
    if (m == -std::numeric_limits<T>::infinity()) {  // nothing to attend to: zeros, not NaN
      std::fill(o, o + tk, T{0});
      return;
    }
    T z = 0;
    for (index_t j = 0; j < tk; ++j) {
      o[j] = mask.allowed(b, i, j, tq, tk) ? std::exp(x[j] - m) : T{0};
      z += o[j];
    }
    for (index_t j = 0; j < tk; ++j) o[j] /= z;  // z >= 1: the max entry contributes exp(0)
  });
  tape.set_backward(node, detail::SoftmaxOp{scores.index()});
  return y;
}

}  // namespace attn
