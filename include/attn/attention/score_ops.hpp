// attn/attention/score_ops.hpp: the differentiable per-token operations that the scores of
// module_scores.hpp apply to per-head queries and keys [B, N, T, D] before a quadratic-form score:
// the rotary rotation by position, rows scaled to unit length times a per-head gain, and one
// matrix per head. Each op's formula and hand-written backward sit side by side.
// Does not compute scores or attention, and mixes no tokens: row t of the output depends on row t
// of the input only (so a decoding step transforms just its new rows).
#pragma once

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

namespace detail {

struct RowsGeometry {
  index_t B = 0, N = 0, T = 0, D = 0;  // [B, N heads, T rows, D]
};

inline RowsGeometry rows_geometry(const Shape& s, const char* op) {
  ATTN_CHECK(s.rank() == 4, shape_error, op, ": x must be [B, heads, T, D], got ", s);
  return {s[0], s[1], s[2], s[3]};
}

// cos and sin of the rotary angles (p0 + t) θ_c, θ_c = base^{−2c/D}, for rows t < T and pairs
// c < D/2, each [T, D/2]. The angle is formed in double (positions times θ_0 = 1 reach the
// thousands) and rounded once.
template <class T>
void rotary_table(index_t p0, index_t rows, index_t d, double base, Tensor<T>& cos,
                  Tensor<T>& sin) {
  const index_t pairs = d / 2;
  cos.resize(Shape{rows, pairs});
  sin.resize(Shape{rows, pairs});
  for (index_t c = 0; c < pairs; ++c) {
    const double theta = std::pow(base, -2.0 * static_cast<double>(c) / static_cast<double>(d));
    for (index_t t = 0; t < rows; ++t) {
      const double angle = static_cast<double>(p0 + t) * theta;
      cos(t, c) = static_cast<T>(std::cos(angle));
      sin(t, c) = static_cast<T>(std::sin(angle));
    }
  }
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

// y = R_t x per pair (x_u, x_w) of row t; R_t is a rotation, so dx = R_tᵀ dy:
//   dx_u = dy_u cos + dy_w sin,   dx_w = −dy_u sin + dy_w cos.
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

}  // namespace detail

// Rotary position embedding (Su et al., "RoFormer: Enhanced Transformer with Rotary Position
// Embedding"): x [B, N, T, D] with D even; row t is at position p0 + t, and its pair c < D/2,
// (x_u, x_w) = (x_{2c}, x_{2c+1}) (`pairs` adjacent, the paper's) or (x_c, x_{c+D/2}) (halves,
// GPT-NeoX's and Llama's), turns by the angle (p0 + t) θ_c, θ_c = base^{−2c/D}:
//     y_u = x_u cos − x_w sin,   y_w = x_u sin + x_w cos.
// A rotation keeps lengths, and R_pᵀ R_p' = R_{p'−p}: q rotated at p dotted with k rotated at p'
// depends on the positions through p' − p only.
template <class T>
Var<T> rotary_rotation(const Var<T>& x, index_t position0, double base = 10000.0,
                       RotaryPairs pairs = RotaryPairs::adjacent) {
  Tape<T>& tape = x.tape();
  tape.check(x, "rotary_rotation");
  const detail::RowsGeometry g = detail::rows_geometry(x.shape(), "rotary_rotation");
  ATTN_CHECK(g.D % 2 == 0, shape_error, "rotary_rotation: the head width must be even (pairs of ",
             "coordinates turn together), got ", x.shape());
  ATTN_CHECK(base > 1, value_error, "rotary_rotation: base must be > 1, got ", base);
  auto [y, node] = tape.push(x.shape(), "rotary_rotation", x.requires_grad());
  node.saved.resize(2);
  detail::rotary_table(position0, g.T, g.D, base, node.saved[0], node.saved[1]);
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
