// Elementwise expressions: one tape node per chain, values equal to the formula, broadcasting
// rules and their errors, and the backward's gradients in each of its cases.
#include <doctest/doctest.h>

#include <attn/attn.hpp>
#include <cmath>
#include <string>

#include "../test_util.hpp"

using attn::test::message_of;

using attn::Shape;
using attn::Tensor;

TEST_CASE("an elementwise chain of four or more operations records exactly one tape node") {
  attn::Rng rng(1);
  attn::Tape<float> tape;
  auto x = tape.leaf(Tensor<float>::randn({8, 16}, rng), true);
  auto w = tape.leaf(Tensor<float>::randn({8, 16}, rng), true);
  auto b = tape.leaf(Tensor<float>::randn({16}, rng), true);
  const std::size_t before = tape.size();
  attn::Var<float> y =
      0.5f * x * (1.0f + attn::tanh(0.79788456f * (x * w + b + 0.044715f * x * x * x)));
  CHECK(tape.size() == before + 1);
  const std::size_t before2 = tape.size();
  attn::Var<float> z = attn::gelu(x * w + b);
  CHECK(tape.size() == before2 + 1);
  // The value is the formula, element by element.
  for (attn::index_t r = 0; r < 8; ++r)
    for (attn::index_t c = 0; c < 16; ++c) {
      const float xv = x.value()(r, c), wv = w.value()(r, c), bv = b.value()(c);
      const float u = xv * wv + bv;
      const float expected =
          0.5f * xv * (1.0f + std::tanh(0.79788456f * (u + 0.044715f * xv * xv * xv)));
      CHECK(y.value()(r, c) == doctest::Approx(expected).epsilon(1e-5));
      CHECK(z.value()(r, c) ==
            doctest::Approx(0.5f * u * (1.0f + std::erf(u / std::sqrt(2.0f)))).epsilon(1e-5));
    }
  // Backward through the one node reaches every leaf.
  tape.backward(attn::sum(y));
  CHECK(attn::max_abs_diff(x.grad(), Tensor<float>({8, 16})) > 0);
  CHECK(attn::max_abs_diff(b.grad(), Tensor<float>({16})) > 0);
}

TEST_CASE("expressions broadcast rows and one-element tensors, and reject other shapes") {
  attn::Tape<double> tape;
  auto m = tape.leaf(Tensor<double>({2, 3}, {1, 2, 3, 4, 5, 6}));
  auto row = tape.leaf(Tensor<double>({3}, {10, 20, 30}));
  auto row2 = tape.leaf(Tensor<double>({1, 3}, {1, 1, 2}));
  auto s = tape.leaf(Tensor<double>(Shape{}, {2}));
  attn::Var<double> y = (m + row) * s - row2;
  CHECK(y.shape() == Shape{2, 3});
  const double expected[] = {21, 43, 64, 27, 49, 70};
  for (int i = 0; i < 6; ++i) CHECK(y.value()[i] == expected[i]);
  attn::Var<double> r = row * 2.0 + row2;  // [3] with [1, 3]: same numel, row of the other
  CHECK(r.value()[2] == 62);

  auto bad = tape.leaf(Tensor<double>({4, 3}));
  const std::string msg = message_of([&] { attn::eval(m + bad); });
  CHECK(msg.find("add") != std::string::npos);
  CHECK(msg.find("[2, 3]") != std::string::npos);
  CHECK(msg.find("[4, 3]") != std::string::npos);
  CHECK_THROWS_AS(attn::Var<double>(m * tape.leaf(Tensor<double>({2}))), attn::shape_error);
  CHECK_THROWS_AS(attn::Var<double>(m * tape.leaf(Tensor<double>({3, 1}))), attn::shape_error);
}

TEST_CASE("expressions refuse Vars from another tape or from before clear()") {
  attn::Tape<float> t1, t2;
  auto a = t1.leaf(Tensor<float>({2}));
  auto b = t2.leaf(Tensor<float>({2}));
  CHECK_THROWS_AS(attn::Var<float>(a + b), attn::value_error);
  t1.clear();
  const std::string msg = message_of([&] { attn::eval(attn::exp(a)); });
  CHECK(msg.find("clear") != std::string::npos);
  attn::Var<float> unset;
  CHECK_THROWS_AS(unset.value(), attn::value_error);
}

TEST_CASE("a constant-only side and numbers on either side of an operator") {
  attn::Tape<double> tape;
  auto x = tape.leaf(Tensor<double>({2}, {1.0, 4.0}), true);
  attn::Var<double> y = 3 - x / 2 + attn::sqrt(x) * 2.0f;
  CHECK(y.value()[0] == doctest::Approx(3 - 0.5 + 2));
  CHECK(y.value()[1] == doctest::Approx(3 - 2 + 4));
  tape.backward(attn::sum(y));
  CHECK(x.grad()[0] == doctest::Approx(-0.5 + 1.0));
  CHECK(x.grad()[1] == doctest::Approx(-0.5 + 0.5));
}

TEST_CASE("elementwise results do not depend on the thread count") {
  attn::Rng rng(3);
  const Tensor<float> xv = Tensor<float>::randn({300, 257}, rng),
                      bv = Tensor<float>::randn({257}, rng);
  auto run = [&](int threads) {
    attn::set_num_threads(threads);
    attn::Tape<float> tape;
    auto x = tape.leaf(xv, true);
    auto b = tape.leaf(bv, true);
    auto y = attn::sum(attn::gelu(x * b + b) * x);
    tape.backward(y);
    return std::tuple{y.item(), Tensor<float>(x.grad()), Tensor<float>(b.grad())};
  };
  const int saved = attn::num_threads();
  const auto [y1, gx1, gb1] = run(1);
  const auto [y2, gx2, gb2] = run(2);
  attn::set_num_threads(saved);
  CHECK(y1 == y2);
  CHECK(attn::max_abs_diff(gx1, gx2) == 0.0);
  CHECK(attn::max_abs_diff(gb1, gb2) == 0.0);
}

TEST_CASE("elementwise backward: operands that write, add to, repeat or skip a gradient") {
  // The backward runs one of several loops: every operand writes its node's first contribution,
  // every operand adds to an earlier one, or the general loop (a node twice in the expression,
  // operands that mix the two, one without a gradient). Each case against gradients derived by
  // hand. Nodes' backward passes run in reverse order of recording, so in `a = eval(...); b =
  // eval(...)` b's contributions come first.
  attn::Rng rng(5);
  const Shape shape{5, 7};
  const Tensor<double> xv = Tensor<double>::randn(shape, rng),
                       yv = Tensor<double>::randn(shape, rng),
                       zv = Tensor<double>::randn(shape, rng);
  using V = attn::Var<double>;
  struct Grads {
    Tensor<double> x, y;
  };
  auto run = [&](auto&& loss) {
    attn::Tape<double> tape;
    const V x = tape.leaf(xv, true), y = tape.leaf(yv, true), z = tape.leaf(zv, false);
    tape.backward(loss(x, y, z));
    return Grads{Tensor<double>(x.grad()), Tensor<double>(y.grad())};
  };
  auto expect = [&](const Tensor<double>& got, auto&& want) {
    for (attn::index_t i = 0; i < got.numel(); ++i)
      CHECK(got.data()[i] == doctest::Approx(want(xv.data()[i], yv.data()[i], zv.data()[i])));
  };
  SUBCASE("both operands write") {
    const Grads g = run([](const V& x, const V& y, const V&) { return attn::sum(x * y); });
    expect(g.x, [](double, double y, double) { return y; });
    expect(g.y, [](double x, double, double) { return x; });
  }
  SUBCASE("both operands add") {
    const Grads g = run([](const V& x, const V& y, const V&) {
      const V a = attn::eval(x * y);
      const V b = attn::eval(x + 2.0 * y);
      return attn::sum(a) + attn::sum(b);
    });
    expect(g.x, [](double, double y, double) { return y + 1; });
    expect(g.y, [](double x, double, double) { return x + 2; });
  }
  SUBCASE("one operand writes, the other adds") {
    const Grads g = run([](const V& x, const V& y, const V&) {
      const V a = attn::eval(x * y);
      const V b = attn::eval(3.0 * y);
      return attn::sum(a) + attn::sum(b);
    });
    expect(g.x, [](double, double y, double) { return y; });
    expect(g.y, [](double x, double, double) { return x + 3; });
  }
  SUBCASE("a node twice in one expression") {
    const Grads g = run([](const V& x, const V& y, const V&) { return attn::sum(x * x * y); });
    expect(g.x, [](double x, double y, double) { return 2 * x * y; });
    expect(g.y, [](double x, double, double) { return x * x; });
  }
  SUBCASE("an operand without a gradient") {
    const Grads g = run([](const V& x, const V& y, const V& z) { return attn::sum(x * z + y); });
    expect(g.x, [](double, double, double z) { return z; });
    expect(g.y, [](double, double, double) { return 1.0; });
  }
}
