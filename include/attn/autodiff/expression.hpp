// attn/autodiff/expression.hpp: lazy elementwise expressions. `gelu(x * w + b)` builds a tree of
// small structs; assigning it to a Var evaluates the whole tree in ONE loop into ONE tape node,
// and that node's backward walks the same tree per element, so no sub-expression is ever stored.
// Does not fuse reductions or matrix products; those are primitive ops (ops.hpp).
//
// Broadcasting: an operand may have the full shape, one element (a scalar), or the shape of the
// last axis with leading ones ([D] or [1, D] over [N, D]: a bias row).
//
// Backward of a tree with output y = f(a, b) and incoming gradient g: the children receive
// g * df/da and g * df/db. Each element recomputes its tree's values in registers (cheap next
// to the memory traffic) instead of saving them.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <numbers>
#include <type_traits>

#include "../core/fast_math.hpp"
#include "../core/parallel.hpp"
#include "tape.hpp"

namespace attn {

template <class X>
concept Expression = requires {
  typename std::remove_cvref_t<X>::is_attn_expression;
};

template <class X>
struct is_var : std::false_type {};
template <class T>
struct is_var<Var<T>> : std::true_type {};

template <class X>
concept VarType = is_var<std::remove_cvref_t<X>>::value;

// What a differentiable operation accepts: a Var or an elementwise expression.
template <class X>
concept Operand = VarType<X> || Expression<X>;

// Every expression node derives from this empty tag, so that argument-dependent lookup finds
// attn's operators and functions for expressions written outside namespace attn.
struct ExpressionTag {};

namespace expr {

// How a leaf's elements line up with the output's [rows, D] iteration: element (r, c) of the
// output reads leaf element r * row_stride + c * col_stride.
struct Layout {
  index_t row_stride = 0;
  index_t col_stride = 0;
};

// Result shape of an elementwise operation on shapes a and b (see the broadcasting rule above).
inline Shape broadcast_shape(const Shape& a, const Shape& b, const char* op) {
  if (a == b) return a;
  if (b.numel() == 1) return a;
  if (a.numel() == 1) return b;
  auto is_row_of = [](const Shape& row, const Shape& full) {
    return row.numel() == full.last() && row.last() == full.last() && row.rank() <= full.rank();
  };
  if (is_row_of(b, a)) return a;
  if (is_row_of(a, b)) return b;
  throw shape_error(detail::message(op, ": shapes ", a, " and ", b, " do not broadcast"));
}

// How a leaf of shape `leaf` is read when the output has shape `out`.
inline Layout layout_for(const Shape& leaf, const Shape& out) {
  if (leaf.numel() == out.numel()) return {out.last(), 1};
  if (leaf.numel() == 1) return {0, 0};
  return {0, 1};  // a row broadcast over the leading axes
}

// How eval and backprop find element (r, c) of a leaf. strided: through its layout (any
// broadcast). flat: every leaf has the output's shape, c is the flat index. flat_write and
// flat_add: flat, and every leaf receives a gradient that it writes (its node's first
// contribution) or adds to. The flat walks need no per-leaf arithmetic, so the loops calling them
// vectorise; flat_write and flat_add need no test either. (A select between `d + grad` and
// `grad` leaves the addition conditional, and GCC, keeping floating-point traps by default, does
// not vectorise a conditional addition without AVX-512's masks.)
enum class Walk { strided, flat, flat_write, flat_add };

// A Var inside an expression.
template <class T>
struct Leaf : ExpressionTag {
  using is_attn_expression = void;
  using value_type = T;
  struct Cache {};

  Tape<T>* tape_ptr;
  std::int32_t node;
  std::uint32_t generation;
  // Bound just before a loop runs (bind()):
  const T* v = nullptr;
  T* g = nullptr;
  // 0: g is this pass's first contribution (write, do not add); 1: add. A float, not a bool:
  // GCC vectorises the select on it and not one on a byte.
  T keep = T{1};
  Layout layout{};

  explicit Leaf(const Var<T>& x)
      : tape_ptr(&x.tape()), node(x.index()), generation(x.generation()) {
    x.tape().check(x, "elementwise");
  }

  Tape<T>& tape() const { return *tape_ptr; }
  Shape shape() const { return tape_ptr->value(node).shape(); }
  bool requires_grad() const { return tape_ptr->requires_grad(node); }

  // A full-size leaf touches each of its gradient's elements once per backward loop, so when
  // its gradient has no contribution yet it writes instead of adding (a second leaf of the same
  // node, bound later, adds: the loop visits the leaves of an element in binding order). A
  // broadcast leaf sums into its elements and needs them zeroed first.
  void bind(const Shape& out, bool with_grad) {
    v = tape_ptr->value(node).data();
    layout = layout_for(shape(), out);
    g = nullptr;
    keep = T{1};
    if (!with_grad || !requires_grad()) return;
    if (layout.row_stride == 0) {
      g = tape_ptr->grad(node).data();
    } else {
      const auto w = tape_ptr->grad_write(node);
      g = w.data;
      keep = w.accumulate ? T{1} : T{0};
    }
  }
  template <class F>
  void for_each_leaf(F&& f) const {
    f(*this);
  }

  template <Walk W = Walk::strided>
  T eval(index_t r, index_t c, Cache&) const {
    return v[index<W>(r, c)];
  }
  template <Walk W = Walk::strided>
  void backprop(index_t r, index_t c, T grad, const Cache&) const {
    if constexpr (W == Walk::flat_write) {
      g[c] = grad;
    } else if constexpr (W == Walk::flat_add) {
      g[c] += grad;
    } else if (g) {
      T& d = g[index<W>(r, c)];
      d = keep != T{0} ? d + grad : grad;
    }
  }
  template <Walk W>
  index_t index(index_t r, index_t c) const {
    if constexpr (W == Walk::strided)
      return r * layout.row_stride + c * layout.col_stride;
    else
      return c;
  }
};

// A number inside an expression (2 in `2 * x`).
template <class T>
struct Constant : ExpressionTag {
  using is_attn_expression = void;
  using value_type = T;
  struct Cache {};
  T value;

  void bind(const Shape&, bool) {}
  template <class F>
  void for_each_leaf(F&&) const {}
  template <Walk W = Walk::strided>
  T eval(index_t, index_t, Cache&) const {
    return value;
  }
  template <Walk W = Walk::strided>
  void backprop(index_t, index_t, T, const Cache&) const {}
};

template <class E>
concept HasLeaf = !std::is_same_v<E, Constant<typename E::value_type>>;

// y = F(x). F provides value(x) and derivative(x, y) = dy/dx.
template <class F, class E>
struct Unary : ExpressionTag {
  using is_attn_expression = void;
  using value_type = typename E::value_type;
  using T = value_type;
  struct Cache {
    typename E::Cache child;
    T x, y;
  };
  F f;
  E e;

  Unary(F fn, E child) : f(fn), e(child) {}

  Tape<T>& tape() const { return e.tape(); }
  Shape shape() const { return e.shape(); }
  void bind(const Shape& out, bool with_grad) { e.bind(out, with_grad); }
  template <class Fn>
  void for_each_leaf(Fn&& fn) const {
    e.for_each_leaf(fn);
  }

  template <Walk W = Walk::strided>
  T eval(index_t r, index_t c, Cache& k) const {
    k.x = e.template eval<W>(r, c, k.child);
    k.y = f.value(k.x);
    return k.y;
  }
  // A function may provide chain(grad, x, y) = grad · dy/dx itself where the product would hide
  // a select (relu, abs): `grad * 0` cannot be dropped under IEEE rules, and keeps the loop scalar.
  template <Walk W = Walk::strided>
  void backprop(index_t r, index_t c, T grad, const Cache& k) const {
    if constexpr (requires { f.chain(grad, k.x, k.y); })
      e.template backprop<W>(r, c, f.chain(grad, k.x, k.y), k.child);
    else
      e.template backprop<W>(r, c, grad * f.derivative(k.x, k.y), k.child);
  }
};

// y = F(a, b). F provides value(a, b), da(a, b, y) = dy/da and db(a, b, y) = dy/db.
template <class F, class L, class R>
struct Binary : ExpressionTag {
  using is_attn_expression = void;
  using value_type = typename std::conditional_t<HasLeaf<L>, L, R>::value_type;
  using T = value_type;
  struct Cache {
    typename L::Cache lc;
    typename R::Cache rc;
    T a, b, y;
  };
  F f;
  L l;
  R r_;

  Binary(F fn, L lhs, R rhs) : f(fn), l(lhs), r_(rhs) {
    if constexpr (HasLeaf<L> && HasLeaf<R>) {
      ATTN_CHECK(&l.tape() == &r_.tape(), value_error, F::name,
                 ": operands come from different tapes");
      (void)broadcast_shape(l.shape(), r_.shape(), F::name);  // throws now, naming the operation
    }
  }

  Tape<T>& tape() const {
    if constexpr (HasLeaf<L>)
      return l.tape();
    else
      return r_.tape();
  }
  Shape shape() const {
    if constexpr (!HasLeaf<L>)
      return r_.shape();
    else if constexpr (!HasLeaf<R>)
      return l.shape();
    else
      return broadcast_shape(l.shape(), r_.shape(), F::name);
  }
  void bind(const Shape& out, bool with_grad) {
    l.bind(out, with_grad);
    r_.bind(out, with_grad);
  }
  template <class Fn>
  void for_each_leaf(Fn&& fn) const {
    l.for_each_leaf(fn);
    r_.for_each_leaf(fn);
  }

  template <Walk W = Walk::strided>
  T eval(index_t r, index_t c, Cache& k) const {
    k.a = l.template eval<W>(r, c, k.lc);
    k.b = r_.template eval<W>(r, c, k.rc);
    k.y = f.value(k.a, k.b);
    return k.y;
  }
  template <Walk W = Walk::strided>
  void backprop(index_t r, index_t c, T grad, const Cache& k) const {
    if constexpr (HasLeaf<L>) l.template backprop<W>(r, c, grad * f.da(k.a, k.b, k.y), k.lc);
    if constexpr (HasLeaf<R>) r_.template backprop<W>(r, c, grad * f.db(k.a, k.b, k.y), k.rc);
  }
};

// ---- the elementwise functions, each with its derivative ------------------------------------

struct Add {
  static constexpr const char* name = "add";
  template <class T>
  T value(T a, T b) const {
    return a + b;
  }
  template <class T>
  T da(T, T, T) const {
    return T{1};
  }
  template <class T>
  T db(T, T, T) const {
    return T{1};
  }
};
struct Sub {
  static constexpr const char* name = "sub";
  template <class T>
  T value(T a, T b) const {
    return a - b;
  }
  template <class T>
  T da(T, T, T) const {
    return T{1};
  }
  template <class T>
  T db(T, T, T) const {
    return T{-1};
  }
};
struct Mul {
  static constexpr const char* name = "mul";
  template <class T>
  T value(T a, T b) const {
    return a * b;
  }
  template <class T>
  T da(T, T b, T) const {
    return b;
  }
  template <class T>
  T db(T a, T, T) const {
    return a;
  }
};
struct Div {
  static constexpr const char* name = "div";
  template <class T>
  T value(T a, T b) const {
    return a / b;
  }
  template <class T>
  T da(T, T b, T) const {
    return T{1} / b;
  }
  template <class T>
  T db(T, T b, T y) const {
    return -y / b;
  }  // d(a/b)/db = -a/b² = -y/b
};
struct PowBinary {
  static constexpr const char* name = "pow";
  template <class T>
  T value(T a, T b) const {
    return std::pow(a, b);
  }
  template <class T>
  T da(T a, T b, T) const {
    return b * std::pow(a, b - T{1});
  }
  // d(a^b)/db = a^b log a; defined as 0 at a = 0 (the limit of b * a^b log a from the right).
  template <class T>
  T db(T a, T, T y) const {
    return a > T{0} ? y * std::log(a) : T{0};
  }
};

struct Neg {
  template <class T>
  T value(T x) const {
    return -x;
  }
  template <class T>
  T derivative(T, T) const {
    return T{-1};
  }
};
struct Exp {
  template <class T>
  T value(T x) const {
    return std::exp(x);
  }
  template <class T>
  T derivative(T, T y) const {
    return y;
  }
};
struct Log {
  template <class T>
  T value(T x) const {
    return std::log(x);
  }
  template <class T>
  T derivative(T x, T) const {
    return T{1} / x;
  }
};
struct Tanh {
  template <class T>
  T value(T x) const {
    return std::tanh(x);
  }
  template <class T>
  T derivative(T, T y) const {
    return T{1} - y * y;
  }
};
struct Sigmoid {
  // Two branches so that exp never overflows: for x < 0, 1/(1+e^-x) = e^x/(1+e^x).
  template <class T>
  T value(T x) const {
    if (x >= T{0}) return T{1} / (T{1} + std::exp(-x));
    const T e = std::exp(x);
    return e / (T{1} + e);
  }
  template <class T>
  T derivative(T, T y) const {
    return y * (T{1} - y);
  }
};
struct Relu {
  template <class T>
  T value(T x) const {
    return x > T{0} ? x : T{0};
  }
  template <class T>
  T derivative(T x, T) const {
    return x > T{0} ? T{1} : T{0};
  }
  template <class T>
  T chain(T grad, T x, T) const {
    return x > T{0} ? grad : T{0};
  }
};
// GELU(x) = x Φ(x) = ½ x (1 + erf(x/√2)) (Hendrycks & Gimpel; PyTorch's default GELU). In float,
// erf and exp are the vectorisable ones of core/fast_math.hpp (errors <= 5e-7 and 2e-7).
struct Gelu {
  template <class T>
  T value(T x) const {
    return T(0.5) * x * (T{1} + erf_fast(x * T(std::numbers::sqrt2 / 2)));
  }
  // d/dx x Φ(x) = Φ(x) + x φ(x), φ the standard normal density.
  template <class T>
  T derivative(T x, T) const {
    const T cdf = T(0.5) * (T{1} + erf_fast(x * T(std::numbers::sqrt2 / 2)));
    const T pdf =
        exp_fast(T(-0.5) * x * x) * T(0.5 * std::numbers::sqrt2 * std::numbers::inv_sqrtpi);
    return cdf + x * pdf;
  }
};
// The tanh approximation ½ x (1 + tanh(√(2/π)(x + 0.044715 x³))) used by GPT-2 and minGPT.
struct GeluTanh {
  static constexpr double c = 0.7978845608028654;  // √(2/π)
  template <class T>
  T value(T x) const {
    return T(0.5) * x * (T{1} + std::tanh(T(c) * (x + T(0.044715) * x * x * x)));
  }
  template <class T>
  T derivative(T x, T) const {
    const T t = std::tanh(T(c) * (x + T(0.044715) * x * x * x));
    return T(0.5) * (T{1} + t) +
           T(0.5) * x * (T{1} - t * t) * T(c) * (T{1} + T(3 * 0.044715) * x * x);
  }
};
// ELU(x) = x for x > 0, α (eᵡ − 1) otherwise; derivative 1 or y + α.
struct Elu {
  double alpha = 1.0;
  template <class T>
  T value(T x) const {
    return x > T{0} ? x : T(alpha) * std::expm1(x);
  }
  template <class T>
  T derivative(T x, T y) const {
    return x > T{0} ? T{1} : y + T(alpha);
  }
};
struct PowScalar {
  double p = 1.0;
  template <class T>
  T value(T x) const {
    return std::pow(x, T(p));
  }
  template <class T>
  T derivative(T x, T) const {
    return T(p) * std::pow(x, T(p - 1));
  }
};
struct Sqrt {
  template <class T>
  T value(T x) const {
    return std::sqrt(x);
  }
  template <class T>
  T derivative(T, T y) const {
    return T(0.5) / y;
  }
};
struct Abs {
  template <class T>
  T value(T x) const {
    return std::abs(x);
  }
  template <class T>
  T derivative(T x, T) const {
    return x > T{0} ? T{1} : (x < T{0} ? T{-1} : T{0});
  }
  template <class T>
  T chain(T grad, T x, T) const {
    return x > T{0} ? grad : (x < T{0} ? -grad : T{0});
  }
};

// ---- turning operands into expression nodes ---------------------------------------------------

template <class X>
auto as_expr(const X& x) {
  if constexpr (VarType<X>)
    return Leaf<typename X::value_type>(x);
  else
    return x;
}

template <class X>
using value_type_of = typename std::remove_cvref_t<X>::value_type;

template <class A, class B>
concept BinaryOperands = (Operand<A> && Operand<B>) || (Operand<A> && std::is_arithmetic_v<B>) ||
                         (std::is_arithmetic_v<A> && Operand<B>);

template <class F, class A, class B>
auto make_binary(F f, const A& a, const B& b) {
  if constexpr (std::is_arithmetic_v<A>) {
    using T = value_type_of<B>;
    return Binary<F, Constant<T>, decltype(as_expr(b))>(f, Constant<T>{{}, static_cast<T>(a)},
                                                        as_expr(b));
  } else if constexpr (std::is_arithmetic_v<B>) {
    using T = value_type_of<A>;
    return Binary<F, decltype(as_expr(a)), Constant<T>>(f, as_expr(a),
                                                        Constant<T>{{}, static_cast<T>(b)});
  } else {
    static_assert(
        std::is_same_v<value_type_of<A>, value_type_of<B>>,
        "attn: both operands of an elementwise operation must have the same element type");
    return Binary<F, decltype(as_expr(a)), decltype(as_expr(b))>(f, as_expr(a), as_expr(b));
  }
}

template <class F, class X>
auto make_unary(F f, const X& x) {
  return Unary<F, decltype(as_expr(x))>(f, as_expr(x));
}

// True when every leaf of the bound expression `e` has the output's shape (no broadcasting).
template <class E>
bool all_full(const E& e, const Shape& out) {
  bool full = true;
  e.for_each_leaf([&](const auto& leaf) {
    full = full && leaf.layout.row_stride == out.last() && leaf.layout.col_stride == 1;
  });
  return full;
}

// The tape node an expression is evaluated into; its backward re-walks the tree per element.
template <class E>
struct ElementwiseOp {
  using T = typename E::value_type;
  E e;

  void backward(Tape<T>& tape, Node<T>& self) const {
    E b = e;
    const Shape& out = self.value->shape();
    b.bind(out, true);
    const T* g = self.grad->data();
    const index_t D = std::max<index_t>(out.last(), 1), R = out.numel() / D;
    bool row_grad = false, scalar_grad = false;
    b.for_each_leaf([&](const auto& leaf) {
      if (leaf.g && leaf.layout.row_stride == 0)
        (leaf.layout.col_stride ? row_grad : scalar_grad) = true;
    });
    auto element = [&](index_t r, index_t c) {
      typename E::Cache k;
      b.eval(r, c, k);
      b.backprop(r, c, g[r * D + c], k);
    };
    (void)tape;
    bool all_write = true, all_add = true;  // every leaf receives a gradient, and writes / adds
    b.for_each_leaf([&](const auto& leaf) {
      all_write = all_write && leaf.g != nullptr && leaf.keep == T{0};
      all_add = all_add && leaf.g != nullptr && leaf.keep != T{0};
    });
    // Every operand has the output's shape: one flat loop per row, which vectorises.
    auto flat = [&](auto walk) {
      constexpr Walk W = decltype(walk)::value;
      parallel_for(R, static_cast<double>(D) * 8.0, [&](index_t r) {
        // Local copies: the compiler then knows the gradient stores leave the pointers alone.
        const E local = b;
        const T* const gy = g;
        for (index_t i = r * D; i < (r + 1) * D; ++i) {
          typename E::Cache k;
          local.template eval<W>(0, i, k);
          local.template backprop<W>(0, i, gy[i], k);
        }
      });
    };
    const bool full = all_full(b, out);
    if (full && all_write) {
      flat(std::integral_constant<Walk, Walk::flat_write>{});
    } else if (full && all_add) {
      flat(std::integral_constant<Walk, Walk::flat_add>{});
    } else if (full) {
      flat(std::integral_constant<Walk, Walk::flat>{});
    } else if (scalar_grad) {
      // A one-element operand's gradient sums every element: done in order, on one thread.
      for (index_t r = 0; r < R; ++r)
        for (index_t c = 0; c < D; ++c) element(r, c);
    } else if (row_grad) {
      // A bias row's gradient sums over rows: split the columns instead, so each column's sum
      // runs on one thread in row order, whatever the thread count.
      constexpr index_t cb = 64;
      parallel_for(block_count(D, cb), static_cast<double>(R * std::min(cb, D)) * 8.0,
                   [&](index_t blk) {
                     const index_t c0 = blk * cb, c1 = std::min(D, c0 + cb);
                     for (index_t r = 0; r < R; ++r)
                       for (index_t c = c0; c < c1; ++c) element(r, c);
                   });
    } else {
      parallel_for(R, static_cast<double>(D) * 8.0, [&](index_t r) {
        for (index_t c = 0; c < D; ++c) element(r, c);
      });
    }
  }
};

}  // namespace expr

// Evaluates an elementwise expression into a new tape node (one loop, one node).
template <Expression E>
Var<typename E::value_type> eval(const E& e) {
  using T = typename E::value_type;
  Tape<T>& tape = e.tape();
  bool requires_grad = false;
  e.for_each_leaf([&](const auto& leaf) {
    tape.check(Var<T>(leaf.tape_ptr, leaf.node, leaf.generation), "elementwise");
    requires_grad = requires_grad || leaf.requires_grad();
  });
  const Shape out = e.shape();
  auto [var, node] = tape.push(out, "elementwise", requires_grad);
  E b = e;
  b.bind(out, false);
  T* o = node.value->data();
  const index_t D = std::max<index_t>(out.last(), 1), R = out.numel() / D;
  if (expr::all_full(b, out)) {
    parallel_for(R, static_cast<double>(D) * 4.0, [&](index_t r) {
      typename E::Cache k;
      for (index_t i = r * D; i < (r + 1) * D; ++i)
        o[i] = b.template eval<expr::Walk::flat>(0, i, k);
    });
  } else {
    parallel_for(R, static_cast<double>(D) * 4.0, [&](index_t r) {
      typename E::Cache k;
      for (index_t c = 0; c < D; ++c) o[r * D + c] = b.eval(r, c, k);
    });
  }
  tape.set_backward(node, expr::ElementwiseOp<E>{e});
  return var;
}

// A Var is its own evaluation.
template <class T>
Var<T> eval(const Var<T>& v) {
  return v;
}

template <class T>
template <class E>
requires requires {
  typename E::is_attn_expression;
}
Var<T>::Var(const E& e) : Var(attn::eval(e)) {}

// ---- operators and functions --------------------------------------------------------------------

template <class A, class B>
requires expr::BinaryOperands<A, B>
auto operator+(const A& a, const B& b) {
  return expr::make_binary(expr::Add{}, a, b);
}
template <class A, class B>
requires expr::BinaryOperands<A, B>
auto operator-(const A& a, const B& b) {
  return expr::make_binary(expr::Sub{}, a, b);
}
template <class A, class B>
requires expr::BinaryOperands<A, B>
auto operator*(const A& a, const B& b) {
  return expr::make_binary(expr::Mul{}, a, b);
}
template <class A, class B>
requires expr::BinaryOperands<A, B>
auto operator/(const A& a, const B& b) {
  return expr::make_binary(expr::Div{}, a, b);
}
// a^b elementwise, both operands differentiable (or one a number).
template <class A, class B>
requires expr::BinaryOperands<A, B> &&(!std::is_arithmetic_v<B>)auto pow(const A& a, const B& b) {
  return expr::make_binary(expr::PowBinary{}, a, b);
}

template <Operand X>
auto operator-(const X& x) {
  return expr::make_unary(expr::Neg{}, x);
}
template <Operand X>
auto exp(const X& x) {
  return expr::make_unary(expr::Exp{}, x);
}
template <Operand X>
auto log(const X& x) {
  return expr::make_unary(expr::Log{}, x);
}
template <Operand X>
auto tanh(const X& x) {
  return expr::make_unary(expr::Tanh{}, x);
}
template <Operand X>
auto sigmoid(const X& x) {
  return expr::make_unary(expr::Sigmoid{}, x);
}
template <Operand X>
auto relu(const X& x) {
  return expr::make_unary(expr::Relu{}, x);
}
template <Operand X>
auto gelu(const X& x) {
  return expr::make_unary(expr::Gelu{}, x);
}
template <Operand X>
auto gelu_tanh(const X& x) {
  return expr::make_unary(expr::GeluTanh{}, x);
}
template <Operand X>
auto elu(const X& x, double alpha = 1.0) {
  return expr::make_unary(expr::Elu{alpha}, x);
}
template <Operand X>
auto pow(const X& x, double p) {
  return expr::make_unary(expr::PowScalar{p}, x);
}
template <Operand X>
auto sqrt(const X& x) {
  return expr::make_unary(expr::Sqrt{}, x);
}
template <Operand X>
auto abs(const X& x) {
  return expr::make_unary(expr::Abs{}, x);
}

}  // namespace attn
