// The tape: backward from a scalar, gradient accumulation into parameters, no_grad, results
// independent of the thread count, and invalid use.
#include <doctest/doctest.h>

#include <attn/attn.hpp>

#include "mlp_fixture.hpp"

using attn::Shape;
using attn::Tensor;

TEST_CASE("parameters accumulate gradients across backward passes until zero_grad") {
  attn::Parameter<double> w(Tensor<double>({2}, {1.0, -2.0}));
  attn::Tape<double> tape;
  for (int pass = 1; pass <= 3; ++pass) {
    tape.clear();
    auto wv = tape.param(w);
    auto loss = attn::sum(wv * wv);  // d/dw = 2w
    tape.backward(loss);
    CHECK(w.grad[0] == doctest::Approx(2.0 * pass));
    CHECK(w.grad[1] == doctest::Approx(-4.0 * pass));
  }
  w.zero_grad();
  CHECK(w.grad[0] == 0.0);
}

TEST_CASE("a second backward on the same tape recomputes intermediate gradients") {
  attn::Tape<double> tape;
  auto x = tape.leaf(Tensor<double>({1}, {3.0}), true);
  auto y = attn::sum(x * x * x);
  tape.backward(y);
  CHECK(x.grad()[0] == doctest::Approx(27.0));
  tape.backward(y);  // leaf gradients are reset per pass; only Parameters accumulate
  CHECK(x.grad()[0] == doctest::Approx(27.0));
}

TEST_CASE("no_grad records no backward state") {
  attn::Tape<float> tape;
  auto x = tape.leaf(Tensor<float>({3}, {1, 2, 3}), true);
  {
    attn::NoGrad<float> guard(tape);
    auto y = attn::sum(attn::exp(x));
    CHECK_FALSE(y.requires_grad());
    CHECK(y.item() == doctest::Approx(std::exp(1.f) + std::exp(2.f) + std::exp(3.f)));
    CHECK_THROWS_AS(tape.backward(y), attn::value_error);
  }
  CHECK(tape.grad_enabled());
  auto z = attn::sum(x);
  CHECK(z.requires_grad());
}

TEST_CASE("backward refuses a loss with more than one element") {
  attn::Tape<float> tape;
  auto x = tape.leaf(Tensor<float>({3}), true);
  attn::Var<float> y = x * 2.0f;
  CHECK_THROWS_AS(tape.backward(y), attn::shape_error);
}

TEST_CASE("a training step gives bitwise the same result with 1 and 2 threads") {
  auto run = [](int threads) {
    attn::set_num_threads(threads);
    attn::Rng rng(4);
    attn::test::Mlp mlp(rng);
    attn::Tape<float> tape;
    const Tensor<float> x = Tensor<float>::randn({600, 16}, rng);
    Tensor<std::int32_t> y({600});
    for (attn::index_t i = 0; i < 600; ++i) y[i] = static_cast<std::int32_t>(rng.uniform_int(4));
    std::vector<float> losses;
    for (int s = 0; s < 5; ++s) losses.push_back(mlp.step(tape, x, y, rng));
    return std::pair{losses, Tensor<float>(mlp.w1.value)};
  };
  const int saved = attn::num_threads();
  const auto [l1, w1] = run(1);
  const auto [l2, w2] = run(2);
  attn::set_num_threads(saved);
  CHECK(l1 == l2);
  CHECK(attn::max_abs_diff(w1, w2) == 0.0);
}
