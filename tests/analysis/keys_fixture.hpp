// Key sets for the convex-hull tests and benchmarks/hull: Gaussian, clustered, "realistic" (what
// trained heads produce) and keys lying in a lower-dimensional affine subspace.
// Does not classify anything; the tests and the benchmark do.
#pragma once

#include <attn/core/rng.hpp>
#include <attn/core/tensor.hpp>
#include <cmath>
#include <vector>

namespace attn::test {

// N(0, I) keys [n, d].
inline Tensor<double> gaussian_keys(index_t n, index_t d, Rng& rng) {
  return Tensor<double>::randn({n, d}, rng);
}

// `clusters` centres ~ N(0, I), each key a centre plus N(0, spread² I): many keys near each
// centre are interior, a few on each cluster's far side are vertices.
inline Tensor<double> clustered_keys(index_t n, index_t d, index_t clusters, double spread,
                                     Rng& rng) {
  const Tensor<double> centres = Tensor<double>::randn({clusters, d}, rng);
  Tensor<double> k({n, d});
  for (index_t i = 0; i < n; ++i) {
    const index_t c = index_t(rng.uniform_int(std::uint64_t(clusters)));
    for (index_t e = 0; e < d; ++e) k(i, e) = centres(c, e) + spread * rng.normal();
  }
  return k;
}

// Keys as trained heads produce them: a shared offset (3 N(0, 1) per dimension), per-dimension
// scales e^{N(0, 1)}, and per-key log-normal norms e^{σ N(0, 1)} on uniformly random directions:
// k_i = offset + scale ⊙ (e^{σ g_i} u_i), ‖u_i‖ = 1.
inline Tensor<double> realistic_keys(index_t n, index_t d, Rng& rng, double sigma = 1.0) {
  std::vector<double> offset(static_cast<std::size_t>(d)), scale(offset), u(offset);
  for (double& o : offset) o = 3 * rng.normal();
  for (double& s : scale) s = std::exp(rng.normal());
  Tensor<double> k({n, d});
  for (index_t i = 0; i < n; ++i) {
    double norm = 0;
    for (double& x : u) {
      x = rng.normal();
      norm += x * x;
    }
    const double radius = std::exp(sigma * rng.normal()) / std::sqrt(norm);
    for (index_t e = 0; e < d; ++e)
      k(i, e) = offset[std::size_t(e)] + scale[std::size_t(e)] * radius * u[std::size_t(e)];
  }
  return k;
}

// The rows of `low` [n, r] placed in an r-dimensional affine subspace of R^d (d ≥ r): a random
// orthonormal frame (Gram–Schmidt on Gaussian vectors) plus an offset. Vertex sets are unchanged.
inline Tensor<double> embed_keys(const Tensor<double>& low, index_t d, Rng& rng) {
  const index_t n = low.dim(0), r = low.dim(1);
  std::vector<std::vector<double>> frame;
  while (index_t(frame.size()) < r) {
    std::vector<double> v(static_cast<std::size_t>(d));
    for (double& x : v) x = rng.normal();
    for (const auto& f : frame) {
      double p = 0;
      for (index_t e = 0; e < d; ++e) p += v[std::size_t(e)] * f[std::size_t(e)];
      for (index_t e = 0; e < d; ++e) v[std::size_t(e)] -= p * f[std::size_t(e)];
    }
    double norm = 0;
    for (const double x : v) norm += x * x;
    for (double& x : v) x /= std::sqrt(norm);
    frame.push_back(v);
  }
  Tensor<double> k({n, d});
  std::vector<double> offset(static_cast<std::size_t>(d));
  for (double& o : offset) o = rng.normal();
  for (index_t i = 0; i < n; ++i)
    for (index_t e = 0; e < d; ++e) {
      double x = offset[std::size_t(e)];
      for (index_t a = 0; a < r; ++a) x += low(i, a) * frame[std::size_t(a)][std::size_t(e)];
      k(i, e) = x;
    }
  return k;
}

}  // namespace attn::test
