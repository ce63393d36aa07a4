// Finite-difference check of every parameter of a module (anything with for_each_parameter):
// backward() once, then central differences on every `stride`-th element of each parameter.
// Does not pick the loss: the caller's loss(tape) must be deterministic (dropout off or seeded).
#pragma once

#include <doctest/doctest.h>

#include <attn/autodiff/autodiff.hpp>
#include <string>

namespace attn::test {

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

}  // namespace attn::test
