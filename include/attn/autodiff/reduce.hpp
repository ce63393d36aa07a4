// attn/autodiff/reduce.hpp: sum and mean, over all elements or along one axis, with backward.
// Sums accumulate in double and in a fixed order, so they do not depend on the thread count.
#pragma once

#include <span>

#include "shape_ops.hpp"

namespace attn {

namespace detail {

struct SumAllOp {
  std::int32_t x;
  double scale;  // 1 for sum, 1/n for mean

  // y = scale Σ x_i: dx_i = scale dy.
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    if (tape.requires_grad(x)) tape.grad(x).array() += static_cast<T>(scale) * (*self.grad)[0];
  }
};

struct SumAxisOp {
  std::int32_t x;
  int axis;
  double scale;

  // y[o, i] = scale Σ_j x[o, j, i]: dx[o, j, i] = scale dy[o, i].
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    if (!tape.requires_grad(x)) return;
    Tensor<T>& gx = tape.grad(x);
    const AxisSplit s = split_at(gx.shape(), axis);
    const T* gy = self.grad->data();
    const T sc = static_cast<T>(scale);
    parallel_for(s.outer, double(s.len * s.inner), [&](index_t o) {
      for (index_t j = 0; j < s.len; ++j) {
        T* d = gx.data() + (o * s.len + j) * s.inner;
        for (index_t i = 0; i < s.inner; ++i) d[i] += sc * gy[o * s.inner + i];
      }
    });
  }
};

template <class T>
Var<T> sum_all(const Var<T>& x, double scale, const char* name) {
  Tape<T>& tape = x.tape();
  tape.check(x, name);
  auto [y, node] = tape.push(Shape{}, name, x.requires_grad());
  double acc = 0.0;
  for (const T v : x.value()) acc += static_cast<double>(v);
  (*node.value)[0] = static_cast<T>(acc * scale);
  tape.set_backward(node, SumAllOp{x.index(), scale});
  return y;
}

template <class T>
Var<T> sum_axis(const Var<T>& x, int axis, bool keepdim, bool mean, const char* name) {
  Tape<T>& tape = x.tape();
  tape.check(x, name);
  const Shape& s = x.shape();
  const int ax = s.normalize_axis(axis, name);
  std::array<index_t, 4> dims{};
  int r = 0;
  for (int i = 0; i < s.rank(); ++i) {
    if (i != ax)
      dims[static_cast<std::size_t>(r++)] = s[i];
    else if (keepdim)
      dims[static_cast<std::size_t>(r++)] = 1;
  }
  const Shape out(std::span<const index_t>(dims.data(), static_cast<std::size_t>(r)));
  const double scale = mean ? 1.0 / static_cast<double>(std::max<index_t>(s[ax], 1)) : 1.0;
  auto [y, node] = tape.push(out, name, x.requires_grad());
  const AxisSplit sp = split_at(s, ax);
  const T* src = x.value().data();
  T* dst = node.value->data();
  parallel_for(sp.outer, double(sp.len * sp.inner), [&](index_t o) {
    for (index_t i = 0; i < sp.inner; ++i) {
      double acc = 0.0;
      for (index_t j = 0; j < sp.len; ++j)
        acc += static_cast<double>(src[(o * sp.len + j) * sp.inner + i]);
      dst[o * sp.inner + i] = static_cast<T>(acc * scale);
    }
  });
  tape.set_backward(node, SumAxisOp{x.index(), ax, scale});
  return y;
}

}  // namespace detail

// Σ of all elements, as a rank-0 Var.
template <Operand X>
auto sum(const X& x) {
  return detail::sum_all(eval(x), 1.0, "sum");
}

// Mean of all elements, as a rank-0 Var (0 for an empty tensor).
template <Operand X>
auto mean(const X& x) {
  const auto v = eval(x);
  return detail::sum_all(v, 1.0 / static_cast<double>(std::max<index_t>(v.numel(), 1)), "mean");
}

// Σ along `axis`; the axis is removed unless keepdim.
template <Operand X>
auto sum(const X& x, int axis, bool keepdim = false) {
  return detail::sum_axis(eval(x), axis, keepdim, false, "sum");
}

// Mean along `axis`; the axis is removed unless keepdim.
template <Operand X>
auto mean(const X& x, int axis, bool keepdim = false) {
  return detail::sum_axis(eval(x), axis, keepdim, true, "mean");
}

}  // namespace attn
