// attn/attention/random_features.hpp: the seeded random matrix of kernel::RandomFeatures and its
// feature map φ(x) = exp(Rx − ‖x‖²/2 − m) / √F with the derivative (kernel.hpp states the map
// and why its stabilisers m are exact). Does not record anything on a tape; linear.hpp's
// feature_map op calls these for Attention, reference.hpp for the oracle.
#pragma once

#include <Eigen/QR>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "../core/error.hpp"
#include "../core/gemm.hpp"
#include "../core/parallel.hpp"
#include "../core/rng.hpp"
#include "../core/tensor.hpp"
#include "kernel.hpp"

namespace attn {

// R [F, d]: stacked blocks of random orthogonal d x d matrices (QR of a Gaussian matrix, signs
// fixed by R's diagonal so the draw is unique), each row rescaled to the norm of a Gaussian
// vector in R^d, so every row is marginally N(0, I) while rows in a block are orthogonal
// (orthogonal random features, Choromanski et al. 2021). The same (features, d, seed) gives the
// same matrix everywhere.
template <class T>
Tensor<T> random_feature_matrix(index_t features, index_t d, std::uint64_t seed) {
  ATTN_CHECK(features > 0 && d > 0, value_error, "random_feature_matrix: features (", features,
             ") and d (", d, ") must be positive");
  Rng rng(seed);
  Tensor<T> r(Shape{features, d});
  Eigen::MatrixXd g(d, d);
  for (index_t row = 0; row < features; row += d) {
    for (index_t i = 0; i < d; ++i)
      for (index_t j = 0; j < d; ++j) g(i, j) = rng.normal();
    Eigen::HouseholderQR<Eigen::MatrixXd> qr(g);
    Eigen::MatrixXd qm = qr.householderQ() * Eigen::MatrixXd::Identity(d, d);
    const Eigen::MatrixXd rm = qr.matrixQR().triangularView<Eigen::Upper>();
    for (index_t j = 0; j < d; ++j)
      if (rm(j, j) < 0) qm.col(j) = -qm.col(j);
    for (index_t i = 0; i < d && row + i < features; ++i) {
      double norm2 = 0;
      for (index_t j = 0; j < d; ++j) {
        const double z = rng.normal();
        norm2 += z * z;
      }
      const double scale = std::sqrt(norm2);
      for (index_t j = 0; j < d; ++j) r(row + i, j) = static_cast<T>(qm(j, i) * scale);
    }
  }
  return r;
}

namespace detail {

// random_feature_matrix through a small per-thread cache of the last four (features, d, seed)
// drawn: map() and map_backward() need R on every call, and drawing it (one d x d QR per block
// of d rows) was nearly all of the time of mapping 64 rows (F 256, d 64: 1.7 ms on a Zen 3), so
// cached generation and finite-difference checks, which map a few rows at a time, would spend
// most of their time redrawing the same matrix. R is a pure function of its key, so the cache
// changes no result; per thread, it needs no lock. The shared pointer keeps a matrix alive for its
// caller even when later draws on the same thread evict it.
template <class T>
std::shared_ptr<const Tensor<T>> cached_random_feature_matrix(index_t features, index_t d,
                                                              std::uint64_t seed) {
  struct Entry {
    index_t features = 0, d = 0;
    std::uint64_t seed = 0;
    std::shared_ptr<const Tensor<T>> r;
  };
  thread_local std::array<Entry, 4> cache;
  thread_local std::size_t next = 0;  // round-robin: the oldest entry goes first
  for (const Entry& e : cache)
    if (e.r && e.features == features && e.d == d && e.seed == seed) return e.r;
  auto r = std::make_shared<const Tensor<T>>(random_feature_matrix<T>(features, d, seed));
  cache[next] = Entry{features, d, seed, r};
  next = (next + 1) % cache.size();
  return r;
}

// H = 0.75 ln(largest T): key features stay below e^H (66 in float, 532 in double), leaving
// room for sums over many keys, and the shift c may not exceed it either (see RandomFeatures).
template <class T>
double random_feature_headroom() {
  return 0.75 * std::log(static_cast<double>(std::numeric_limits<T>::max()));
}

}  // namespace detail

template <class T>
void kernel::RandomFeatures::map(const T* x, index_t rows, index_t d, T* phi,
                                 FeatureSide side) const {
  const index_t F = features;
  const auto held = detail::cached_random_feature_matrix<T>(F, d, seed);
  const Tensor<T>& r = *held;  // [F, d]
  // Keys: c = max(0, max_a ‖r_a‖²/2 − H), from R alone.
  double c = 0;
  if (side == FeatureSide::key) {
    double longest = 0;
    for (index_t a = 0; a < F; ++a) {
      double n2 = 0;
      for (index_t j = 0; j < d; ++j) n2 += double(r(a, j)) * double(r(a, j));
      longest = std::max(longest, n2 / 2);
    }
    const double h = detail::random_feature_headroom<T>();
    c = std::max(0.0, longest - h);
    ATTN_CHECK(c <= h, value_error, "kernel::RandomFeatures: head width ", d, " with ", F,
               " features is too wide for ", sizeof(T) == 4 ? "float" : "this type",
               ": the keys' fixed stabiliser (", c,
               ") would push ordinary keys' features towards underflow; use double or a "
               "narrower head");
  }
  gemm(x, false, r.data(), true, phi, rows, F, d);  // P = X Rᵀ  [rows, F]
  const T scale = T{1} / std::sqrt(static_cast<T>(F));
  parallel_for(rows, double(F) * 8, [&](index_t i) {
    const T* xi = x + i * d;
    T* p = phi + i * F;
    T half = 0;
    for (index_t j = 0; j < d; ++j) half += xi[j] * xi[j];
    half /= 2;
    // Queries: the row's largest exponent max_a (r_a·x) − ‖x‖²/2; keys: the shared c.
    const T m = side == FeatureSide::query ? *std::max_element(p, p + F) - half : static_cast<T>(c);
    Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> row(p, F);
    row = (row - (half + m)).exp() * scale;
  });
}

template <class T>
void kernel::RandomFeatures::map_backward(const T* x, const T* phi, const T* dphi, index_t rows,
                                          index_t d, T* dx) const {
  const index_t F = features;
  const auto held = detail::cached_random_feature_matrix<T>(F, d, seed);
  const Tensor<T>& r = *held;
  std::vector<T> g(static_cast<std::size_t>(rows * F));  // dφ ∘ φ  [rows, F]
  std::vector<T> gsum(static_cast<std::size_t>(rows));
  parallel_for(rows, double(F) * 2, [&](index_t i) {
    T s = 0;
    for (index_t a = 0; a < F; ++a) {
      const T ga = dphi[i * F + a] * phi[i * F + a];
      g[static_cast<std::size_t>(i * F + a)] = ga;
      s += ga;
    }
    gsum[static_cast<std::size_t>(i)] = s;
  });
  gemm(g.data(), false, r.data(), false, dx, rows, d, F, true);  // dx += G R
  parallel_for(rows, double(d) * 2, [&](index_t i) {
    for (index_t j = 0; j < d; ++j)
      dx[i * d + j] -= gsum[static_cast<std::size_t>(i)] * x[i * d + j];
  });
}

}  // namespace attn
