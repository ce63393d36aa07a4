// analysis/hull.hpp: Qhull's vertices, each of its traps (N <= d, rank-deficient keys, joggle,
// duplicates, errors), and agreement with certified_vertices on random and clustered keys, d <= 8.
#include <doctest/doctest.h>

#include <attn/analysis/hull.hpp>
#include <string>
#include <vector>

#include "../test_util.hpp"
#include "keys_fixture.hpp"

using attn::index_t;
using attn::Tensor;
namespace analysis = attn::analysis;

namespace {

Eigen::MatrixXd as_matrix(const Tensor<double>& k) {
  return analysis::detail::keys_as_matrix(k, "test");
}

// 40 keys in the plane z = x + y of R^3, the first four the corners of the unit square.
Tensor<double> flat_square(attn::Rng& rng) {
  Tensor<double> k({40, 3});
  for (index_t i = 0; i < 40; ++i) {
    const double a = i < 4 ? double(i & 1) : rng.uniform(),
                 b = i < 4 ? double(i >> 1) : rng.uniform();
    k(i, 0) = a, k(i, 1) = b, k(i, 2) = a + b;
  }
  return k;
}

}  // namespace

TEST_CASE("hull_vertices agrees with certified_vertices on random and clustered keys, d <= 8") {
  attn::Rng rng(41);
  for (index_t d = 2; d <= 8; ++d) {
    const index_t n = d <= 5 ? 150 : d == 6 ? 60 : 40;  // Qhull's cost grows ~10x per 2 dims
    for (int kind = 0; kind < 2; ++kind) {
      Tensor<double> k = kind == 0 ? attn::test::gaussian_keys(n, d, rng)
                                   : attn::test::clustered_keys(n, d, 2, 0.15, rng);
      if (kind == 0)  // every third key shrunk towards the origin: some interior keys in any d
        for (index_t i = 0; i < n; i += 3)
          for (index_t e = 0; e < d; ++e) k(i, e) *= 0.2;
      const auto c = analysis::certified_vertices(k);
      INFO("d = ", d, ", kind = ", kind, ", n = ", n);
      CHECK(analysis::hull_vertices(k) == c.vertices);
      CHECK(analysis::check_certificates(k, c).ok);
      if (kind == 0 || d <= 6) CHECK(c.interior > 0);  // not trivially "all vertices"
    }
  }
}

TEST_CASE("hull_vertices: N <= d (Qhull refuses; affinely independent keys are all vertices)") {
  attn::Rng rng(42);
  const Tensor<double> k = attn::test::gaussian_keys(4, 6, rng);
  CHECK(attn::test::message_of<attn::value_error>([&] {
          analysis::detail::qhull_vertices(as_matrix(k), "qhull");
        }).find("Qhull failed") != std::string::npos);
  CHECK(analysis::hull_vertices(k) == std::vector<index_t>{0, 1, 2, 3});
  CHECK(analysis::hull_vertices(Tensor<double>({1, 3}, {1, 2, 3})) == std::vector<index_t>{0});
  CHECK(analysis::hull_vertices(Tensor<double>({0, 3})).empty());
}

TEST_CASE("hull_vertices: rank-deficient keys are projected onto their affine hull first") {
  attn::Rng rng(43);
  const Tensor<double> k = flat_square(rng);
  // Qhull itself fails: its initial simplex is flat.
  const std::string message = attn::test::message_of<attn::value_error>(
      [&] { analysis::detail::qhull_vertices(as_matrix(k), "qhull"); });
  CHECK(message.find("QH6154") != std::string::npos);
  CHECK(analysis::hull_vertices(k) == std::vector<index_t>{0, 1, 2, 3});
  // A 3-D configuration embedded in R^7.
  const Tensor<double> low = attn::test::gaussian_keys(50, 3, rng);
  const Tensor<double> high = attn::test::embed_keys(low, 7, rng);
  CHECK(analysis::hull_vertices(high) == analysis::hull_vertices(low));
  CHECK(analysis::hull_vertices(high) == analysis::certified_vertices(high).vertices);
  // Collinear keys: the two ends.
  Tensor<double> line({4, 2}, {0, 0, 2, 2, 1, 1, 3, 3});
  CHECK(analysis::hull_vertices(line) == std::vector<index_t>{0, 3});
}

TEST_CASE("hull_vertices: Qhull's joggle (QJ) would give a wrong vertex set; it is not used") {
  attn::Rng rng(44);
  const Tensor<double> k = flat_square(rng);
  const std::vector<index_t> joggled = analysis::detail::qhull_vertices(as_matrix(k), "qhull QJ");
  CHECK(joggled.size() > 4);  // points inside the square come out as "vertices"
  CHECK(analysis::hull_vertices(k) == std::vector<index_t>{0, 1, 2, 3});
}

TEST_CASE("hull_vertices: every copy of a duplicated vertex is a vertex") {
  const Tensor<double> k({6, 2}, {0, 0, 1, 0, 0, 1, 1, 1, 1, 1, 0.5, 0.5});
  const std::vector<index_t> raw = analysis::detail::qhull_vertices(as_matrix(k), "qhull");
  CHECK(raw.size() == 4);  // Qhull keeps one copy of (1, 1)
  CHECK(analysis::hull_vertices(k) == std::vector<index_t>{0, 1, 2, 3, 4});
  CHECK(analysis::certified_vertices(k).vertices == std::vector<index_t>{0, 1, 2, 3, 4});
}

TEST_CASE("hull_vertices: errors become attn::value_error") {
  Tensor<double> k({5, 2}, {0, 0, 1, 0, 0, 1, 1, 1, 0.5, 0.5});
  k(2, 0) = std::numeric_limits<double>::infinity();
  CHECK(attn::test::message_of<attn::value_error>([&] {
          analysis::hull_vertices(k);
        }).find("non-finite") != std::string::npos);
  attn::Rng rng(45);
  const Tensor<double> wide = attn::test::gaussian_keys(40, 12, rng);
  CHECK(attn::test::message_of<attn::value_error>([&] {
          analysis::hull_vertices(wide);
        }).find("use certified_vertices") != std::string::npos);
  CHECK(attn::test::message_of<attn::value_error>([&] {
          analysis::detail::qhull_vertices(as_matrix(wide), "qhull Qz-not-an-option");
        }).find("Qhull failed") != std::string::npos);
}
