// attn/attention/score_ops.hpp: the differentiable per-token operations that the scores of
// module_scores.hpp apply to per-head queries and keys [B, N, T, D] before a quadratic-form score:
// the rotary rotation by position, rows scaled to unit length times a per-head gain, rows times a
// per-head gain, and one matrix per head. Each op's formula and hand-written backward sit side by
// side. Does not compute scores or attention, and mixes no tokens: row t of the output depends on
// row t of the input only (so a decoding step transforms just its new rows).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "../autodiff/autodiff.hpp"

namespace attn {

// Which coordinates of a head turn together under the rotary rotation, pair c < D/2:
//   adjacent: (x_{2c}, x_{2c+1}), the RoFormer paper's;
//   halves:   (x_c, x_{c+D/2}), GPT-NeoX's and Llama's ("rotate_half" in their code).
// The same angles θ_c; the two differ by a fixed permutation of the coordinates, so a model
// trained with one needs that one to load its weights.
enum class RotaryPairs { adjacent, halves };

// How the rotary frequencies θ_c = base^{−2c/D} are stretched so that a model trained on a context
// of L positions reads s = factor times more (each written from its source):
//   none:    θ_c.
//   linear:  θ_c / s ("Extending Context Window of Large Language Models via Positional
//            Interpolation", Chen et al.): positions squeezed into the trained range.
//   ntk:     base' = base · s^{D/(D−2)}, θ_c = base'^{−2c/D} (the "NTK-aware" scaled RoPE, as
//            described in "YaRN: Efficient Context Window Extension of Large Language Models",
//            Peng et al.): high frequencies kept, the lowest interpolated by s.
//   yarn:    per pair, with r_c = L θ_c / 2π rotations over the trained context, a ramp
//            γ_c = clamp((r_c' − α) / (β − α), 0, 1) over the pair index between the pairs that
//            turn β and α times (YaRN's "NTK-by-parts", α = beta_slow, β = beta_fast, the
//            boundaries rounded outward to whole pairs when `truncate`), and
//            θ'_c = (1 − γ_c) θ_c / s + γ_c θ_c; both q and k are also multiplied by the
//            attention factor √(1/t) = 0.1 ln s + 1 (or `attention_factor` when given).
//   llama3:  the frequency bands of Llama 3.1's published reference code: with wavelength
//            λ_c = 2π / θ_c, θ_c kept where λ_c < L / high_freq_factor, θ_c / s where
//            λ_c > L / low_freq_factor, and between them θ'_c = (1 − σ) θ_c / s + σ θ_c with
//            σ = (L / λ_c − low_freq_factor) / (high_freq_factor − low_freq_factor).
// Only differences of positions enter the scores, as without scaling.
struct RotaryScaling {
  enum class Kind { none, linear, ntk, yarn, llama3 };
  Kind kind = Kind::none;
  double factor = 1;                                 // s
  index_t original_context = 0;                      // L (yarn, llama3)
  double beta_fast = 32, beta_slow = 1;              // yarn
  bool truncate = true;                              // yarn: ramp ends on whole pairs
  double attention_factor = 0;                       // yarn: 0 means 0.1 ln s + 1
  double low_freq_factor = 1, high_freq_factor = 4;  // llama3
};

// The angles per position of each pair c < D/2 under `s` (double), checked.
inline std::vector<double> rotary_frequencies(index_t d, double base, const RotaryScaling& s) {
  using K = RotaryScaling::Kind;
  ATTN_CHECK(d > 0 && d % 2 == 0 && base > 1, value_error, "rotary_frequencies: head width ", d,
             " must be even and base ", base, " > 1");
  ATTN_CHECK(s.kind == K::none || (s.factor >= 1 && std::isfinite(s.factor)), value_error,
             "RotaryScaling: factor ", s.factor, " must be finite and >= 1");
  ATTN_CHECK(s.kind != K::yarn && s.kind != K::llama3 ? true : s.original_context > 0, value_error,
             "RotaryScaling: yarn and llama3 need the original context (> 0), got ",
             s.original_context);
  const index_t pairs = d / 2;
  const double D = double(d), two_pi = 2 * std::acos(-1.0);
  const double b = s.kind == K::ntk ? base * std::pow(s.factor, D / (D - 2)) : base;
  std::vector<double> theta(static_cast<std::size_t>(pairs));
  for (index_t c = 0; c < pairs; ++c) theta[std::size_t(c)] = std::pow(b, -2.0 * double(c) / D);
  if (s.kind == K::linear)
    for (double& t : theta) t /= s.factor;
  if (s.kind == K::yarn) {
    ATTN_CHECK(s.beta_fast > s.beta_slow && s.beta_slow > 0, value_error,
               "RotaryScaling: yarn needs beta_fast (", s.beta_fast, ") > beta_slow (", s.beta_slow,
               ") > 0");
    // The (fractional) pair index that turns `rotations` times over L positions: θ_c L = 2π·rot
    // solved for c.
    const auto pair_of = [&](double rotations) {
      return D * std::log(double(s.original_context) / (rotations * two_pi)) / (2 * std::log(base));
    };
    double lo = pair_of(s.beta_fast), hi = pair_of(s.beta_slow);
    if (s.truncate) lo = std::floor(lo), hi = std::ceil(hi);
    lo = std::max(lo, 0.0), hi = std::min(hi, D - 1);
    if (hi == lo) hi += 0.001;  // a ramp of one point
    for (index_t c = 0; c < pairs; ++c) {
      const double ramp = std::clamp((double(c) - lo) / (hi - lo), 0.0, 1.0);
      const double t = theta[std::size_t(c)];
      theta[std::size_t(c)] = ramp * t / s.factor + (1 - ramp) * t;  // keep where the ramp is 0
    }
  }
  if (s.kind == K::llama3) {
    ATTN_CHECK(s.high_freq_factor > s.low_freq_factor && s.low_freq_factor > 0, value_error,
               "RotaryScaling: llama3 needs high_freq_factor (", s.high_freq_factor,
               ") > low_freq_factor (", s.low_freq_factor, ") > 0");
    const double L = double(s.original_context);
    for (double& t : theta) {
      const double wavelength = two_pi / t;
      if (wavelength > L / s.low_freq_factor) {
        t /= s.factor;
      } else if (wavelength >= L / s.high_freq_factor) {
        const double smooth =
            (L / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        t = (1 - smooth) * t / s.factor + smooth * t;
      }
    }
  }
  return theta;
}

// The factor on cos and sin (so on q and k): YaRN's, 1 otherwise.
inline double rotary_attention_factor(const RotaryScaling& s) {
  if (s.kind != RotaryScaling::Kind::yarn) return 1.0;
  return s.attention_factor > 0 ? s.attention_factor : 0.1 * std::log(s.factor) + 1.0;
}

namespace detail {

struct RowsGeometry {
  index_t B = 0, N = 0, T = 0, D = 0;  // [B, N heads, T rows, D]
};

inline RowsGeometry rows_geometry(const Shape& s, const char* op) {
  ATTN_CHECK(s.rank() == 4, shape_error, op, ": x must be [B, heads, T, D], got ", s);
  return {s[0], s[1], s[2], s[3]};
}

// m cos and m sin of the rotary angles (p0 + t) θ_c for rows t < T and pairs c < D/2 (θ and m:
// rotary_frequencies and rotary_attention_factor), each [T, D/2]. The angle is formed in double
// (positions times θ_0 = 1 reach the thousands) and rounded once. The last table made on a
// thread is kept and copied while the same one is asked for: q and k of a call, and every
// training step at the same positions, share it (forming it costs a sine and a cosine in double
// per entry, twice per call: about 3 % of the time of the attention's tile products at T = 1024
// with 8 heads of 64).
template <class T>
void rotary_table(index_t p0, index_t rows, const std::vector<double>& theta, double m,
                  Tensor<T>& cos, Tensor<T>& sin) {
  struct Table {
    bool made = false;
    index_t p0 = 0, rows = 0;
    std::vector<double> theta;
    double m = 0;
    Tensor<T> cos, sin;
  };
  thread_local Table last;
  if (!(last.made && last.p0 == p0 && last.rows == rows && last.theta == theta && last.m == m)) {
    last.made = false;
    const index_t pairs = index_t(theta.size());
    last.cos.resize(Shape{rows, pairs});
    last.sin.resize(Shape{rows, pairs});
    for (index_t c = 0; c < pairs; ++c)
      for (index_t t = 0; t < rows; ++t) {
        const double angle = static_cast<double>(p0 + t) * theta[std::size_t(c)];
        last.cos(t, c) = static_cast<T>(m * std::cos(angle));
        last.sin(t, c) = static_cast<T>(m * std::sin(angle));
      }
    last.p0 = p0, last.rows = rows, last.theta = theta, last.m = m, last.made = true;
  }
  cos = last.cos;
  sin = last.sin;
}

// Every pair (a_u, a_w) of every row t of a [B, N, T, D] (u, w: pair c's coordinates in the
// layout `p`) turned by the angle whose cos and sin are in the tables [T, D/2], backwards (sign
// −1: the transposed rotation) or forwards, into o (added to it when `add`):
//     o_u = a_u cos − s a_w sin,   o_w = s a_u sin + a_w cos,   s = sign.
template <class T>
void rotate_pairs(const RowsGeometry& g, const T* cs, const T* sn, const T* a, T* o, T sign,
                  bool add, RotaryPairs p) {
  const index_t pairs = g.D / 2;
  const index_t u_step = p == RotaryPairs::adjacent ? 2 : 1;     // u = c·u_step
  const index_t w_off = p == RotaryPairs::adjacent ? 1 : pairs;  // w = u + w_off
  parallel_for(g.B * g.N * g.T, 6.0 * double(g.D), [&](index_t r) {
    const index_t t = r % g.T;
    const T* x = a + r * g.D;
    T* y = o + r * g.D;
    for (index_t c = 0; c < pairs; ++c) {
      const index_t u = c * u_step, w = u + w_off;
      const T co = cs[t * pairs + c], si = sign * sn[t * pairs + c];
      const T y0 = x[u] * co - x[w] * si, y1 = x[u] * si + x[w] * co;
      y[u] = add ? y[u] + y0 : y0;
      y[w] = add ? y[w] + y1 : y1;
    }
  });
}

// y = m R_t x per pair (x_u, x_w) of row t; R_t is a rotation, so dx = m R_tᵀ dy:
//   dx_u = dy_u cos + dy_w sin,   dx_w = −dy_u sin + dy_w cos   (m inside the tables).
// self.saved[0], [1]: the cos and sin tables [T, D/2].
struct RotaryOp {
  std::int32_t x;
  RowsGeometry g;
  RotaryPairs pairs;

  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    if (!tape.requires_grad(x)) return;
    rotate_pairs(g, self.saved[0].data(), self.saved[1].data(), self.grad->data(),
                 tape.grad(x).data(), T{-1}, true, pairs);
  }
};

// y = g_n u, u = x / max(‖x‖, ε) per row of head n. With n = ‖x‖ > ε:
//   dx = g_n (dy − u (u·dy)) / n   (the projection of dy off u, over the length),
// else u = x / ε is linear in x and dx = g_n dy / ε; dg_n = Σ_rows u·dy. dg is summed per
// (b, n) task into self.saved[0] and added over b in order: the result does not depend on the
// thread count.
struct UnitRowsOp {
  std::int32_t x, gain;  // gain < 0: none (g = 1)
  RowsGeometry g;
  double eps;

  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    const T* xv = tape.value(x).data();
    const T* gv = gain >= 0 ? tape.value(gain).data() : nullptr;
    const T* dy = self.grad->data();
    T* dx = tape.requires_grad(x) ? tape.grad(x).data() : nullptr;
    const bool need_g = gain >= 0 && tape.requires_grad(gain);
    if (need_g) {
      self.saved.resize(1);
      self.saved[0].resize(Shape{g.B * g.N});
      self.saved[0].zero();
    }
    T* partial = need_g ? self.saved[0].data() : nullptr;
    parallel_for(g.B * g.N, 8.0 * double(g.T * g.D), [&](index_t task) {
      const T gn = gv ? gv[task % g.N] : T{1};
      T acc = 0;
      for (index_t t = 0; t < g.T; ++t) {
        const T* xr = xv + (task * g.T + t) * g.D;
        const T* d = dy + (task * g.T + t) * g.D;
        T n2 = 0, xd = 0;
        for (index_t c = 0; c < g.D; ++c) {
          n2 += xr[c] * xr[c];
          xd += xr[c] * d[c];
        }
        const T n = std::max(std::sqrt(n2), static_cast<T>(eps));
        const T ud = xd / n;  // u·dy
        acc += ud;
        if (!dx) continue;
        T* o = dx + (task * g.T + t) * g.D;
        if (std::sqrt(n2) > static_cast<T>(eps))
          for (index_t c = 0; c < g.D; ++c) o[c] += gn * (d[c] - xr[c] / n * ud) / n;
        else
          for (index_t c = 0; c < g.D; ++c) o[c] += gn * d[c] / n;
      }
      if (partial) partial[task] = acc;
    });
    if (!need_g) return;
    T* dg = tape.grad(gain).data();
    for (index_t n = 0; n < g.N; ++n)
      for (index_t b = 0; b < g.B; ++b) dg[n] += partial[b * g.N + n];
  }
};

// y = g_m x per row of head n, m = n / (N / G) for gain [G]: dx = g_m dy, dg_m = Σ x·dy over the
// rows of m's heads, summed per (b, n) task into self.saved[0] and added over b and n in order, as
// UnitRowsOp does.
struct HeadScaleOp {
  std::int32_t x, gain;
  RowsGeometry g;
  index_t groups;  // G, the gain's length

  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    const T* xv = tape.value(x).data();
    const T* gv = tape.value(gain).data();
    const T* dy = self.grad->data();
    T* dx = tape.requires_grad(x) ? tape.grad(x).data() : nullptr;
    const bool need_g = tape.requires_grad(gain);
    if (need_g) {
      self.saved.resize(1);
      self.saved[0].resize(Shape{g.B * g.N});
      self.saved[0].zero();
    }
    T* partial = need_g ? self.saved[0].data() : nullptr;
    const index_t block = g.T * g.D;  // one (b, n) task
    const index_t group = g.N / groups;
    parallel_for(g.B * g.N, 3.0 * double(block), [&](index_t task) {
      const T gn = gv[(task % g.N) / group];
      const T* xr = xv + task * block;
      const T* d = dy + task * block;
      T acc = 0;
      for (index_t i = 0; i < block; ++i) acc += xr[i] * d[i];
      if (dx)
        for (index_t i = 0; i < block; ++i) dx[task * block + i] += gn * d[i];
      if (partial) partial[task] = acc;
    });
    if (!need_g) return;
    T* dg = tape.grad(gain).data();
    for (index_t n = 0; n < g.N; ++n)
      for (index_t b = 0; b < g.B; ++b) dg[n / group] += partial[b * g.N + n];
  }
};

}  // namespace detail

// Rotary position embedding (Su et al., "RoFormer: Enhanced Transformer with Rotary Position
// Embedding"): x [B, N, T, D] with D even; row t is at position p0 + t, and its pair c < D/2,
// (x_u, x_w) = (x_{2c}, x_{2c+1}) (`pairs` adjacent, the paper's) or (x_c, x_{c+D/2}) (halves,
// GPT-NeoX's and Llama's), turns by the angle (p0 + t) θ_c, θ_c = base^{−2c/D} (stretched by
// `scaling`, RotaryScaling), times the attention factor m (1 but for YaRN):
//     y_u = m (x_u cos − x_w sin),   y_w = m (x_u sin + x_w cos).
// A rotation keeps lengths, and R_pᵀ R_p' = R_{p'−p}: q rotated at p dotted with k rotated at p'
// depends on the positions through p' − p only.
template <class T>
Var<T> rotary_rotation(const Var<T>& x, index_t position0, double base = 10000.0,
                       RotaryPairs pairs = RotaryPairs::adjacent,
                       const RotaryScaling& scaling = {}) {
  Tape<T>& tape = x.tape();
  tape.check(x, "rotary_rotation");
  const detail::RowsGeometry g = detail::rows_geometry(x.shape(), "rotary_rotation");
  ATTN_CHECK(g.D % 2 == 0, shape_error, "rotary_rotation: the head width must be even (pairs of ",
             "coordinates turn together), got ", x.shape());
  ATTN_CHECK(base > 1, value_error, "rotary_rotation: base must be > 1, got ", base);
  auto [y, node] = tape.push(x.shape(), "rotary_rotation", x.requires_grad());
  node.saved.resize(2);
  detail::rotary_table(position0, g.T, rotary_frequencies(g.D, base, scaling),
                       rotary_attention_factor(scaling), node.saved[0], node.saved[1]);
  detail::rotate_pairs(g, node.saved[0].data(), node.saved[1].data(), x.value().data(),
                       node.value->data(), T{1}, false, pairs);
  if (node.requires_grad) tape.set_backward(node, detail::RotaryOp{x.index(), g, pairs});
  return y;
}

// Rows of x [B, N, T, D] scaled to unit length and by the gain of their head, gain [N]:
//     y = g_n x / max(‖x‖, ε)
// (a zero row stays zero, as torch.nn.functional.normalize does). `gain` null: g = 1.
template <class T>
Var<T> unit_rows(const Var<T>& x, const Var<T>* gain = nullptr, double eps = 1e-12) {
  Tape<T>& tape = x.tape();
  tape.check(x, "unit_rows");
  if (gain) tape.check(*gain, "unit_rows");
  const detail::RowsGeometry g = detail::rows_geometry(x.shape(), "unit_rows");
  ATTN_CHECK(!gain || gain->shape() == Shape{g.N}, shape_error, "unit_rows: gain must be [", g.N,
             "] (one per head of x ", x.shape(), "), got ", gain->shape());
  auto [y, node] =
      tape.push(x.shape(), "unit_rows", x.requires_grad() || (gain && gain->requires_grad()));
  const T* xv = x.value().data();
  const T* gv = gain ? gain->value().data() : nullptr;
  T* yv = node.value->data();
  parallel_for(g.B * g.N * g.T, 4.0 * double(g.D), [&](index_t r) {
    const T* a = xv + r * g.D;
    T n2 = 0;
    for (index_t c = 0; c < g.D; ++c) n2 += a[c] * a[c];
    const T scale =
        (gv ? gv[(r / g.T) % g.N] : T{1}) / std::max(std::sqrt(n2), static_cast<T>(eps));
    for (index_t c = 0; c < g.D; ++c) yv[r * g.D + c] = a[c] * scale;
  });
  if (node.requires_grad)
    tape.set_backward(node, detail::UnitRowsOp{x.index(), gain ? gain->index() : -1, g, eps});
  return y;
}

// Rows of x [B, N, T, D] times the gain of their head, gain [G] with G dividing N:
//     y = g_m x,   m = n / (N / G)
// (G = N: a gain per head; fewer: consecutive heads share one, as grouped-query heads share a key).
template <class T>
Var<T> head_scale(const Var<T>& x, const Var<T>& gain) {
  Tape<T>& tape = x.tape();
  tape.check(x, "head_scale");
  tape.check(gain, "head_scale");
  const detail::RowsGeometry g = detail::rows_geometry(x.shape(), "head_scale");
  const index_t groups = gain.shape().rank() == 1 ? gain.shape()[0] : 0;
  ATTN_CHECK(groups > 0 && g.N % groups == 0, shape_error,
             "head_scale: gain must be [G] with G dividing the ", g.N, " heads of x ", x.shape(),
             ", got ", gain.shape());
  auto [y, node] = tape.push(x.shape(), "head_scale", x.requires_grad() || gain.requires_grad());
  const T* xv = x.value().data();
  const T* gv = gain.value().data();
  T* yv = node.value->data();
  const index_t group = g.N / groups;
  parallel_for(g.B * g.N * g.T, double(g.D), [&](index_t r) {
    const T gn = gv[((r / g.T) % g.N) / group];
    for (index_t c = 0; c < g.D; ++c) yv[r * g.D + c] = gn * xv[r * g.D + c];
  });
  if (node.requires_grad)
    tape.set_backward(node, detail::HeadScaleOp{x.index(), gain.index(), g, groups});
  return y;
}

// One matrix per head: x [B, N, T, K] and w [N, K, M] (or [N, M, K] when tw) give
//     y[b, n] = x[b, n] op(w[n])   -> [B, N, T, M].
// matmul batches over equal leading axes only, so the head axis goes to the front for one batched
// GEMM per head ([N, B·T, K] x [N, K, M]) and back afterwards.
template <class T>
Var<T> per_head_matmul(const Var<T>& x, const Var<T>& w, bool tw = false) {
  const Shape& s = x.shape();
  ATTN_CHECK(s.rank() == 4 && w.shape().rank() == 3 && w.shape()[0] == s[1], shape_error,
             "per_head_matmul: x must be [B, N, T, K] and w [N, K, M], got ", s, " and ",
             w.shape());
  const index_t batch = s[0], n = s[1], t = s[2], k = s[3];
  const index_t m = tw ? w.shape()[1] : w.shape()[2];
  const Var<T> xh = reshape(transpose(x, 0, 1), {n, batch * t, k});  // [N, B·T, K]
  const Var<T> y = matmul(xh, w, false, tw);                         // [N, B·T, M]
  return transpose(reshape(y, {n, batch, t, m}), 0, 1);              // [B, N, T, M]
}

}  // namespace attn
