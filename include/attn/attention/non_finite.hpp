// attn/attention/non_finite.hpp: the one rule for NaN and infinity that the fused, materialised
// and reference paths follow, and what the fast paths check to keep it:
//
//   * a row's output is NaN when a score it is allowed to see is NaN or +∞ (from a NaN or an
//     infinity in q, k or a bias), or when the value of a key it is allowed to see is not finite;
//   * a key the mask hides from a row never changes that row, not even by a NaN or an infinity
//     in its key or value (a padded position may hold anything);
//   * a row whose allowed scores are all −∞ is 0 with log-sum-exp −∞, like a row with no allowed
//     key.
//
// Gradients: where non-finite values sit only in keys and values the mask hides from every query
// (padding), the outputs and every gradient are those of the same inputs with zeros there; once
// an output row is not finite, which gradients are is unspecified.
//
// The checks cost a scan of q, k, v (and a learned bias) per call; only a call with a
// non-finite input pays more: NaN-propagating row maxima, key and value rows hidden from every
// query replaced by zeros, and the masked parts of a tile's P V taken element by element for the
// heads whose values are not all finite. Does not apply the rule to the linear path (feature
// maps), whose sums take every key they are given.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "geometry.hpp"
#include "learned_bias.hpp"
#include "mask.hpp"
#include "tile_gemm.hpp"

namespace attn::detail {

// Whether x[0, n) is all finite. A sum of x·0 is NaN exactly when some x is NaN or ±∞: one pass
// of packets, no branch (a plain loop would add one element at a time, its sum in order).
template <class T>
bool all_finite(const T* x, index_t n) {
  using namespace Eigen::internal;
  const Packet<T> zero = pset1<Packet<T>>(T{0});
  Packet<T> acc = zero;
  T s = 0;
  for_packets<T>(
      n, [&](index_t j) { acc = padd(acc, pmul(ploadu<Packet<T>>(x + j), zero)); },
      [&](index_t j) { s += x[j] * T{0}; });
  return s + predux(acc) == T{0};
}

// Whether rows [0, Tk) of every key/value head of x [B, Hk, Lk, D] are finite.
template <class T>
bool key_rows_finite(const T* x, const AttentionGeometry& g, index_t D) {
  for (index_t bh = 0; bh < g.B * g.Hk; ++bh)
    if (!all_finite(x + bh * g.key_rows() * D, g.Tk * D)) return false;
  return true;
}

// What one call's inputs need under the rule above.
template <class T>
struct NonFiniteInputs {
  bool careful = false;                   // some input is not finite: row maxima must propagate NaN
  const T *k = nullptr, *v = nullptr;     // the keys and values to compute with (cleaned or given)
  std::vector<unsigned char> values_bad;  // [B·Hk]: that head's values are not all finite
  std::vector<T> k_clean, v_clean;

  bool values_not_finite(index_t b, index_t hk, const AttentionGeometry& g) const {
    return !values_bad.empty() && values_bad[static_cast<std::size_t>(b * g.Hk + hk)] != 0;
  }
};

// The checks of one call on q [B, H, Tq, Dh], k [B, Hk, Lk, Dh], v [B, Hk, Lk, Dv] (null: scores
// only, for the weights) and an optional learned bias.
template <class T, MaskPolicy Mask>
NonFiniteInputs<T> non_finite_inputs(const Mask& mask, const AttentionGeometry& g, const T* q,
                                     const T* k, const T* v, const BiasTables<T>* bias) {
  NonFiniteInputs<T> x;
  x.k = k;
  x.v = v;
  const bool kv_ok = key_rows_finite(k, g, g.Dh) && (!v || key_rows_finite(v, g, g.Dv));
  bool bias_ok = true;
  if (bias)
    bias_ok = bias->positional()
                  ? all_finite(bias->table.data(), static_cast<index_t>(bias->table.size()))
                  : all_finite(bias->dense, (bias->batch_stride ? g.B : 1) * g.H * g.Tq * g.Tk);
  x.careful = !kv_ok || !bias_ok || !all_finite(q, g.B * g.H * g.Tq * g.Dh);
  if (kv_ok) return x;
  // Key and value rows no query may see are set to 0 (the mask asked once per pair, only here).
  std::vector<unsigned char> hidden(static_cast<std::size_t>(g.B * g.Tk), 1);
  for (index_t b = 0; b < g.B; ++b)
    for (index_t j = 0; j < g.Tk; ++j)
      for (index_t i = 0; i < g.Tq; ++i)
        if (mask.allowed(b, i, j, g.Tq, g.Tk)) {
          hidden[static_cast<std::size_t>(b * g.Tk + j)] = 0;
          break;
        }
  auto clean = [&](const T* src, index_t D, std::vector<T>& out) {
    out.assign(src, src + g.B * g.Hk * g.key_rows() * D);
    for (index_t b = 0; b < g.B; ++b)
      for (index_t hk = 0; hk < g.Hk; ++hk)
        for (index_t j = 0; j < g.Tk; ++j) {
          T* row = out.data() + g.k_row(b, hk, j) * D;
          if (hidden[static_cast<std::size_t>(b * g.Tk + j)] && !all_finite(row, D))
            std::fill(row, row + D, T{0});
        }
    return out.data();
  };
  x.k = clean(k, g.Dh, x.k_clean);
  if (!v) return x;
  x.v = clean(v, g.Dv, x.v_clean);
  x.values_bad.assign(static_cast<std::size_t>(g.B * g.Hk), 0);
  for (index_t b = 0; b < g.B; ++b)
    for (index_t hk = 0; hk < g.Hk; ++hk)
      x.values_bad[static_cast<std::size_t>(b * g.Hk + hk)] =
          all_finite(x.v + g.v_off(b, hk, 0), g.Tk * g.Dv) ? 0 : 1;
  return x;
}

// A row's state is poisoned by a NaN or +∞ among its allowed scores (its maximum shows it when
// the maxima propagate NaN).
template <class T>
bool poisoned(T row_max) {
  return std::isnan(row_max) || row_max == std::numeric_limits<T>::infinity();
}

}  // namespace attn::detail
