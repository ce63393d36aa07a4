// attn/autodiff/linalg.hpp: matrix products (matmul, and linear: x Wᵀ + b in one node) and axis
// swaps with hand-written backward. Products run attn::gemm on fixed blocks (core/gemm.hpp), so
// results do not depend on the thread count. Does not support general broadcasting of batch
// axes: both operands have the same leading axes, or one of them is a plain matrix shared by
// every batch entry.
#pragma once

#include <algorithm>

#include "../core/gemm.hpp"
#include "expression.hpp"

namespace attn {

namespace detail {

// How matmul sees its operands: op(A) [M, K] times op(B) [K, N], `batch` times, with each
// operand either batched (stride = one matrix) or shared (stride 0).
struct MatmulGeometry {
  index_t batch = 1, m = 0, n = 0, k = 0;
  index_t stride_a = 0, stride_b = 0;
  bool ta = false, tb = false;
  bool fold = false;  // A batched, B shared, A not transposed: one GEMM over [batch * M, K]
};

// C[b] (+)= op(A[b]) op(B[b]) for every batch entry; shared operands have stride 0. When C is
// written per batch entry the entries run in parallel; when C is shared (stride_c == 0, the
// gradient of a shared operand) they are summed in batch order.
template <class T>
void batched_gemm(const T* a, index_t stride_a, bool ta, const T* b, index_t stride_b, bool tb,
                  T* c, index_t stride_c, index_t batch, index_t m, index_t n, index_t k,
                  bool accumulate) {
  if (batch == 1 || stride_c == 0) {
    for (index_t i = 0; i < batch; ++i)
      gemm(a + i * stride_a, ta, b + i * stride_b, tb, c + i * stride_c, m, n, k,
           accumulate || (stride_c == 0 && i > 0));
    return;
  }
  parallel_for(batch, 2.0 * double(m) * double(n) * double(k), [&](index_t i) {
    gemm_serial(a + i * stride_a, ta, b + i * stride_b, tb, c + i * stride_c, m, n, k, accumulate);
  });
}

struct MatmulOp {
  std::int32_t a, b;
  MatmulGeometry g;

  // C = op(A) op(B):  d op(A) = dC op(B)ᵀ,  d op(B) = op(A)ᵀ dC. Each product writes its
  // operand's gradient (the first contribution of the pass) or adds to it.
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    const T* dc = self.grad->data();
    const T* av = tape.value(a).data();
    const T* bv = tape.value(b).data();
    const index_t sc = g.m * g.n;
    if (g.fold) {
      const index_t rows = g.batch * g.m;
      if (tape.requires_grad(a)) {
        const auto da = tape.grad_write(a);
        gemm(dc, false, bv, !g.tb, da.data, rows, g.k, g.n, da.accumulate);
      }
      if (tape.requires_grad(b)) {
        const auto db = tape.grad_write(b);
        if (g.tb)  // B stored [N, K]: dB = dCᵀ A
          gemm(dc, true, av, false, db.data, g.n, g.k, rows, db.accumulate);
        else  // dB = Aᵀ dC
          gemm(av, true, dc, false, db.data, g.k, g.n, rows, db.accumulate);
      }
      return;
    }
    if (tape.requires_grad(a)) {
      const auto da = tape.grad_write(a);
      if (!g.ta)  // dA [M, K] = dC op(B)ᵀ
        batched_gemm(dc, sc, false, bv, g.stride_b, !g.tb, da.data, g.stride_a, g.batch, g.m, g.k,
                     g.n, da.accumulate);
      else  // A stored [K, M]: dA = op(B) dCᵀ
        batched_gemm(bv, g.stride_b, g.tb, dc, sc, true, da.data, g.stride_a, g.batch, g.k, g.m,
                     g.n, da.accumulate);
    }
    if (tape.requires_grad(b)) {
      const auto db = tape.grad_write(b);
      if (!g.tb)  // dB [K, N] = op(A)ᵀ dC
        batched_gemm(av, g.stride_a, !g.ta, dc, sc, false, db.data, g.stride_b, g.batch, g.k, g.n,
                     g.m, db.accumulate);
      else  // B stored [N, K]: dB = dCᵀ op(A)
        batched_gemm(dc, sc, true, av, g.stride_a, g.ta, db.data, g.stride_b, g.batch, g.n, g.k,
                     g.m, db.accumulate);
    }
  }
};

}  // namespace detail

// Matrix product op(A) op(B), where op transposes the last two axes when ta / tb is set.
// Shapes: [M, K] x [K, N] -> [M, N]; [..., M, K] x [..., K, N] -> [..., M, N] (same leading
// axes, rank 3 or 4); [..., M, K] x [K, N] and [M, K] x [..., K, N] share the matrix operand.
template <Operand A, Operand B>
auto matmul(const A& a_in, const B& b_in, bool ta = false, bool tb = false) {
  const auto a = eval(a_in);
  const auto b = eval(b_in);
  using T = typename decltype(a)::value_type;
  Tape<T>& tape = a.tape();
  tape.check(a, "matmul");
  tape.check(b, "matmul");
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  ATTN_CHECK(sa.rank() >= 2 && sb.rank() >= 2, shape_error,
             "matmul: operands need rank 2 to 4, got ", sa, " x ", sb);
  detail::MatmulGeometry g;
  g.ta = ta;
  g.tb = tb;
  g.m = ta ? sa.dim(-1) : sa.dim(-2);
  g.k = ta ? sa.dim(-2) : sa.dim(-1);
  const index_t kb = tb ? sb.dim(-1) : sb.dim(-2);
  g.n = tb ? sb.dim(-2) : sb.dim(-1);
  ATTN_CHECK(g.k == kb, shape_error, "matmul: inner dimensions differ: ", sa, (ta ? "ᵀ" : ""),
             " x ", sb, (tb ? "ᵀ" : ""));
  Shape out;
  if (sa.rank() > 2 && sb.rank() > 2) {
    ATTN_CHECK(sa.rank() == sb.rank() &&
                   std::equal(sa.dims().begin(), sa.dims().end() - 2, sb.dims().begin()),
               shape_error, "matmul: batch axes differ: ", sa, " x ", sb);
  }
  const Shape& batched = sa.rank() >= sb.rank() ? sa : sb;
  std::array<index_t, 4> dims{};
  const int r = batched.rank();
  for (int i = 0; i < r - 2; ++i) dims[static_cast<std::size_t>(i)] = batched[i];
  dims[static_cast<std::size_t>(r - 2)] = g.m;
  dims[static_cast<std::size_t>(r - 1)] = g.n;
  out = Shape(std::span<const index_t>(dims.data(), static_cast<std::size_t>(r)));
  g.batch = out.numel() / std::max<index_t>(g.m * g.n, 1);
  if (out.numel() == 0) g.batch = 1;
  g.stride_a = sa.rank() > 2 ? g.m * g.k : 0;
  g.stride_b = sb.rank() > 2 ? g.k * g.n : 0;
  g.fold = sa.rank() > 2 && sb.rank() == 2 && !ta;

  auto [c, node] = tape.push(out, "matmul", a.requires_grad() || b.requires_grad());
  T* cv = node.value->data();
  if (g.fold)
    gemm(a.value().data(), false, b.value().data(), tb, cv, g.batch * g.m, g.n, g.k);
  else
    detail::batched_gemm(a.value().data(), g.stride_a, ta, b.value().data(), g.stride_b, tb, cv,
                         g.m * g.n, g.batch, g.m, g.n, g.k, false);
  tape.set_backward(node, detail::MatmulOp{a.index(), b.index(), g});
  return c;
}

namespace detail {

struct LinearOp {
  std::int32_t x, w, b;  // b < 0: no bias
  index_t rows, in, out;

  // y = x Wᵀ + b, x [rows, in], W [out, in]:  dx = dy W,  dW = dyᵀ x,  db = Σ_rows dy.
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    const T* dy = self.grad->data();
    if (tape.requires_grad(x)) {
      const auto dx = tape.grad_write(x);
      gemm(dy, false, tape.value(w).data(), false, dx.data, rows, in, out, dx.accumulate);
    }
    if (tape.requires_grad(w)) {
      const auto dw = tape.grad_write(w);
      gemm(dy, true, tape.value(x).data(), false, dw.data, out, in, rows, dw.accumulate);
    }
    if (b >= 0 && tape.requires_grad(b)) {
      const auto db = tape.grad_write(b);
      // Column blocks: each column's sum runs on one thread, in row order.
      constexpr index_t cb = 64;
      parallel_for(block_count(out, cb), double(rows * cb), [&](index_t blk) {
        const index_t c0 = blk * cb, c1 = std::min(out, c0 + cb);
        T* acc = db.data;
        if (!db.accumulate) std::fill(acc + c0, acc + c1, T{0});
        for (index_t r = 0; r < rows; ++r)
          for (index_t j = c0; j < c1; ++j) acc[j] += dy[r * out + j];
      });
    }
  }
};

}  // namespace detail

// The affine map of nn.Linear, y = x Wᵀ + b, as one node: x [..., in], W [out, in] (PyTorch's
// layout), b [out] (or no bias) -> y [..., out]. Equal to matmul(x, W, false, true) + b, without
// the intermediate product node (its value and gradient) and the separate bias pass.
template <Operand X, class T>
Var<T> linear(const X& x_in, const Var<T>& weight, const Var<T>* bias = nullptr) {
  const Var<T> x = eval(x_in);
  Tape<T>& tape = x.tape();
  tape.check(x, "linear");
  tape.check(weight, "linear");
  const Shape& sx = x.shape();
  const Shape& sw = weight.shape();
  ATTN_CHECK(sx.rank() >= 1 && sw.rank() == 2 && sw[1] == sx.last(), shape_error, "linear: x ", sx,
             " does not fit the weight ", sw, " (expected [out, ", sx.last(), "])");
  const index_t in = sw[1], out = sw[0], rows = sx.numel() / std::max<index_t>(in, 1);
  bool requires_grad = x.requires_grad() || weight.requires_grad();
  if (bias != nullptr) {
    tape.check(*bias, "linear");
    ATTN_CHECK(bias->shape().rank() == 1 && bias->numel() == out, shape_error, "linear: bias ",
               bias->shape(), " does not fit the weight ", sw, " (expected [", out, "])");
    requires_grad = requires_grad || bias->requires_grad();
  }
  std::array<index_t, 4> dims{};
  for (int i = 0; i < sx.rank(); ++i) dims[static_cast<std::size_t>(i)] = sx[i];
  dims[static_cast<std::size_t>(sx.rank() - 1)] = out;
  const Shape ys(std::span<const index_t>(dims.data(), static_cast<std::size_t>(sx.rank())));
  auto [y, node] = tape.push(ys, "linear", requires_grad);
  T* yv = node.value->data();
  if (bias != nullptr) {  // y = b in every row, then y += x Wᵀ
    const T* bv = bias->value().data();
    parallel_for(rows, double(out), [&](index_t r) { std::copy_n(bv, out, yv + r * out); });
  }
  gemm(x.value().data(), false, weight.value().data(), true, yv, rows, out, in, bias != nullptr);
  tape.set_backward(node, detail::LinearOp{x.index(), weight.index(),
                                           bias != nullptr ? bias->index() : -1, rows, in, out});
  return y;
}

template <Operand X, class T>
Var<T> linear(const X& x, const Var<T>& weight, const Var<T>& bias) {
  return linear(x, weight, &bias);
}

namespace detail {

// Copies src (shape `s`) into dst with axes a0 and a1 swapped; adds instead when accumulate.
template <class T>
void swap_axes(const T* src, const Shape& s, int a0, int a1, T* dst, bool accumulate) {
  std::array<index_t, 4> dims{1, 1, 1, 1}, in_stride{0, 0, 0, 0};
  const int r = s.rank();
  // Pad to rank 4 on the left so one loop nest serves every rank.
  for (int i = 0; i < r; ++i) {
    dims[static_cast<std::size_t>(4 - r + i)] = s[i];
    in_stride[static_cast<std::size_t>(4 - r + i)] = s.stride(i);
  }
  std::swap(dims[static_cast<std::size_t>(4 - r + a0)], dims[static_cast<std::size_t>(4 - r + a1)]);
  std::swap(in_stride[static_cast<std::size_t>(4 - r + a0)],
            in_stride[static_cast<std::size_t>(4 - r + a1)]);
  // dims are now the output's; walk the output in order and gather from the input.
  const index_t outer = dims[0] * dims[1];
  parallel_for(outer, double(dims[2] * dims[3]), [&](index_t o) {
    const index_t i0 = o / dims[1], i1 = o % dims[1];
    T* out = dst + o * dims[2] * dims[3];
    const T* base = src + i0 * in_stride[0] + i1 * in_stride[1];
    for (index_t i2 = 0; i2 < dims[2]; ++i2) {
      const T* in = base + i2 * in_stride[2];
      T* d = out + i2 * dims[3];
      if (in_stride[3] == 1) {  // the last axis stays in place (splitting heads): runs of it
        if (accumulate)
          for (index_t i3 = 0; i3 < dims[3]; ++i3) d[i3] += in[i3];
        else
          std::copy_n(in, dims[3], d);
      } else {
        for (index_t i3 = 0; i3 < dims[3]; ++i3) {
          const T v = in[i3 * in_stride[3]];
          d[i3] = accumulate ? d[i3] + v : v;
        }
      }
    }
  });
}

struct TransposeOp {
  std::int32_t x;
  int a0, a1;

  // y = swap(x) is a permutation of elements: dx = swap(dy).
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    if (!tape.requires_grad(x)) return;
    const auto dx = tape.grad_write(x);
    swap_axes(self.grad->data(), self.grad->shape(), a0, a1, dx.data, dx.accumulate);
  }
};

}  // namespace detail

// Swaps two axes (by default the last two), copying the elements.
template <Operand X>
auto transpose(const X& x_in, int axis0 = -2, int axis1 = -1) {
  const auto x = eval(x_in);
  using T = typename decltype(x)::value_type;
  Tape<T>& tape = x.tape();
  tape.check(x, "transpose");
  const Shape& s = x.shape();
  const int a0 = s.normalize_axis(axis0, "transpose"), a1 = s.normalize_axis(axis1, "transpose");
  std::array<index_t, 4> dims{};
  for (int i = 0; i < s.rank(); ++i) dims[static_cast<std::size_t>(i)] = s[i];
  std::swap(dims[static_cast<std::size_t>(a0)], dims[static_cast<std::size_t>(a1)]);
  const Shape out(std::span<const index_t>(dims.data(), static_cast<std::size_t>(s.rank())));
  auto [y, node] = tape.push(out, "transpose", x.requires_grad());
  detail::swap_axes(x.value().data(), s, a0, a1, node.value->data(), false);
  tape.set_backward(node, detail::TransposeOp{x.index(), a0, a1});
  return y;
}

namespace detail {

struct TransposeReshapeOp {
  std::int32_t x;
  int a0, a1;
  Shape swapped;  // the view of x with the axes swapped: the layout of y's elements

  // y's elements are x's, permuted: dx = swap(dy read as `swapped`).
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    if (!tape.requires_grad(x)) return;
    const auto dx = tape.grad_write(x);
    swap_axes(self.grad->data(), swapped, a0, a1, dx.data, dx.accumulate);
  }
};

}  // namespace detail

// reshape(transpose(reshape(x, view), axis0, axis1), out) as one copy and one node, where view and
// out have x's element count. Splitting heads is one: [B, T, H·Dh] read as [B, T, H, Dh], axes
// 1 and 2 swapped, gives [B, H, T, Dh]; merging them back is another.
template <Operand X>
auto transpose_reshape(const X& x_in, const Shape& view, int axis0, int axis1, const Shape& out) {
  const auto x = eval(x_in);
  using T = typename decltype(x)::value_type;
  Tape<T>& tape = x.tape();
  tape.check(x, "transpose_reshape");
  ATTN_CHECK(view.numel() == x.numel() && out.numel() == x.numel(), shape_error,
             "transpose_reshape: ", x.shape(), " (", x.numel(), " elements) cannot be read as ",
             view, " or written as ", out);
  const int a0 = view.normalize_axis(axis0, "transpose_reshape"),
            a1 = view.normalize_axis(axis1, "transpose_reshape");
  std::array<index_t, 4> dims{};
  for (int i = 0; i < view.rank(); ++i) dims[static_cast<std::size_t>(i)] = view[i];
  std::swap(dims[static_cast<std::size_t>(a0)], dims[static_cast<std::size_t>(a1)]);
  const Shape swapped(std::span<const index_t>(dims.data(), static_cast<std::size_t>(view.rank())));
  auto [y, node] = tape.push(out, "transpose_reshape", x.requires_grad());
  detail::swap_axes(x.value().data(), view, a0, a1, node.value->data(), false);
  tape.set_backward(node, detail::TransposeReshapeOp{x.index(), a0, a1, swapped});
  return y;
}

}  // namespace attn
