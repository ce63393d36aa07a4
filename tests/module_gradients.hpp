// Checks shared by the tests of attention modules: finite differences on every parameter of a
// module (anything with for_each_parameter) and on its input, and decoding with a key/value cache
// against the full forward pass. Does not pick the loss beyond sum(output ⊙ r): the caller's
// module must be deterministic (dropout off or seeded).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <attn/attention/multi_head.hpp>
#include <attn/autodiff/autodiff.hpp>
#include <cmath>
#include <string>
#include <vector>

namespace attn::test {

// Backward once, then central differences on every `stride`-th element of each parameter.

template <class Module, class Loss>
void check_module_gradients(Module& module, Loss&& loss, index_t stride = 1, double eps = 1e-6,
                            double tol = 1e-6) {
  module.for_each_parameter([](const std::string&, Parameter<double>& p) { p.zero_grad(); });
  {
    Tape<double> tape;
    tape.backward(loss(tape));
  }
  module.for_each_parameter([&](const std::string& name, Parameter<double>& p) {
    for (index_t i = 0; i < p.value.numel(); i += stride) {
      const double x0 = p.value[i];
      auto at = [&](double v) {
        p.value[i] = v;
        Tape<double> t;
        NoGrad<double> no_grad(t);
        return loss(t).item();
      };
      const double numeric = (at(x0 + eps) - at(x0 - eps)) / (2 * eps);
      p.value[i] = x0;
      INFO(name << "[" << i << "]");
      CHECK(p.grad[i] == doctest::Approx(numeric).epsilon(tol).scale(1));
    }
  });
}

// sum(module(x) ⊙ r): every output element reaches the loss.
template <class Module, class Call>
void check_gradients(Module& mod, const attn::Tensor<double>& x, Call&& call, index_t stride = 1) {
  attn::Rng rng(77);
  const attn::Shape out{x.shape()[0], x.shape()[1], mod.d_model()};
  const attn::Tensor<double> r = attn::Tensor<double>::randn(out, rng);
  check_module_gradients(
      mod, [&](attn::Tape<double>& tape) { return attn::sum(call(tape.leaf(x)) * tape.leaf(r)); },
      stride);
  // The input's gradient too.
  const attn::GradientCheck gc = attn::check_gradient(
      [&](const std::vector<attn::Var<double>>& v) {
        return attn::sum(call(v[0]) * v[0].tape().leaf(r));
      },
      {x});
  INFO(gc.report());
  CHECK(gc.ok);
}

// Decodes x [B, T, D] in chunks of 3, 1 and 2 positions; every chunk's output must equal the
// matching rows of the full forward pass.
template <class Module>
void check_decode(Module& mod, const attn::Tensor<double>& x) {
  mod.training = false;
  const index_t B = x.shape()[0], T = x.shape()[1], D = x.shape()[2];
  REQUIRE(T == 6);
  attn::Tape<double> tape;
  attn::NoGrad<double> ng(tape);
  const attn::Tensor<double> full = mod(tape.leaf(x)).value();
  attn::KVCache<double> cache;
  index_t done = 0;
  double worst = 0;
  for (const index_t chunk : {3, 1, 2}) {
    attn::Tensor<double> part(attn::Shape{B, chunk, D});
    for (index_t b = 0; b < B; ++b)
      for (index_t i = 0; i < chunk; ++i)
        for (index_t d = 0; d < D; ++d) part(b, i, d) = x(b, done + i, d);
    const attn::Tensor<double> got = mod.decode(tape.leaf(part), cache).value();
    for (index_t b = 0; b < B; ++b)
      for (index_t i = 0; i < chunk; ++i)
        for (index_t d = 0; d < D; ++d)
          worst = std::max(worst, std::abs(got(b, i, d) - full(b, done + i, d)));
    done += chunk;
    CHECK(cache.length() == done);
  }
  CHECK(worst < 1e-12);
}

}  // namespace attn::test
