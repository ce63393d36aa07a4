// attn/optim/clip.hpp: the global L2 norm of all gradients and clipping by it, as
// torch.nn.utils.clip_grad_norm_, with a result that does not depend on the thread count.
// Does not clip by value or per parameter, and never lets a NaN or Inf gradient through silently:
// a non-finite norm throws value_error naming the parameter.
#pragma once

#include <cmath>
#include <concepts>
#include <cstddef>
#include <string>
#include <vector>

#include "param_group.hpp"

namespace attn::optim {

namespace detail {

// Σ x_i² in double over blocks of fixed size, summed in block order: the same bits for any thread
// count (a parallel reduction with OpenMP's own partition would not be).
template <class T>
double sum_of_squares(const T* x, index_t n) {
  // Eight running sums in a fixed lane order: the compiler may keep them in SIMD registers (one
  // long dependency chain would not vectorise, since reassociating it would change the result).
  auto block_sum = [x](index_t begin, index_t end) {
    constexpr int lanes = 8;
    double acc[lanes] = {};
    index_t j = begin;
    for (; j + lanes <= end; j += lanes)
      for (int l = 0; l < lanes; ++l) {
        const double v = static_cast<double>(x[j + l]);
        acc[l] += v * v;
      }
    for (; j < end; ++j) {
      const double v = static_cast<double>(x[j]);
      acc[0] += v * v;
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  };
  const index_t blocks = block_count(n, optim_block);
  if (blocks <= 1) return block_sum(0, n);
  std::vector<double> partial(static_cast<std::size_t>(blocks));
  for_each_block(n, 2.0, [&](index_t begin, index_t end) {
    partial[static_cast<std::size_t>(begin / optim_block)] = block_sum(begin, end);
  });
  double s = 0.0;
  for (double p : partial) s += p;
  return s;
}

// Throws the value_error for a non-finite total norm: names the first parameter whose gradient
// holds a NaN or Inf, or, when every element is finite, the one whose squares overflow.
template <class T>
[[noreturn]] void throw_non_finite(const char* who, const std::vector<NamedParameter<T>>& params,
                                   double total) {
  for (const auto& p : params) {
    const Tensor<T>& g = p.param->grad;
    for (index_t j = 0; j < g.numel(); ++j)
      if (!std::isfinite(g[j]))
        throw value_error(attn::detail::message(
            who, ": the gradient of '", p.name, "' holds ", +g[j], " (element ", j, " of shape ",
            g.shape(), "), so the total norm is ", total,
            "; skip this step (or lower the learning rate / loss scale) instead of updating"));
  }
  for (const auto& p : params)
    if (!std::isfinite(sum_of_squares(p.param->grad.data(), p.param->grad.numel())))
      throw value_error(attn::detail::message(who, ": the squared norm of the gradient of '",
                                              p.name, "' overflows double, so the total norm is ",
                                              total));
  throw value_error(attn::detail::message(who, ": the total gradient norm is ", total));
}

template <class T>
double checked_grad_norm(const char* who, const std::vector<NamedParameter<T>>& params) {
  double total = 0.0;  // Σ over parameters in list order of Σ g², then one square root
  for (const auto& p : params) {
    ATTN_CHECK(p.param != nullptr, value_error, who, ": parameter '", p.name,
               "' is a null pointer");
    total += sum_of_squares(p.param->grad.data(), p.param->grad.numel());
  }
  total = std::sqrt(total);
  if (!std::isfinite(total)) throw_non_finite(who, params, total);
  return total;
}

}  // namespace detail

// ‖g‖₂ over all gradients together, as if concatenated into one vector (accumulated in double, in
// parameter order). Throws value_error naming the parameter when it is not finite.
template <std::floating_point T>
double grad_norm(const std::vector<NamedParameter<T>>& params) {
  return detail::checked_grad_norm("grad_norm", params);
}

// torch.nn.utils.clip_grad_norm_(params, max_norm): with N = ‖g‖₂ over all gradients,
//   c = max_norm / (N + 10⁻⁶);  if c < 1: g ← c g  for every gradient
// and returns N, the norm before clipping. (The 10⁻⁶ keeps c finite for N = 0; with it, N just
// below max_norm is scaled by a factor a hair under 1, exactly as torch does.) max_norm = +inf
// only measures. A NaN/Inf norm throws value_error naming the first parameter with a NaN/Inf
// gradient, and leaves every gradient unchanged.
template <std::floating_point T>
double clip_grad_norm(const std::vector<NamedParameter<T>>& params, double max_norm) {
  ATTN_CHECK(max_norm > 0, value_error, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  const double norm = detail::checked_grad_norm("clip_grad_norm", params);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    const T c = static_cast<T>(coef);
    for (const auto& p : params) {
      T* g = p.param->grad.data();
      detail::for_each_block(p.param->grad.numel(), 1.0, [&](index_t begin, index_t end) {
        for (index_t j = begin; j < end; ++j) g[j] *= c;
      });
    }
  }
  return norm;
}

}  // namespace attn::optim
