// attn/autodiff/shape_ops.hpp: reshape, slice and concatenate, with backward. Each copies its
// elements into a node of its own (the tape has no aliasing views). Does not broadcast.
#pragma once

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "expression.hpp"

namespace attn {

namespace detail {

struct ReshapeOp {
  std::int32_t x;

  // Same elements in the same order: dx = dy, read with x's shape. As the first contribution
  // the buffer itself is handed over, not copied.
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    if (!tape.requires_grad(x) || tape.pass_grad(self, x)) return;
    const auto dx = tape.grad_write(x);
    VectorMap<T> out(dx.data, self.grad->numel());
    if (dx.accumulate)
      out += self.grad->array();
    else
      out = self.grad->array();
  }
};

// Sizes of an axis split: [outer, axis, inner] with inner the product of the later axes.
struct AxisSplit {
  index_t outer, len, inner;
};
inline AxisSplit split_at(const Shape& s, int axis) {
  return {s.numel() / std::max<index_t>(s[axis] * s.stride(axis), 1), s[axis], s.stride(axis)};
}

struct SliceOp {
  std::int32_t x;
  int axis;
  index_t begin;

  // y = x[..., begin:end, ...]: dx[..., begin:end, ...] += dy.
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    if (!tape.requires_grad(x)) return;
    Tensor<T>& gx = tape.grad(x);
    const AxisSplit in = split_at(gx.shape(), axis), out = split_at(self.grad->shape(), axis);
    const index_t run = out.len * out.inner;
    parallel_for(in.outer, double(run), [&](index_t o) {
      T* d = gx.data() + o * in.len * in.inner + begin * in.inner;
      const T* s = self.grad->data() + o * run;
      for (index_t i = 0; i < run; ++i) d[i] += s[i];
    });
  }
};

struct ConcatOp {
  int axis;

  // y = [x_0, x_1, ...] along the axis: each dx_i is its block of dy. The input node indices
  // are kept in self.saved_index (there may be any number of them).
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    const AxisSplit out = split_at(self.grad->shape(), axis);
    index_t offset = 0;
    for (const std::int32_t x : self.saved_index) {
      const index_t len = tape.value(x).shape()[axis];
      if (tape.requires_grad(x)) {
        T* gx = tape.grad(x).data();
        const index_t run = len * out.inner;
        parallel_for(out.outer, double(run), [&](index_t o) {
          const T* s = self.grad->data() + o * out.len * out.inner + offset * out.inner;
          T* d = gx + o * run;
          for (index_t i = 0; i < run; ++i) d[i] += s[i];
        });
      }
      offset += len;
    }
  }
};

}  // namespace detail

// The same elements viewed with another shape of equal element count (copied into a new node).
template <Operand X>
auto reshape(const X& x_in, const Shape& shape) {
  const auto x = eval(x_in);
  using T = typename decltype(x)::value_type;
  Tape<T>& tape = x.tape();
  tape.check(x, "reshape");
  ATTN_CHECK(shape.numel() == x.numel(), shape_error, "reshape: cannot view ", x.shape(), " (",
             x.numel(), " elements) as ", shape, " (", shape.numel(), " elements)");
  auto [y, node] = tape.push(shape, "reshape", x.requires_grad());
  if (x.numel() > 0)
    std::memcpy(node.value->data(), x.value().data(),
                static_cast<std::size_t>(x.numel()) * sizeof(T));
  tape.set_backward(node, detail::ReshapeOp{x.index()});
  return y;
}

// Elements [begin, end) along `axis` (negative axes count from the end; default the last).
template <Operand X>
auto slice(const X& x_in, index_t begin, index_t end, int axis = -1) {
  const auto x = eval(x_in);
  using T = typename decltype(x)::value_type;
  Tape<T>& tape = x.tape();
  tape.check(x, "slice");
  const Shape& s = x.shape();
  const int ax = s.normalize_axis(axis, "slice");
  ATTN_CHECK(0 <= begin && begin <= end && end <= s[ax], value_error, "slice: range [", begin, ", ",
             end, ") is not inside axis ", ax, " of shape ", s);
  std::array<index_t, 4> dims{};
  for (int i = 0; i < s.rank(); ++i) dims[static_cast<std::size_t>(i)] = s[i];
  dims[static_cast<std::size_t>(ax)] = end - begin;
  const Shape out(std::span<const index_t>(dims.data(), static_cast<std::size_t>(s.rank())));
  auto [y, node] = tape.push(out, "slice", x.requires_grad());
  const detail::AxisSplit in = detail::split_at(s, ax);
  const index_t run = (end - begin) * in.inner;
  T* o = node.value->data();
  const T* src = x.value().data();
  parallel_for(in.outer, double(run), [&](index_t i) {
    std::copy_n(src + i * in.len * in.inner + begin * in.inner, run, o + i * run);
  });
  tape.set_backward(node, detail::SliceOp{x.index(), ax, begin});
  return y;
}

// Joins Vars along `axis` (default the last); all other axes must agree.
template <class T>
Var<T> concat(std::span<const Var<T>> xs, int axis = -1) {
  ATTN_CHECK(!xs.empty(), value_error, "concat: needs at least one tensor");
  Tape<T>& tape = xs[0].tape();
  const Shape& s0 = xs[0].shape();
  const int ax = s0.normalize_axis(axis, "concat");
  index_t total = 0;
  bool requires_grad = false;
  for (const Var<T>& x : xs) {
    tape.check(x, "concat");
    const Shape& s = x.shape();
    bool same = s.rank() == s0.rank();
    for (int i = 0; same && i < s.rank(); ++i) same = (i == ax) || s[i] == s0[i];
    ATTN_CHECK(same, shape_error, "concat: shapes ", s0, " and ", s, " differ outside axis ", ax);
    total += s[ax];
    requires_grad = requires_grad || x.requires_grad();
  }
  std::array<index_t, 4> dims{};
  for (int i = 0; i < s0.rank(); ++i) dims[static_cast<std::size_t>(i)] = s0[i];
  dims[static_cast<std::size_t>(ax)] = total;
  const Shape out(std::span<const index_t>(dims.data(), static_cast<std::size_t>(s0.rank())));
  auto [y, node] = tape.push(out, "concat", requires_grad);
  const detail::AxisSplit os = detail::split_at(out, ax);
  index_t offset = 0;
  node.saved_index.clear();
  for (const Var<T>& x : xs) {
    const index_t run = x.shape()[ax] * os.inner;
    const T* src = x.value().data();
    T* dst = node.value->data() + offset * os.inner;
    parallel_for(os.outer, double(run),
                 [&](index_t o) { std::copy_n(src + o * run, run, dst + o * os.len * os.inner); });
    offset += x.shape()[ax];
    node.saved_index.push_back(x.index());
  }
  tape.set_backward(node, detail::ConcatOp{ax});
  return y;
}

template <class T>
Var<T> concat(std::initializer_list<Var<T>> xs, int axis = -1) {
  return concat(std::span<const Var<T>>(xs.begin(), xs.size()), axis);
}

}  // namespace attn
