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

#include "../core/parallel.hpp"
#include "geometry.hpp"
#include "learned_bias.hpp"
#include "mask.hpp"
#include "tile_gemm.hpp"

namespace attn::detail {

// Whether x[0, n) is all finite. A sum of x·0 is NaN exactly when some x is NaN or ±∞: one pass
// of packets into four independent sums, no branch.
template <class T>
bool all_finite(const T* x, index_t n) {
  using namespace Eigen::internal;
  constexpr index_t W = packet_size<T>;
  const Packet<T> zero = pset1<Packet<T>>(T{0});
  Packet<T> a0 = zero, a1 = zero, a2 = zero, a3 = zero;
  index_t j = 0;
  for (; j + 4 * W <= n; j += 4 * W) {
    a0 = padd(a0, pmul(ploadu<Packet<T>>(x + j), zero));
    a1 = padd(a1, pmul(ploadu<Packet<T>>(x + j + W), zero));
    a2 = padd(a2, pmul(ploadu<Packet<T>>(x + j + 2 * W), zero));
    a3 = padd(a3, pmul(ploadu<Packet<T>>(x + j + 3 * W), zero));
  }
  T s = predux(padd(padd(a0, a1), padd(a2, a3)));
  for (; j < n; ++j) s += x[j] * T{0};
  return s == T{0};
}

// Whether rows [0, rows) of each of `heads` blocks of x, `stride` rows apart, are finite: one
// task per block, in parallel (the scans of a call's inputs, a cost linear in T).
template <class T>
bool blocks_finite(const T* x, index_t heads, index_t rows, index_t stride, index_t D) {
  std::vector<unsigned char> ok(static_cast<std::size_t>(heads), 1);
  parallel_for(heads, 2.0 * double(rows * D), [&](index_t h) {
    ok[static_cast<std::size_t>(h)] = all_finite(x + h * stride * D, rows * D) ? 1 : 0;
  });
  return std::all_of(ok.begin(), ok.end(), [](unsigned char c) { return c != 0; });
}

// Whether rows [0, Tk) of every key/value head of x [B, Hk, Lk, D] are finite.
template <class T>
bool key_rows_finite(const T* x, const AttentionGeometry& g, index_t D) {
  return blocks_finite(x, g.B * g.Hk, g.Tk, g.key_rows(), D);
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
  x.careful = !kv_ok || !bias_ok || !blocks_finite(q, g.B * g.H, g.Tq, g.Tq, g.Dh);
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
