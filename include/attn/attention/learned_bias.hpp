// attn/attention/learned_bias.hpp: score biases that own parameters and get their gradient back,
// added to the scores of the fused and materialised softmax paths before the soft cap and the
// mask:
//
//   T5 relative-position buckets (Raffel et al., "Exploring the Limits of Transfer Learning with a
//     Unified Text-to-Text Transformer"): b_h(δ) = θ[h, bucket(δ)], θ [H, num_buckets], with the
//     T5 code's log-spaced buckets of the distance δ = p_i − p_j (bidirectional, or causal: keys
//     after the query all share bucket 0);
//   ALiBi with learnable slopes (Press, Smith and Lewis, "Train Short, Test Long"): b_h(δ) =
//     −m_h |δ|, m [H] a parameter, initialised to the paper's slopes by alibi_slopes();
//   a dense bias tensor, [H, Tq, Tk] (the same for every batch entry) or [B, H, Tq, Tk] (pair
//     biases of the AlphaFold kind): b = bias[(b,) h, i, j].
//
// The kernels read the position biases as a table of b_h(δ) over the Tq + Tk − 1 distances of the
// call (made once per call from θ), so no Tq × Tk tensor exists for them. Their gradient is
//     dθ[h, slot(δ)] += coef(δ) dS_ij  (T5: slot = bucket, coef = 1; ALiBi: slot 0, coef = −|δ|),
// summed in double into a buffer owned by one parallel task each (one per (b, h) or per
// (b, h, query tile): by shape, never by thread count) and the buffers then added in task order,
// so the gradient has the same bits for any thread count, with no atomics. A dense bias's
// gradient is dS itself (summed over b in order when it is shared by the batch).
// Does not add biases that have no parameters: those are a score's position_bias (score.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../autodiff/autodiff.hpp"
#include "geometry.hpp"
#include "score.hpp"

namespace attn {

enum class LearnedBiasKind { t5_buckets, alibi_slopes, dense };

// A bias with parameters for one attention call; make it with t5_relative_bias, learned_alibi or
// dense_bias.
// What kind of bias, and the T5 bucket settings.
struct LearnedBiasForm {
  LearnedBiasKind kind = LearnedBiasKind::dense;
  index_t max_distance = 128;  // T5: distances from here on share the last bucket
  bool bidirectional = true;   // T5: separate buckets for keys before and after the query
};

template <class T>
struct LearnedBias {
  LearnedBiasForm form;
  Var<T> values;  // θ [H, num_buckets], m [H], or the bias [H, Tq, Tk] / [B, H, Tq, Tk]
};

// The T5 bias with table [H, num_buckets]: bidirectional (the encoder's: half the buckets for keys
// after the query) or not (the decoder's, under a causal mask); T5 uses 32 buckets and
// max_distance 128.
template <class T>
LearnedBias<T> t5_relative_bias(const Var<T>& table, bool bidirectional = true,
                                index_t max_distance = 128) {
  return {{LearnedBiasKind::t5_buckets, max_distance, bidirectional}, table};
}

// ALiBi with the slopes m [H] a parameter (start them at alibi_slopes<T>(H)).
template <class T>
LearnedBias<T> learned_alibi(const Var<T>& slopes) {
  return {{LearnedBiasKind::alibi_slopes}, slopes};
}

// A bias tensor added to the scores: [H, Tq, Tk] or [B, H, Tq, Tk].
template <class T>
LearnedBias<T> dense_bias(const Var<T>& bias) {
  return {{LearnedBiasKind::dense}, bias};
}

// The ALiBi paper's slopes of `heads` heads (score::Alibi::slope), as a tensor [heads].
template <class T>
Tensor<T> alibi_slopes(index_t heads) {
  ATTN_CHECK(heads > 0, value_error, "alibi_slopes: heads must be positive, got ", heads);
  Tensor<T> m(Shape{heads});
  for (index_t h = 0; h < heads; ++h) m[h] = static_cast<T>(score::Alibi::slope(h, heads));
  return m;
}

// The T5 bucket of distance δ = p_i − p_j (query position minus key position), as T5's code
// computes it from its relative position j − i = −δ: bidirectional, keys after the query (δ < 0)
// take the upper half of the buckets and |δ| the rest; otherwise max(δ, 0) all of them. Of n
// buckets for a distance d, the first n/2 are exact (d itself) and the others log-spaced up to
// max_distance: n/2 + ⌊log(d / (n/2)) / log(max_distance / (n/2)) · (n − n/2)⌋, at most n − 1.
// The logarithms are taken in double (T5's code takes them in float32).
inline index_t t5_bucket(index_t delta, index_t num_buckets, index_t max_distance,
                         bool bidirectional) {
  index_t bucket = 0, n = num_buckets, d = delta;
  if (bidirectional) {
    n /= 2;
    if (d < 0) bucket += n;
    d = d < 0 ? -d : d;
  } else {
    d = std::max<index_t>(d, 0);
  }
  const index_t exact = n / 2;
  if (d < exact) return bucket + d;
  const double scaled = std::log(static_cast<double>(d) / static_cast<double>(exact)) /
                        std::log(static_cast<double>(max_distance) / static_cast<double>(exact)) *
                        static_cast<double>(n - exact);
  return bucket + std::min(exact + static_cast<index_t>(scaled), n - 1);
}

namespace detail {

// Throws value_error unless T5 buckets with these settings are well defined (`op` names the
// operation): enough buckets for exact and log-spaced ones, max_distance past the exact ones.
inline void check_t5_settings(index_t buckets, index_t max_distance, bool bidirectional,
                              const char* op) {
  ATTN_CHECK(buckets >= (bidirectional ? 4 : 2), value_error, op, ": a ",
             bidirectional ? "bidirectional " : "", "T5 bias needs at least ",
             bidirectional ? 4 : 2, " buckets, got ", buckets);
  const index_t exact = (bidirectional ? buckets / 2 : buckets) / 2;
  ATTN_CHECK(max_distance > exact, value_error, op, ": the T5 bias's max_distance (", max_distance,
             ") must exceed its ", exact, " exact buckets");
}

// A learned bias made ready for one call's kernels (see the top of this file).
template <class T>
struct BiasTables {
  LearnedBiasKind kind = LearnedBiasKind::dense;
  index_t H = 0, Tq = 0, Tk = 0;
  // Position biases: table [H, n] holds b_h(δ) at δ = 1 − Tq + t, t < n = Tq + Tk − 1; the
  // gradient adds coef[t] dS to slot slot[t] of head h.
  std::vector<T> table, coef;
  std::vector<index_t> slot;
  index_t slots = 0;
  // Dense: the bias [Bd, H, Tq, Tk] with Bd = B or 1 (batch_stride 0).
  const T* dense = nullptr;
  index_t batch_stride = 0;

  bool positional() const { return kind != LearnedBiasKind::dense; }
  // The distance table's column of query i against key 0 (δ = p_i): entry t − j is key j's.
  index_t column(const AttentionGeometry& g, index_t i) const {
    return g.query_position(i) + Tq - 1;
  }

  // Adds the bias to rows [i0, i0 + br) x columns [j0, j0 + bc) of head (b, h)'s scores s (rows
  // lds apart).
  void add(const AttentionGeometry& g, index_t b, index_t h, index_t i0, index_t br, index_t j0,
           index_t bc, T* s, index_t lds) const {
    for (index_t i = 0; i < br; ++i) {
      T* row = s + i * lds;
      if (positional()) {
        const T* t = table.data() + h * (Tq + Tk - 1) + column(g, i0 + i) - j0;
        for (index_t j = 0; j < bc; ++j) row[j] += t[-j];
      } else {
        const T* d = dense + b * batch_stride + ((h * Tq) + i0 + i) * Tk + j0;
        for (index_t j = 0; j < bc; ++j) row[j] += d[j];
      }
    }
  }

  // The bias's part of the gradient from dS of rows [i0, i0 + br) x columns [j0, j0 + bc) of head
  // (b, h) (rows ldd apart): position biases into sums [slots] (this task's), a dense bias into
  // dense_grad [B, H, Tq, Tk] (written: every element belongs to one tile).
  void gradient(const AttentionGeometry& g, index_t b, index_t h, index_t i0, index_t br,
                index_t j0, index_t bc, const T* ds, index_t ldd, double* sums,
                T* dense_grad) const {
    for (index_t i = 0; i < br; ++i) {
      const T* row = ds + i * ldd;
      if (positional()) {
        const index_t c = column(g, i0 + i) - j0;
        for (index_t j = 0; j < bc; ++j)
          sums[slot[static_cast<std::size_t>(c - j)]] +=
              static_cast<double>(coef[static_cast<std::size_t>(c - j)]) *
              static_cast<double>(row[j]);
      } else {
        std::copy_n(row, bc, dense_grad + ((b * g.H + h) * Tq + i0 + i) * Tk + j0);
      }
    }
  }
};

// The tables of a bias of form `bias` and parameters `values` for a call of geometry g, its shape
// checked (`op` names the operation).
template <class T>
BiasTables<T> bias_tables(const LearnedBiasForm& bias, const Tensor<T>& values,
                          const AttentionGeometry& g, const char* op) {
  BiasTables<T> t;
  t.kind = bias.kind;
  t.H = g.H;
  t.Tq = g.Tq;
  t.Tk = g.Tk;
  const Shape& s = values.shape();
  const T* v = values.data();
  const index_t n = g.Tq + g.Tk - 1;
  switch (bias.kind) {
    case LearnedBiasKind::t5_buckets: {
      ATTN_CHECK(s.rank() == 2 && s[0] == g.H, shape_error, op,
                 ": a T5 bias table must be [H = ", g.H, ", num_buckets], got ", s);
      const index_t buckets = s[1];
      check_t5_settings(buckets, bias.max_distance, bias.bidirectional, op);
      t.slots = buckets;
      t.slot.resize(static_cast<std::size_t>(n));
      t.coef.assign(static_cast<std::size_t>(n), T{1});
      for (index_t c = 0; c < n; ++c)
        t.slot[static_cast<std::size_t>(c)] =
            t5_bucket(c - (g.Tq - 1), buckets, bias.max_distance, bias.bidirectional);
      t.table.resize(static_cast<std::size_t>(g.H * n));
      for (index_t h = 0; h < g.H; ++h)
        for (index_t c = 0; c < n; ++c)
          t.table[static_cast<std::size_t>(h * n + c)] =
              v[h * buckets + t.slot[static_cast<std::size_t>(c)]];
      break;
    }
    case LearnedBiasKind::alibi_slopes: {
      ATTN_CHECK(s.rank() == 1 && s[0] == g.H, shape_error, op,
                 ": learned ALiBi slopes must be [H = ", g.H, "], got ", s);
      t.slots = 1;
      t.slot.assign(static_cast<std::size_t>(n), 0);
      t.coef.resize(static_cast<std::size_t>(n));
      for (index_t c = 0; c < n; ++c) {
        const index_t delta = c - (g.Tq - 1);
        t.coef[static_cast<std::size_t>(c)] = -static_cast<T>(delta < 0 ? -delta : delta);
      }
      t.table.resize(static_cast<std::size_t>(g.H * n));
      for (index_t h = 0; h < g.H; ++h)
        for (index_t c = 0; c < n; ++c)
          t.table[static_cast<std::size_t>(h * n + c)] = v[h] * t.coef[static_cast<std::size_t>(c)];
      break;
    }
    case LearnedBiasKind::dense: {
      const bool batched =
          s.rank() == 4 && s[0] == g.B && s[1] == g.H && s[2] == g.Tq && s[3] == g.Tk;
      const bool shared = s.rank() == 3 && s[0] == g.H && s[1] == g.Tq && s[2] == g.Tk;
      ATTN_CHECK(batched || shared, shape_error, op, ": a dense bias must be [H, Tq, Tk] = [", g.H,
                 ", ", g.Tq, ", ", g.Tk, "] or [B, H, Tq, Tk] = [", g.B, ", ", g.H, ", ", g.Tq,
                 ", ", g.Tk, "], got ", s);
      t.dense = v;
      t.batch_stride = batched ? g.H * g.Tq * g.Tk : 0;
      break;
    }
  }
  return t;
}

// The gradient of a learned bias from what one backward pass left: `sums` [B, H, Q, slots] (Q
// tasks per (b, h)), added over b and Q in order into the parameters' gradient; dense_grad
// [B, H, Tq, Tk], added as it is or summed over b in order for a shared bias.
template <class T>
void add_bias_gradient(const BiasTables<T>& t, const AttentionGeometry& g, index_t Q,
                       const std::vector<double>& sums, const T* dense_grad, T* grad) {
  if (t.positional()) {
    for (index_t h = 0; h < g.H; ++h)
      for (index_t s = 0; s < t.slots; ++s) {
        double total = 0;
        for (index_t b = 0; b < g.B; ++b)
          for (index_t q = 0; q < Q; ++q)
            total += sums[static_cast<std::size_t>(((b * g.H + h) * Q + q) * t.slots + s)];
        grad[h * t.slots + s] += static_cast<T>(total);
      }
    return;
  }
  const index_t per_batch = g.H * g.Tq * g.Tk;
  for (index_t b = 0; b < g.B; ++b) {
    T* to = grad + b * t.batch_stride;
    const T* from = dense_grad + b * per_batch;
    for (index_t e = 0; e < per_batch; ++e) to[e] += from[e];
  }
}

}  // namespace detail

}  // namespace attn
