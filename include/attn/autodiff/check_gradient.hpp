// attn/autodiff/check_gradient.hpp: compares backward() with central finite differences, in
// double precision, element by element, and reports the worst element with its index.
// Does not choose inputs: tests pass the random shapes and values they want checked.
#pragma once

#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "tape.hpp"

namespace attn {

struct GradientCheck {
  bool ok = true;
  double worst_error = 0.0;  // |analytic − numeric| / max(1, |analytic|, |numeric|)
  std::size_t input = 0;     // which input holds the worst element
  index_t element = 0;       // its flat index
  Shape shape;               // that input's shape
  double analytic = 0.0, numeric = 0.0;

  // "input 1 element 5 (index [1, 2] of [2, 3]): analytic 0.3, numeric 0.31, error 0.01"
  std::string report() const {
    std::ostringstream os;
    os << "input " << input << " element " << element << " (index [";
    index_t rest = element;
    std::vector<index_t> idx(static_cast<std::size_t>(shape.rank()));
    for (int a = shape.rank() - 1; a >= 0; --a) {
      idx[static_cast<std::size_t>(a)] = shape[a] ? rest % shape[a] : 0;
      rest = shape[a] ? rest / shape[a] : 0;
    }
    for (std::size_t a = 0; a < idx.size(); ++a) os << (a ? ", " : "") << idx[a];
    os << "] of " << shape << "): analytic " << analytic << ", numeric " << numeric << ", error "
       << worst_error << (ok ? " (ok)" : " (FAILED)");
    return os.str();
  }
};

// f maps Vars on one tape (one per input, each requiring a gradient) to a one-element Var.
// Every element of every input is perturbed by ±eps; the central difference
// (f(x + eps) − f(x − eps)) / 2eps is compared with the gradient from backward().
// f must be deterministic (seed any dropout inside it).
template <class F>
GradientCheck check_gradient(F&& f, const std::vector<Tensor<double>>& inputs, double eps = 1e-6,
                             double tol = 1e-6) {
  Tape<double> tape;
  auto make_vars = [&](const std::vector<Tensor<double>>& values, bool grad) {
    std::vector<Var<double>> vars;
    vars.reserve(values.size());
    for (const auto& v : values) vars.push_back(tape.leaf(v, grad));
    return vars;
  };
  std::vector<Tensor<double>> analytic;
  {
    auto vars = make_vars(inputs, true);
    Var<double> out = f(vars);
    ATTN_CHECK(out.numel() == 1, shape_error,
               "check_gradient: f must return one element, got shape ", out.shape());
    tape.backward(out);
    for (auto& v : vars) analytic.push_back(v.grad());
  }
  auto evaluate = [&](const std::vector<Tensor<double>>& values) {
    tape.clear();
    NoGrad<double> guard(tape);
    auto vars = make_vars(values, false);
    return f(vars).item();
  };
  GradientCheck result;
  std::vector<Tensor<double>> probe = inputs;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    for (index_t i = 0; i < inputs[k].numel(); ++i) {
      const double x0 = inputs[k][i];
      probe[k][i] = x0 + eps;
      const double up = evaluate(probe);
      probe[k][i] = x0 - eps;
      const double down = evaluate(probe);
      probe[k][i] = x0;
      const double numeric = (up - down) / (2 * eps);
      const double a = analytic[k][i];
      double err = std::abs(a - numeric) / std::max({1.0, std::abs(a), std::abs(numeric)});
      if (std::isnan(err)) err = std::numeric_limits<double>::infinity();
      if (err > result.worst_error || (k == 0 && i == 0)) {
        result.worst_error = err;
        result.input = k;
        result.element = i;
        result.shape = inputs[k].shape();
        result.analytic = a;
        result.numeric = numeric;
      }
    }
  }
  result.ok = result.worst_error <= tol;
  return result;
}

}  // namespace attn
