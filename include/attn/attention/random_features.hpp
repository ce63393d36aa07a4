// attn/attention/random_features.hpp: the seeded random matrix of kernel::RandomFeatures.
// Does not apply the feature map; attention.hpp and reference.hpp do.
#pragma once

#include <Eigen/QR>
#include <cmath>

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

}  // namespace attn
