// Finite-difference gradient checks, in double, for every differentiable operation of the
// autodiff layer, on random shapes. Each op's output y is reduced to a scalar as Σ y ⊙ R with a
// fixed random R, so every output element's gradient path is exercised with its own weight.
#include <doctest/doctest.h>

#include <attn/attn.hpp>
#include <functional>
#include <vector>

using attn::Shape;
using attn::Tensor;
using Vars = std::vector<attn::Var<double>>;

namespace {

attn::Rng& rng() {
  static attn::Rng r(20261122);
  return r;
}

Tensor<double> randn(const Shape& s) {
  return Tensor<double>::randn(s, rng());
}
Tensor<double> uniform(const Shape& s, double lo, double hi) {
  return Tensor<double>::uniform(s, rng(), lo, hi);
}
attn::index_t dim(int lo = 1, int hi = 6) {
  return lo +
         static_cast<attn::index_t>(rng().uniform_int(static_cast<std::uint64_t>(hi - lo + 1)));
}

// Σ y ⊙ R for a fixed random R of y's shape, drawn once per check.
struct Projector {
  std::vector<Tensor<double>> weights;
  std::size_t next = 0;
  attn::Var<double> operator()(const attn::Var<double>& y) {
    if (next == weights.size()) weights.push_back(randn(y.shape()));
    const Tensor<double>& w = weights[next++];
    return attn::sum(y * y.tape().leaf(w));
  }
};

void check(const std::function<attn::Var<double>(const Vars&)>& op,
           const std::vector<Tensor<double>>& inputs, double tol = 1e-6) {
  Projector project;
  auto f = [&](const Vars& v) {
    project.next = 0;
    return project(op(v));
  };
  const attn::GradientCheck r = attn::check_gradient(f, inputs, 1e-6, tol);
  CHECK_MESSAGE(r.ok, r.report());
}

}  // namespace

TEST_CASE("gradients: elementwise binary operations") {
  for (int trial = 0; trial < 3; ++trial) {
    const Shape s{dim(), dim()};
    check([](const Vars& v) { return attn::eval(v[0] + v[1]); }, {randn(s), randn(s)});
    check([](const Vars& v) { return attn::eval(v[0] - v[1]); }, {randn(s), randn(s)});
    check([](const Vars& v) { return attn::eval(v[0] * v[1]); }, {randn(s), randn(s)});
    check([](const Vars& v) { return attn::eval(v[0] / v[1]); }, {randn(s), uniform(s, 0.5, 2.0)});
    check([](const Vars& v) { return attn::eval(attn::pow(v[0], v[1])); },
          {uniform(s, 0.5, 2.0), randn(s)});
    check([](const Vars& v) { return attn::eval(2.5 * v[0] - v[1] / 3.0 + 1.0); },
          {randn(s), randn(s)});
    check([](const Vars& v) { return attn::eval(1.0 / v[0] - 2.0); }, {uniform(s, 0.5, 2.0)});
  }
}

TEST_CASE("gradients: elementwise unary operations") {
  const Shape s{dim(), dim(), dim()};
  check([](const Vars& v) { return attn::eval(-v[0]); }, {randn(s)});
  check([](const Vars& v) { return attn::eval(attn::exp(v[0])); }, {randn(s)});
  check([](const Vars& v) { return attn::eval(attn::log(v[0])); }, {uniform(s, 0.2, 3.0)});
  check([](const Vars& v) { return attn::eval(attn::tanh(v[0])); }, {randn(s)});
  check([](const Vars& v) { return attn::eval(attn::sigmoid(v[0])); }, {uniform(s, -8, 8)});
  check([](const Vars& v) { return attn::eval(attn::gelu(v[0])); }, {uniform(s, -4, 4)});
  check([](const Vars& v) { return attn::eval(attn::gelu_tanh(v[0])); }, {uniform(s, -4, 4)});
  check([](const Vars& v) { return attn::eval(attn::elu(v[0], 0.7)); }, {uniform(s, -3, 3)});
  check([](const Vars& v) { return attn::eval(attn::pow(v[0], 3.0)); }, {randn(s)});
  check([](const Vars& v) { return attn::eval(attn::pow(v[0], -1.5)); }, {uniform(s, 0.5, 2.0)});
  check([](const Vars& v) { return attn::eval(attn::sqrt(v[0])); }, {uniform(s, 0.3, 3.0)});
  // relu and abs are not differentiable at 0: keep inputs away from it.
  Tensor<double> away = uniform(s, 0.1, 2.0);
  for (attn::index_t i = 0; i < away.numel(); i += 2) away[i] = -away[i];
  check([](const Vars& v) { return attn::eval(attn::relu(v[0])); }, {away});
  check([](const Vars& v) { return attn::eval(attn::abs(v[0])); }, {away});
}

TEST_CASE("gradients: broadcasting a bias row, a [1, D] row and a one-element tensor") {
  for (int trial = 0; trial < 3; ++trial) {
    const attn::index_t n = dim(), d = dim(1, 80);  // d > 64 crosses a column block
    check([](const Vars& v) { return attn::eval(v[0] + v[1]); }, {randn({n, d}), randn({d})});
    check([](const Vars& v) { return attn::eval(v[1] * v[0]); }, {randn({n, d}), randn({1, d})});
    check([](const Vars& v) { return attn::eval(v[0] * v[1] - v[1]); },
          {randn({dim(), n, d}), randn({d})});
    check([](const Vars& v) { return attn::eval(v[0] * v[1] + v[2]); },
          {randn({n, d}), randn({1}), randn({d})});
    check([](const Vars& v) { return attn::eval(v[1] / v[0]); },
          {uniform({n, d}, 0.5, 2), randn({})});
  }
}

TEST_CASE("gradients: fused chains, including a variable used twice") {
  const Shape s{dim(), dim(1, 70)};
  const Shape row{s[1]};
  // The GELU tanh approximation written out by hand: 10 elementwise operations, one node.
  check(
      [](const Vars& v) {
        const auto& x = v[0];
        return attn::eval(0.5 * x * (1.0 + attn::tanh(0.7978845608 * (x + 0.044715 * x * x * x))));
      },
      {randn(s)});
  check([](const Vars& v) { return attn::eval(attn::gelu(v[0] * v[1] + v[2])); },
        {randn(s), randn(s), randn(row)});
  check(
      [](const Vars& v) {
        return attn::eval(attn::sigmoid(v[0]) * attn::tanh(v[0] - v[1]) / (1.0 + v[0] * v[0]));
      },
      {randn(s), randn(row)});
}

TEST_CASE("gradients: matmul in 2-D, with every transpose") {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const attn::index_t m = dim(), n = dim(), k = dim();
      const Shape sa = ta ? Shape{k, m} : Shape{m, k};
      const Shape sb = tb ? Shape{n, k} : Shape{k, n};
      check([=](const Vars& v) { return attn::matmul(v[0], v[1], ta, tb); },
            {randn(sa), randn(sb)});
    }
}

TEST_CASE("gradients: batched matmul, rank 3 and 4, and a matrix shared by the batch") {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const attn::index_t b = dim(2, 3), h = dim(1, 3), m = dim(), n = dim(), k = dim();
      const Shape a2 = ta ? Shape{k, m} : Shape{m, k};
      const Shape b2 = tb ? Shape{n, k} : Shape{k, n};
      const Shape a3 = ta ? Shape{b, k, m} : Shape{b, m, k};
      const Shape b3 = tb ? Shape{b, n, k} : Shape{b, k, n};
      const Shape a4 = ta ? Shape{b, h, k, m} : Shape{b, h, m, k};
      const Shape b4 = tb ? Shape{b, h, n, k} : Shape{b, h, k, n};
      auto mm = [=](const Vars& v) { return attn::matmul(v[0], v[1], ta, tb); };
      check(mm, {randn(a3), randn(b3)});
      check(mm, {randn(a4), randn(b4)});
      check(mm, {randn(a3), randn(b2)});  // shared right operand (folded into one GEMM unless ta)
      check(mm, {randn(a2), randn(b3)});  // shared left operand
      check(mm, {randn(a4), randn(b2)});
    }
}

TEST_CASE("gradients: transpose, reshape, slice, concat") {
  const attn::index_t a = dim(), b = dim(), c = dim(), d = dim();
  check([](const Vars& v) { return attn::transpose(v[0]); }, {randn({a, b})});
  check([](const Vars& v) { return attn::transpose(v[0], 0, 2); }, {randn({a, b, c})});
  check([](const Vars& v) { return attn::transpose(v[0], 1, 2); }, {randn({a, b, c, d})});
  check([=](const Vars& v) { return attn::reshape(v[0], {b * a, c}); }, {randn({a, b, c})});
  check([=](const Vars& v) { return attn::slice(v[0], 1, c); }, {randn({a, b, c + 1})});
  check([=](const Vars& v) { return attn::slice(v[0], 0, 1, 0); }, {randn({a + 1, b})});
  check([=](const Vars& v) { return attn::slice(v[0], 1, b + 1, 1); }, {randn({a, b + 2, c})});
  check(
      [](const Vars& v) {
        return attn::concat({v[0], v[1], v[2]});
      },
      {randn({a, b}), randn({a, c}), randn({a, 1})});
  check(
      [](const Vars& v) {
        return attn::concat({v[0], v[1]}, 0);
      },
      {randn({a, b, c}), randn({d, b, c})});
  check(
      [](const Vars& v) {
        return attn::concat({v[0], v[1]}, 1);
      },
      {randn({a, b, c}), randn({a, d, c})});
}

TEST_CASE("gradients: linear (x Wᵀ + b in one node), with and without bias, rank 2 to 4") {
  for (int trial = 0; trial < 2; ++trial) {
    const attn::index_t in = dim(), out = dim();
    for (const Shape& xs :
         {Shape{dim(), in}, Shape{dim(1, 3), dim(), in}, Shape{dim(1, 2), dim(1, 3), dim(), in}}) {
      check([](const Vars& v) { return attn::linear(v[0], v[1], v[2]); },
            {randn(xs), randn({out, in}), randn({out})});
      check([](const Vars& v) { return attn::linear(v[0], v[1]); }, {randn(xs), randn({out, in})});
      // The input used twice: its gradient gets the product's and the elementwise path's.
      check([](const Vars& v) { return attn::eval(attn::linear(v[0], v[1], v[2]) * 2.0 + v[3]); },
            {randn(xs), randn({out, in}), randn({out}), randn({out})});
    }
  }
}

TEST_CASE("gradients: transpose_reshape (split and merge attention heads)") {
  const attn::index_t b = dim(1, 3), t = dim(), h = dim(1, 3), d = dim();
  check(
      [=](const Vars& v) {
        return attn::transpose_reshape(v[0], {b, t, h, d}, 1, 2, {b, h, t, d});
      },
      {randn({b, t, h * d})});
  check(
      [=](const Vars& v) {
        return attn::transpose_reshape(v[0], {b, h, t, d}, 1, 2, {b, t, h * d});
      },
      {randn({b, h, t, d})});
  // A gradient that also arrives by another path first (accumulation into a written buffer).
  check(
      [=](const Vars& v) {
        const auto split = attn::transpose_reshape(v[0], {b, t, h, d}, 1, 2, {b, h, t, d});
        return attn::eval(split +
                          attn::transpose_reshape(v[0] * 3.0, {b, t, h, d}, 1, 2, {b, h, t, d}));
      },
      {randn({b, t, h * d})});
}

TEST_CASE("gradients: sum and mean, over everything and along an axis") {
  const Shape s{dim(), dim(), dim()};
  check([](const Vars& v) { return attn::sum(v[0]); }, {randn(s)});
  check([](const Vars& v) { return attn::mean(v[0] * v[0]); }, {randn(s)});
  for (int axis : {0, 1, 2, -1})
    for (bool keep : {false, true}) {
      check([=](const Vars& v) { return attn::sum(v[0], axis, keep); }, {randn(s)});
      check([=](const Vars& v) { return attn::mean(v[0], axis, keep); }, {randn(s)});
    }
}

TEST_CASE("gradients: softmax and log_softmax along the last axis") {
  const Shape s{dim(), dim(), dim(2, 9)};
  check([](const Vars& v) { return attn::softmax(v[0]); }, {randn(s)});
  check([](const Vars& v) { return attn::log_softmax(v[0]); }, {randn(s)});
  check([](const Vars& v) { return attn::softmax(3.0 * v[0]); }, {randn(s)});
}

TEST_CASE("gradients: layer_norm with respect to x, gamma and beta") {
  const attn::index_t d = dim(2, 80);
  check([](const Vars& v) { return attn::layer_norm(v[0], v[1], v[2]); },
        {randn({dim(), dim(), d}), randn({d}), randn({d})}, 1e-5);
  check([](const Vars& v) { return attn::layer_norm(v[0], v[1], v[2], 0.1); },
        {randn({dim(), d}), randn({d}), randn({d})}, 1e-5);
}

TEST_CASE("gradients: rms_norm with respect to x and gamma") {
  const attn::index_t d = dim(2, 80);
  check([](const Vars& v) { return attn::rms_norm(v[0], v[1]); },
        {randn({dim(), dim(), d}), randn({d})}, 1e-5);
  check([](const Vars& v) { return attn::rms_norm(v[0], v[1], 0.5); },
        {randn({dim(), d}), randn({d})}, 1e-5);
  // Through an expression on both sides (each operand evaluated once).
  check([](const Vars& v) { return attn::rms_norm(2.0 * v[0], v[1] + 1.0) * v[0]; },
        {randn({3, d}), randn({d})}, 1e-5);
}

TEST_CASE("gradients: embedding with repeated ids") {
  const attn::index_t vocab = dim(3, 7), d = dim(1, 70);
  Tensor<std::int32_t> ids({2, 5});
  for (attn::index_t i = 0; i < ids.numel(); ++i)
    ids[i] = static_cast<std::int32_t>(rng().uniform_int(3));
  check([&](const Vars& v) { return attn::embedding(v[0], ids); }, {randn({vocab, d})});
}

TEST_CASE("gradients: cross_entropy, with an ignored target") {
  const attn::index_t classes = dim(2, 9);
  Tensor<std::int32_t> targets({2, 3});
  for (attn::index_t i = 0; i < targets.numel(); ++i)
    targets[i] = static_cast<std::int32_t>(rng().uniform_int(static_cast<std::uint64_t>(classes)));
  targets[4] = -100;
  auto f = [&](const Vars& v) { return attn::cross_entropy(v[0], targets); };
  const attn::GradientCheck r = attn::check_gradient(f, {randn({2, 3, classes})});
  CHECK_MESSAGE(r.ok, r.report());
}

TEST_CASE("gradients: dropout with a fixed seed") {
  const Shape s{dim(2, 6), dim(2, 40)};
  check(
      [](const Vars& v) {
        attn::Rng r(7);
        return attn::dropout(v[0], 0.3, r);
      },
      {randn(s)});
}

TEST_CASE("check_gradient reports a wrong gradient") {
  // A deliberately wrong backward: y = x² recorded with derivative 3x instead of 2x.
  struct WrongSquare {
    std::int32_t x;
    void backward(attn::Tape<double>& tape, attn::Node<double>& self) const {
      tape.grad(x).array() += 3.0 * tape.value(x).array() * self.grad->array();
    }
  };
  auto f = [](const Vars& v) {
    auto& tape = v[0].tape();
    auto [y, node] = tape.push(v[0].shape(), "wrong_square", true);
    node.value->array() = v[0].value().array().square();
    tape.set_backward(node, WrongSquare{v[0].index()});
    return attn::sum(y);
  };
  const attn::GradientCheck r = attn::check_gradient(f, {Tensor<double>({3}, {0.1, 0.2, 0.3})});
  CHECK_FALSE(r.ok);
  CHECK(r.element == 2);  // error x / max(1, 3x, 2x) is largest at x = 0.3
  CHECK(r.report().find("FAILED") != std::string::npos);
}
