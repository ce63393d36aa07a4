// End to end: a small MLP trained with the autodiff engine learns the two-spiral problem to
// 100% training accuracy from a fixed seed.
#include <doctest/doctest.h>

#include <attn/attn.hpp>
#include <cmath>
#include <numbers>

using attn::Tensor;

TEST_CASE("an MLP learns two interleaved spirals to 100% accuracy") {
  attn::Rng rng(12345);
  const attn::index_t n = 200;  // points per spiral
  Tensor<double> x({2 * n, 2});
  Tensor<std::int32_t> y({2 * n});
  for (attn::index_t i = 0; i < n; ++i)
    for (int c = 0; c < 2; ++c) {
      const double t =
          0.25 + 3.0 * std::numbers::pi * static_cast<double>(i) / static_cast<double>(n);
      const double sign = c ? -1.0 : 1.0;
      const attn::index_t row = 2 * i + c;
      x(row, 0) = sign * t * std::cos(t) / 10.0 + rng.normal(0, 0.01);
      x(row, 1) = sign * t * std::sin(t) / 10.0 + rng.normal(0, 0.01);
      y[row] = c;
    }
  const attn::index_t hidden = 64;
  attn::Parameter<double> w1(Tensor<double>::randn({2, hidden}, rng, 0, 1.0)),
      b1(Tensor<double>::zeros({hidden}));
  attn::Parameter<double> w2(Tensor<double>::randn({hidden, hidden}, rng, 0, 1.0 / 8)),
      b2(Tensor<double>::zeros({hidden}));
  attn::Parameter<double> w3(Tensor<double>::randn({hidden, 2}, rng, 0, 1.0 / 8)),
      b3(Tensor<double>::zeros({2}));
  attn::Parameter<double>* params[] = {&w1, &b1, &w2, &b2, &w3, &b3};
  // Adam, written out: m ← β₁m + (1−β₁)g, v ← β₂v + (1−β₂)g², w ← w − lr m̂ / (√v̂ + ε).
  std::vector<Tensor<double>> m, v;
  for (auto* p : params) {
    m.push_back(Tensor<double>::zeros(p->shape()));
    v.push_back(Tensor<double>::zeros(p->shape()));
  }
  attn::Tape<double> tape;
  auto forward = [&] {
    auto in = tape.leaf(x);
    auto h1 = attn::tanh(attn::matmul(in, tape.param(w1)) + tape.param(b1));
    auto h2 = attn::tanh(attn::matmul(h1, tape.param(w2)) + tape.param(b2));
    return attn::matmul(h2, tape.param(w3)) + tape.param(b3);
  };
  double loss = 0;
  for (int step = 1; step <= 600; ++step) {
    tape.clear();
    auto l = attn::cross_entropy(forward(), y);
    tape.backward(l);
    loss = l.item();
    for (std::size_t k = 0; k < 6; ++k) {
      auto& p = *params[k];
      m[k].array() = 0.9 * m[k].array() + 0.1 * p.grad.array();
      v[k].array() = 0.999 * v[k].array() + 0.001 * p.grad.array().square();
      const double c1 = 1 - std::pow(0.9, step), c2 = 1 - std::pow(0.999, step);
      p.value.array() -= 0.03 * (m[k].array() / c1) / ((v[k].array() / c2).sqrt() + 1e-8);
      p.zero_grad();
    }
  }
  tape.clear();
  attn::NoGrad<double> guard(tape);
  attn::Var<double> logits = forward();
  int correct = 0;
  for (attn::index_t i = 0; i < 2 * n; ++i)
    correct += (logits.value()(i, 1) > logits.value()(i, 0)) == (y[i] == 1);
  INFO("final loss " << loss);
  CHECK(correct == 2 * n);
  CHECK(loss < 0.05);
}
