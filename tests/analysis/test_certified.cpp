// analysis/: certified vertex detection in any dimension and its checker, the theorems of the
// stolen-attention study as tests (interior keys are bounded for every query, vertices can take
// all the weight, the Euclidean score escapes the bound, the output-layer version), and the
// stolen-attention statistics recorded through MultiHeadAttention's probe.
#include <doctest/doctest.h>

#include <algorithm>
#include <attn/analysis/analysis.hpp>
#include <attn/attention/reference.hpp>
#include <attn/autodiff/autodiff.hpp>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "../test_util.hpp"
#include "keys_fixture.hpp"

using attn::index_t;
using attn::Tensor;
namespace analysis = attn::analysis;
namespace score = attn::score;

namespace {

// Andrew's monotone chain: the vertices of a 2-D point set (points on an edge are not vertices),
// an oracle that shares nothing with certified_vertices.
std::vector<index_t> hull_2d(const Tensor<double>& p) {
  const index_t n = p.dim(0);
  std::vector<index_t> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), index_t{0});
  std::sort(idx.begin(), idx.end(), [&](index_t a, index_t b) {
    return p(a, 0) < p(b, 0) || (p(a, 0) == p(b, 0) && p(a, 1) < p(b, 1));
  });
  const auto cross = [&](index_t o, index_t a, index_t b) {
    return (p(a, 0) - p(o, 0)) * (p(b, 1) - p(o, 1)) - (p(a, 1) - p(o, 1)) * (p(b, 0) - p(o, 0));
  };
  std::vector<index_t> h(std::size_t(2 * n));
  std::size_t k = 0;
  for (const index_t i : idx) {
    while (k >= 2 && cross(h[k - 2], h[k - 1], i) <= 0) --k;
    h[k++] = i;
  }
  for (std::size_t t = idx.size() - 1, lower = k + 1; t-- > 0;) {
    while (k >= lower && cross(h[k - 2], h[k - 1], idx[t]) <= 0) --k;
    h[k++] = idx[t];
  }
  h.resize(k - 1);
  std::sort(h.begin(), h.end());
  return h;
}

void require_certified(const Tensor<double>& keys, const analysis::CertifiedVertices& c) {
  const analysis::CertificateCheck check = analysis::check_certificates(keys, c);
  INFO(check.failure);
  REQUIRE(check.ok);
  REQUIRE(check.vertices + check.interior == keys.dim(0));
}

// Dot-product softmax weights of query q over keys [n, d] under `s`, by attn's reference path.
template <class Score>
std::vector<double> weights_of(const Tensor<double>& keys, const std::vector<double>& q,
                               const Score& s) {
  const index_t n = keys.dim(0), d = keys.dim(1);
  Tensor<double> qt({1, 1, 1, d}), kt({1, 1, n, d}), vt({1, 1, n, 1});
  std::copy(q.begin(), q.end(), qt.data());
  std::copy(keys.begin(), keys.end(), kt.data());
  const auto r =
      attn::reference_attention(qt, kt, vt, s, attn::kernel::Softmax{}, attn::mask::None{});
  return std::vector<double>(r.weights.begin(), r.weights.end());
}

// 2-D: a unit square's corners, its centre, and points inside.
Tensor<double> square_with_inside() {
  return Tensor<double>({7, 2}, {0, 0, 1, 0, 0, 1, 1, 1, 0.5, 0.5, 0.2, 0.7, 0.9, 0.1});
}

}  // namespace

TEST_CASE("certified_vertices: the square's corners are vertices, the points inside interior") {
  const Tensor<double> k = square_with_inside();
  const auto c = analysis::certified_vertices(k);
  CHECK(c.vertices == std::vector<index_t>{0, 1, 2, 3});
  require_certified(k, c);
  // The centre's certificate reproduces it from other keys.
  const auto& cert = c.certificates[4];
  REQUIRE_FALSE(cert.vertex);
  double x = 0, y = 0, total = 0;
  for (std::size_t a = 0; a < cert.support.size(); ++a) {
    CHECK(cert.support[a] != 4);
    x += cert.weights[a] * k(cert.support[a], 0);
    y += cert.weights[a] * k(cert.support[a], 1);
    total += cert.weights[a];
  }
  CHECK(x == doctest::Approx(0.5).epsilon(1e-12));
  CHECK(y == doctest::Approx(0.5).epsilon(1e-12));
  CHECK(total == doctest::Approx(1.0).epsilon(1e-12));
  // A corner's direction separates it from every other key.
  const auto& w = c.certificates[3].direction;
  for (index_t j = 0; j < 7; ++j)
    if (j != 3) CHECK(w[0] * (1 - k(j, 0)) + w[1] * (1 - k(j, 1)) > 0);
}

TEST_CASE("certified_vertices: agrees with the monotone chain on random 2-D keys") {
  attn::Rng rng(11);
  for (const index_t n : {3, 5, 20, 200}) {
    const Tensor<double> k = attn::test::gaussian_keys(n, 2, rng);
    const auto c = analysis::certified_vertices(k);
    CHECK(c.vertices == hull_2d(k));
    require_certified(k, c);
  }
}

TEST_CASE("certified_vertices: N <= d, and keys in a lower-dimensional affine subspace") {
  attn::Rng rng(12);
  // Fewer keys than dimensions: affinely independent, so all are vertices.
  for (const index_t n : {1, 2, 3, 7}) {
    const Tensor<double> k = attn::test::gaussian_keys(n, 7, rng);
    const auto c = analysis::certified_vertices(k);
    CHECK(index_t(c.vertices.size()) == n);
    CHECK(c.affine_dimension == std::max<index_t>(n - 1, 0));
    require_certified(k, c);
  }
  // 2-D configurations placed in a plane of R^d: the same vertices as in 2-D, for d up to 64.
  for (const index_t d : {3, 16, 64}) {
    const Tensor<double> low = attn::test::gaussian_keys(60, 2, rng);
    const Tensor<double> k = attn::test::embed_keys(low, d, rng);
    const auto c = analysis::certified_vertices(k);
    CHECK(c.affine_dimension == 2);
    CHECK(c.vertices == hull_2d(low));
    require_certified(k, c);
  }
  // Collinear keys: only the two ends.
  Tensor<double> line({5, 3});
  for (index_t i = 0; i < 5; ++i)
    for (index_t e = 0; e < 3; ++e) line(i, e) = double((i * 3) % 5) * double(e + 1);
  const auto c = analysis::certified_vertices(line);
  CHECK(c.vertices == std::vector<index_t>{0, 3});  // t·(1, 2, 3) for t = 0, 3, 1, 4, 2
  require_certified(line, c);
}

TEST_CASE("certified_vertices: duplicated keys share their status and certificate") {
  // Corner 3 appears twice, the centre twice, and corner 0 once more within τ/8 of itself.
  Tensor<double> k({9, 2}, {0, 0, 1, 0, 0, 1, 1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.3, 0.6, 0, 0});
  k(8, 0) = 1e-12;  // a near-copy of key 0 (spread ≈ 0.7, τ/8 ≈ 9e-11)
  const auto c = analysis::certified_vertices(k);
  CHECK(c.vertices == std::vector<index_t>{0, 1, 2, 3, 4, 8});
  CHECK(c.representative[4] == 3);
  CHECK(c.representative[6] == 5);
  CHECK(c.representative[8] == 0);
  CHECK_FALSE(c.is_vertex(5));
  CHECK_FALSE(c.is_vertex(6));
  require_certified(k, c);
  // All keys equal: one point, a vertex.
  const Tensor<double> same({4, 3}, 2.5);
  const auto s = analysis::certified_vertices(same);
  CHECK(s.vertices.size() == 4);
  require_certified(same, s);
}

TEST_CASE("certified_vertices: any dimension, every certificate checked independently") {
  attn::Rng rng(13);
  for (const index_t d : {8, 16, 32, 64}) {
    for (int kind = 0; kind < 3; ++kind) {
      const index_t n = d <= 16 ? 300 : 160;
      const Tensor<double> k = kind == 0   ? attn::test::gaussian_keys(n, d, rng)
                               : kind == 1 ? attn::test::clustered_keys(n, d, 6, 0.3, rng)
                                           : attn::test::realistic_keys(n, d, rng);
      const auto c = analysis::certified_vertices(k);
      INFO("d = ", d, ", kind = ", kind);
      require_certified(k, c);
      CHECK(c.interior + c.by_whitened + c.by_random + c.by_min_norm == n);
    }
  }
  // Float keys (what the probe records) are classified as their double values.
  const Tensor<double> k = attn::test::realistic_keys(100, 8, rng);
  const Tensor<float> kf = attn::cast<float>(k);
  const auto cf = analysis::certified_vertices(kf);
  CHECK(analysis::check_certificates(kf, cf).ok);
  CHECK(cf.vertices == analysis::certified_vertices(attn::cast<double>(kf)).vertices);
}

TEST_CASE("certified_vertices: badly scaled keys (one axis 1e-7 of the other) agree with 2-D") {
  // Condition number 1e7: Wolfe's algorithm in the keys' own coordinates stalls on these (it made
  // certified_vertices throw before it ran on whitened keys); the vertex set is that of the
  // unscaled points.
  attn::Rng rng(29);
  Tensor<double> p({40, 2}), k({40, 2});
  for (index_t i = 0; i < 40; ++i) {
    p(i, 0) = rng.normal();
    p(i, 1) = rng.normal();
    k(i, 0) = p(i, 0);
    k(i, 1) = 1e-7 * p(i, 1);
  }
  const auto c = analysis::certified_vertices(k);
  require_certified(k, c);
  CHECK(c.vertices == hull_2d(p));
}

TEST_CASE("certified_vertices: Wolfe on the keys' own coordinates (the fallback) agrees") {
  // The fallback runs only where whitening fails; the option forces it so it stays tested.
  attn::Rng rng(37);
  analysis::CertifyOptions own;
  own.whiten_min_norm = false;
  for (const index_t d : {3, 8, 24}) {
    for (int kind = 0; kind < 2; ++kind) {
      const Tensor<double> k = kind == 0 ? attn::test::gaussian_keys(200, d, rng)
                                         : attn::test::realistic_keys(200, d, rng);
      const auto w = analysis::certified_vertices(k);
      const auto c = analysis::certified_vertices(k, own);
      INFO("d = ", d, ", kind = ", kind);
      require_certified(k, c);
      CHECK(c.vertices == w.vertices);
      CHECK(c.min_norm_iterations > 0);  // Wolfe ran, on the keys themselves
    }
  }
}

TEST_CASE(
    "certified_vertices' Gram matrix: every element, for sizes around the 8 x 8 mirror blocks") {
  // The whitened Gram steers the own-direction test and Wolfe's iterations; it is formed as a
  // lower triangle and mirrored, so check both halves against sums written out here.
  attn::Rng rng(41);
  for (const index_t n : {1, 7, 8, 9, 16, 61}) {
    Eigen::MatrixXd y(5, n);
    for (index_t j = 0; j < n; ++j)
      for (index_t e = 0; e < 5; ++e) y(e, j) = rng.normal();
    const Eigen::MatrixXd g = analysis::detail::gram(y);
    REQUIRE(g.rows() == n);
    REQUIRE(g.cols() == n);
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < n; ++j) {
        double s = 0;
        for (index_t e = 0; e < 5; ++e) s += y(e, i) * y(e, j);
        INFO("n = ", n, ", element (", i, ", ", j, ")");
        CHECK(g(i, j) == doctest::Approx(s).epsilon(1e-12));
      }
  }
}

TEST_CASE("certified_vertices: low dimension, most interior keys certified by simplex sweeps") {
  attn::Rng rng(31);
  const Tensor<double> k = attn::test::gaussian_keys(400, 3, rng);
  const auto c = analysis::certified_vertices(k);
  require_certified(k, c);
  CHECK(c.by_simplex > c.interior / 2);  // the sweep is what makes low dimension fast
  CHECK(c.by_simplex <= c.interior);
}

TEST_CASE("check_certificates: rejects every kind of wrong certificate") {
  attn::Rng rng(14);
  const Tensor<double> k = attn::test::clustered_keys(80, 4, 3, 0.4, rng);
  const auto good = analysis::certified_vertices(k);
  REQUIRE(analysis::check_certificates(k, good).ok);
  const index_t v = good.vertices.front();
  index_t in = 0;
  while (good.is_vertex(in)) ++in;

  auto bad = good;  // an interior key claimed a vertex with another key's direction
  bad.certificates[std::size_t(in)] = good.certificates[std::size_t(v)];
  bad.vertices.push_back(in);
  std::sort(bad.vertices.begin(), bad.vertices.end());
  CHECK_FALSE(analysis::check_certificates(k, bad).ok);

  bad = good;  // a vertex's direction reversed
  for (double& w : bad.certificates[std::size_t(v)].direction) w = -w;
  CHECK_FALSE(analysis::check_certificates(k, bad).ok);

  bad = good;  // interior weights that no longer reproduce the key
  bad.certificates[std::size_t(in)].weights.front() += 0.01;
  bad.certificates[std::size_t(in)].weights.back() -= 0.01;
  CHECK_FALSE(analysis::check_certificates(k, bad).ok);

  bad = good;  // an interior key "reproduced" by itself
  bad.certificates[std::size_t(in)].support = {in};
  bad.certificates[std::size_t(in)].weights = {1.0};
  CHECK_FALSE(analysis::check_certificates(k, bad).ok);

  bad = good;  // a far key declared a copy of key 0
  index_t last_in = 79;
  while (good.is_vertex(last_in) || good.representative[std::size_t(last_in)] != last_in) --last_in;
  REQUIRE(last_in > 0);
  bad.representative[std::size_t(last_in)] = 0;
  CHECK_FALSE(analysis::check_certificates(k, bad).ok);

  bad = good;  // the vertex list disagrees with the certificates
  bad.vertices.pop_back();
  CHECK_FALSE(analysis::check_certificates(k, bad).ok);

  // Certificates of other keys.
  CHECK_FALSE(
      analysis::check_certificates(attn::test::clustered_keys(80, 4, 3, 0.4, rng), good).ok);
}

TEST_CASE("certified_vertices: bad input gives clear errors") {
  Tensor<double> k({3, 2}, {0, 0, 1, 0, 0, 1});
  k(1, 1) = std::nan("");
  CHECK(attn::test::message_of<attn::value_error>([&] {
          analysis::certified_vertices(k);
        }).find("key 1 has a non-finite coordinate") != std::string::npos);
  CHECK(attn::test::message_of<attn::shape_error>([&] {
          analysis::certified_vertices(Tensor<double>({2, 3, 4}));
        }).find("keys must be [N, d]") != std::string::npos);
  analysis::CertifyOptions o;
  o.tol = 0;
  CHECK(attn::test::message_of<attn::value_error>([&] {
          analysis::certified_vertices(square_with_inside(), o);
        }).find("tol must be in") != std::string::npos);
  const auto empty = analysis::certified_vertices(Tensor<double>({0, 5}));
  CHECK(empty.vertices.empty());
}

// ---- theorems -------------------------------------------------------------------------------

namespace {

// Keys in R^d: Gaussian, with every third key shrunk towards the mean so that many are interior.
Tensor<double> keys_with_interior(index_t n, index_t d, attn::Rng& rng) {
  Tensor<double> k = attn::test::gaussian_keys(n, d, rng);
  for (index_t i = 0; i < n; i += 3)
    for (index_t e = 0; e < d; ++e) k(i, e) *= 0.25;
  return k;
}

// Checks the stolen-attention bound for interior key i at query q under score s: some vertex has
// at least its weight, and its weight is at most 1/2. Returns α_i.
template <class Score>
double check_bound(const Tensor<double>& k, const analysis::CertifiedVertices& c, index_t i,
                   const std::vector<double>& q, const Score& s) {
  const std::vector<double> w = weights_of(k, q, s);
  double best_vertex = 0;
  for (const index_t v : c.vertices) best_vertex = std::max(best_vertex, w[std::size_t(v)]);
  const double wi = w[std::size_t(i)];
  REQUIRE(best_vertex >= wi * (1 - 1e-12));
  REQUIRE(wi <= 0.5 + 1e-12);
  return wi;
}

// Gradient ascent on log α_i(q) = s_i − log Σ_j exp(s_j) (concave in q for Dot and ScaledDot):
// ∇ = a (k_i − Σ_j α_j k_j), a the score's scale. Normalised steps that grow, so the iterate can
// run off to infinity where an interior key's supremum lies. Checks the bound at every step and
// returns the largest α_i seen.
template <class Score>
double adversarial_sup(const Tensor<double>& k, const analysis::CertifiedVertices& c, index_t i,
                       std::vector<double> q, const Score& s, int steps) {
  const index_t n = k.dim(0), d = k.dim(1);
  double sup = 0;
  for (int t = 0; t < steps; ++t) {
    sup = std::max(sup, check_bound(k, c, i, q, s));
    const std::vector<double> w = weights_of(k, q, s);
    std::vector<double> g(static_cast<std::size_t>(d));
    double gn = 0;
    for (index_t e = 0; e < d; ++e) {
      double mean = 0;
      for (index_t j = 0; j < n; ++j) mean += w[std::size_t(j)] * k(j, e);
      g[std::size_t(e)] = k(i, e) - mean;
      gn += g[std::size_t(e)] * g[std::size_t(e)];
    }
    if (gn == 0) break;
    const double step = 0.05 * std::pow(1.05, t) / std::sqrt(gn);
    for (index_t e = 0; e < d; ++e) q[std::size_t(e)] += step * g[std::size_t(e)];
  }
  return sup;
}

}  // namespace

TEST_CASE_TEMPLATE(
    "theorem: an interior key is outweighed by a vertex for every query, and never "
    "gets more than 1/2 (random, large-norm and adversarial queries)",
    Score, score::Dot, score::ScaledDot) {
  attn::Rng rng(21);
  double overall_sup = 0;
  for (const index_t d : {2, 3, 5}) {
    const Tensor<double> k = keys_with_interior(30, d, rng);
    const auto c = analysis::certified_vertices(k);
    require_certified(k, c);
    index_t checked = 0;
    for (index_t i = 0; i < k.dim(0); ++i) {
      if (c.is_vertex(i)) continue;
      ++checked;
      for (int r = 0; r < 100; ++r) {
        std::vector<double> q(static_cast<std::size_t>(d));
        for (double& x : q) x = rng.normal();
        check_bound(k, c, i, q, Score{});
        for (double& x : q) x *= 300;  // large norm: softmax close to an argmax
        check_bound(k, c, i, q, Score{});
      }
      // Adversarial: start at the key itself and climb log α_i.
      std::vector<double> q0(static_cast<std::size_t>(d));
      for (index_t e = 0; e < d; ++e) q0[std::size_t(e)] = k(i, e);
      overall_sup = std::max(overall_sup, adversarial_sup(k, c, i, q0, Score{}, 150));
    }
    CHECK(checked > 0);
  }
  MESSAGE("largest weight an interior key reached under adversarial queries: ", overall_sup);
  CHECK(overall_sup < 0.5);
  CHECK(overall_sup > 0.05);  // the optimisation did push: interior keys are not simply ignored
}

TEST_CASE_TEMPLATE(
    "theorem: every vertex is driven above 1 - eps by the query t w of its "
    "certificate",
    Score, score::Dot, score::ScaledDot) {
  attn::Rng rng(22);
  const double eps = 1e-6;
  for (const index_t d : {3, 8, 32}) {
    const Tensor<double> k =
        d == 32 ? attn::test::realistic_keys(120, d, rng) : keys_with_interior(60, d, rng);
    const index_t n = k.dim(0);
    const auto c = analysis::certified_vertices(k);
    require_certified(k, c);
    for (const index_t i : c.vertices) {
      const std::vector<double>& w = c.certificates[std::size_t(i)].direction;
      // margin = min_j ⟨w, k_i − k_j⟩ > 0; with q = t w every other score is below s_i by at
      // least a t margin, so α_i ≥ 1 / (1 + (n − 1) e^{−a t margin}) > 1 − eps for
      // t = log((n − 1) / eps) / (a margin), a the score's scale.
      double margin = std::numeric_limits<double>::infinity();
      for (index_t j = 0; j < n; ++j) {
        if (j == i) continue;
        double m = 0;
        for (index_t e = 0; e < d; ++e) m += w[std::size_t(e)] * (k(i, e) - k(j, e));
        margin = std::min(margin, m);
      }
      REQUIRE(margin > 0);
      const double a = Score{}.alpha(d);
      const double t = std::log(double(n - 1) / eps) / (a * margin) * 1.01;
      std::vector<double> q(w);
      for (double& x : q) x *= t;
      CHECK(weights_of(k, q, Score{})[std::size_t(i)] > 1 - eps);
    }
  }
}

TEST_CASE("theorem: under NegSqEuclidean an interior key can take the largest weight") {
  // The square with its centre: the centre is interior, yet the query at the centre gives it the
  // largest weight (score 0 against −0.5 for each corner) — and any weight up to 1 as the square
  // grows, which no dot-product query can do.
  const Tensor<double> k = square_with_inside();
  const auto c = analysis::certified_vertices(k);
  REQUIRE_FALSE(c.is_vertex(4));
  const std::vector<double> centre{0.5, 0.5};
  std::vector<double> w = weights_of(k, centre, score::NegSqEuclidean{});
  for (const index_t v : c.vertices) CHECK(w[4] > w[std::size_t(v)]);
  Tensor<double> big = k;
  for (double& x : big) x *= 20;  // same hull, same interior key, far-apart keys
  w = weights_of(big, std::vector<double>{10, 10}, score::NegSqEuclidean{});
  CHECK(w[4] > 0.99);
  // The dot-product scores at the same query leave the centre below a corner.
  const std::vector<double> wd = weights_of(k, centre, score::Dot{});
  CHECK(*std::max_element(wd.begin(), wd.begin() + 4) >= wd[4]);
}

TEST_CASE("theorem: stolen probability at the output layer (interior output embeddings)") {
  // An output layer p = softmax(E h) over a vocabulary of 40 tokens, E [40, 4]: the embeddings of
  // the 10 most frequent tokens are large, the rest shrunk (norm grows with frequency, as in
  // Demeter et al.). For every interior token no hidden state h gives it more probability than
  // some vertex token, nor more than 1/2.
  attn::Rng rng(23);
  Tensor<double> e = attn::test::gaussian_keys(40, 4, rng);
  for (index_t t = 10; t < 40; ++t)
    for (index_t c = 0; c < 4; ++c) e(t, c) *= 0.3;
  const auto c = analysis::certified_vertices(e);
  require_certified(e, c);
  index_t interior = 0;
  double sup = 0;
  for (index_t t = 0; t < 40; ++t) {
    if (c.is_vertex(t)) continue;
    ++interior;
    std::vector<double> h(4);
    for (index_t x = 0; x < 4; ++x) h[std::size_t(x)] = e(t, x);
    sup = std::max(sup, adversarial_sup(e, c, t, h, score::Dot{}, 120));
  }
  CHECK(interior >= 10);
  MESSAGE("largest probability of an interior output token: ", sup);
  CHECK(sup < 0.5);
}

// ---- stolen-attention statistics -------------------------------------------------------------

TEST_CASE("stolen_stats: records from the probe, vertex / interior maxima, angles and norms") {
  attn::Rng rng(31);
  attn::MultiHeadConfig mc;
  mc.d_model = 12;
  mc.heads = 4;  // d_h = 3
  mc.init_std = 0.5;
  attn::MultiHeadAttention<score::ScaledDot, attn::kernel::Softmax, attn::mask::Causal> mha(mc);
  mha.training = false;
  const index_t B = 2, T = 24;
  const Tensor<float> x = attn::cast<float>(Tensor<double>::randn({B, T, 12}, rng));
  Tensor<std::int32_t> tokens({B, T});
  for (index_t i = 0; i < tokens.numel(); ++i) tokens[i] = std::int32_t(i % 7);
  std::vector<analysis::HeadRecord> records;
  mha.probe = [&](attn::AttentionStep<float>& s) {
    for (index_t b = 0; b < B; ++b)
      for (index_t h = 0; h < 4; ++h)
        records.push_back(analysis::head_record(s, tokens, b, h, T - 1));
  };
  attn::Tape<float> tape;
  attn::NoGrad<float> no_grad(tape);
  mha(tape.leaf(x), attn::mask::Causal{});
  REQUIRE(records.size() == 8);
  const analysis::StolenStats stats = analysis::stolen_stats(records);
  REQUIRE(stats.contexts.size() == 8);
  for (std::size_t r = 0; r < records.size(); ++r) {
    const auto& rec = records[r];
    const auto& row = stats.contexts[r];
    CHECK(row.context == T);
    CHECK(std::accumulate(rec.weights.begin(), rec.weights.end(), 0.0) ==
          doctest::Approx(1.0).epsilon(1e-5));
    const auto cv = analysis::certified_vertices(rec.keys);
    CHECK(row.vertices == index_t(cv.vertices.size()));
    CHECK(row.vertex_proportion == doctest::Approx(double(cv.vertices.size()) / double(T)));
    // Under a dot-product score the largest weight always sits on a vertex (a linear function's
    // maximum over the keys is attained at a vertex of their hull).
    if (row.vertices < T) CHECK(row.max_weight_vertex >= row.max_weight_interior);
    CHECK(row.angle_variance >= 0);
    CHECK(row.norm_variance >= 0);
  }
  // Token statistics cover the 7 ids and count every key of every record once.
  index_t seen = 0;
  for (const auto& [id, t] : stats.tokens) seen += t.as_vertex + t.as_interior;
  CHECK(stats.tokens.size() == 7);
  CHECK(seen == 8 * T);
}

TEST_CASE("stolen_stats: statistics of a hand-made record") {
  analysis::HeadRecord r;
  r.query = {1, 0};
  // Keys at angles 0 and π/2 with norms 1 and 3, and an interior key (0.2, 0.2) (norm √0.08).
  r.keys = Tensor<double>({4, 2}, {1, 0, 0, 3, 0, 0, 0.2, 0.2});
  r.weights = {0.5, 0.2, 0.1, 0.2};
  r.tokens = {5, 6, 5, 9};
  analysis::StolenStats s;
  const auto& row = s.add(r);
  CHECK(row.vertices == 3);
  CHECK(row.is_vertex == std::vector<char>{1, 1, 1, 0});
  CHECK(row.max_weight_vertex == 0.5);
  CHECK(row.max_weight_interior == 0.2);
  // Angles 0, π/2 and π/4 (the zero key has none): variance of {0, π/2, π/4} = π²/24.
  CHECK(row.angle_variance == doctest::Approx(std::acos(-1.0) * std::acos(-1.0) / 24));
  const double n3 = std::sqrt(0.08), mean = (1 + 3 + 0 + n3) / 4;
  const double var = ((1 - mean) * (1 - mean) + (3 - mean) * (3 - mean) + mean * mean +
                      (n3 - mean) * (n3 - mean)) /
                     4;
  CHECK(row.norm_variance == doctest::Approx(var));
  CHECK(s.tokens.at(5).as_vertex == 2);
  CHECK(s.tokens.at(5).max_weight_vertex == 0.5);
  CHECK(std::isnan(s.tokens.at(5).max_weight_interior));
  CHECK(s.tokens.at(9).as_interior == 1);
  CHECK(s.tokens.at(9).max_weight_interior == 0.2);
  r.tokens.pop_back();
  CHECK(attn::test::message_of<attn::shape_error>([&] { s.add(r); }).find("do not fit") !=
        std::string::npos);
}
