// attn/attention/score.hpp: pairwise score functions s(q, k) for attention.
// Does not hold parameters: scores with weights of their own (Bilinear, Additive, Synthesizer)
// are module-level and live in multi_head.hpp, built from these and the autodiff ops.
//
// A score policy is the quadratic form
//     s(q, k) = alpha(d) q·k + beta_q ‖q‖² + beta_k ‖k‖²,
// which covers the dot-product family and lets every path compute all T² scores with one GEMM
// plus two vectors of norms. It provides alpha(d), beta_q, beta_k and a name, and the reference
// path evaluates it literally through operator()(q, k, d).
#pragma once

#include <cmath>
#include <concepts>

#include "../core/host_device.hpp"
#include "../core/shape.hpp"

namespace attn {

template <class S>
concept ScorePolicy = std::copy_constructible<S> &&
    requires(const S& s, const double* q, index_t d) {
  { s.alpha(d) } -> std::convertible_to<double>;
  { S::beta_q } -> std::convertible_to<double>;
  { S::beta_k } -> std::convertible_to<double>;
  { s(q, q, d) } -> std::convertible_to<double>;
  { S::name } -> std::convertible_to<const char*>;
};

namespace score {

namespace detail {
template <class T>
ATTN_HOST_DEVICE double dot(const T* a, const T* b, index_t d) {
  double s = 0;
  for (index_t i = 0; i < d; ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return s;
}
}  // namespace detail

// s = q·k (Luong's "dot").
struct Dot {
  static constexpr const char* name = "dot";
  static constexpr double beta_q = 0, beta_k = 0;
  ATTN_HOST_DEVICE double alpha(index_t) const { return 1.0; }
  template <class T>
  ATTN_HOST_DEVICE double operator()(const T* q, const T* k, index_t d) const {
    return detail::dot(q, k, d);
  }
};

// s = q·k / √d (Vaswani et al.): keeps the score variance near 1 for unit-variance q and k,
// so softmax does not saturate as d grows. The default.
struct ScaledDot {
  static constexpr const char* name = "scaled_dot";
  static constexpr double beta_q = 0, beta_k = 0;
  ATTN_HOST_DEVICE double alpha(index_t d) const { return 1.0 / std::sqrt(static_cast<double>(d)); }
  template <class T>
  ATTN_HOST_DEVICE double operator()(const T* q, const T* k, index_t d) const {
    return detail::dot(q, k, d) * alpha(d);
  }
};

// s = −‖q − k‖² = 2 q·k − ‖q‖² − ‖k‖² (the Stolen Attention study's fix: a key inside the convex
// hull of the others can still win the softmax). Computed with a GEMM, never a pairwise loop;
// under softmax the −‖q‖² term is the same for every key of a row and cancels, which the fused
// path uses.
struct NegSqEuclidean {
  static constexpr const char* name = "neg_sq_euclidean";
  static constexpr double beta_q = -1, beta_k = -1;
  ATTN_HOST_DEVICE double alpha(index_t) const { return 2.0; }
  template <class T>
  ATTN_HOST_DEVICE double operator()(const T* q, const T* k, index_t d) const {
    double s = 0;
    for (index_t i = 0; i < d; ++i) {
      const double diff = static_cast<double>(q[i]) - static_cast<double>(k[i]);
      s += diff * diff;
    }
    return -s;
  }
};

}  // namespace score

// One score from its parts, s = alpha q·k + beta_q ‖q‖² + beta_k ‖k‖², in the type A the caller
// accumulates in (float on a GPU). The tiled kernels compute the q·k of a whole tile at once and
// finish each element with this; tests hold it equal to the policy's operator()(q, k, d).
template <ScorePolicy S, class A>
ATTN_HOST_DEVICE A score_from_parts(A alpha, A qk, A qq, A kk) {
  return alpha * qk + static_cast<A>(S::beta_q) * qq + static_cast<A>(S::beta_k) * kk;
}

static_assert(ScorePolicy<score::Dot>);
static_assert(ScorePolicy<score::ScaledDot>);
static_assert(ScorePolicy<score::NegSqEuclidean>);

}  // namespace attn
