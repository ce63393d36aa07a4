// Every claim of examples/exercises as a test, computed by the same code (exercises.hpp): copying,
// an average of two, one head against two under noisy keys, key-query-value separation and the
// √d scaling. Each check would fail if the claim were false (negative controls included).
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "../../examples/exercises/exercises.hpp"

using exercises::index_t;
using exercises::Matrix;
using exercises::Vector;

TEST_CASE("exercises: attend computes softmax(K q) and the weighted values") {
  attn::Rng rng(3);
  const Matrix keys = exercises::gaussian_rows(4, 3, rng),
               values = exercises::gaussian_rows(4, 2, rng);
  const Matrix q = exercises::gaussian_rows(2, 3, rng);
  const exercises::Attended a = exercises::attend(q, keys, values);
  for (index_t r = 0; r < 2; ++r) {
    Vector e(4);
    for (index_t i = 0; i < 4; ++i) e[i] = std::exp(keys.row(i).dot(q.row(r)));
    e /= e.sum();
    for (index_t i = 0; i < 4; ++i) CHECK(a.weights(r, i) == doctest::Approx(e[i]).epsilon(1e-12));
    const Vector c = values.transpose() * e;
    for (index_t t = 0; t < 2; ++t) CHECK(a.out(r, t) == doctest::Approx(c[t]).epsilon(1e-12));
  }
  CHECK_THROWS_AS(exercises::attend(q, values, values), attn::shape_error);
}

TEST_CASE("exercises 1: a dominant key copies its value, with the exponential bound") {
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    attn::Rng rng(seed);
    const Matrix keys = exercises::gaussian_rows(6, 8, rng),
                 values = exercises::gaussian_rows(6, 8, rng);
    index_t j = 0;  // the key of largest norm: k_iᵀk_j ≤ ‖k_i‖‖k_j‖ < ‖k_j‖², so its gap is > 0
    for (index_t i = 1; i < 6; ++i)
      if (keys.row(i).norm() > keys.row(j).norm()) j = i;
    REQUIRE(exercises::copy_gap(keys, j) > 0);
    const auto rows = exercises::copying(keys, values, j, {0, 0.1, 0.2, 0.5, 1, 2, 4});
    for (std::size_t r = 0; r < rows.size(); ++r) {
      INFO("seed " << seed << " beta " << rows[r].beta);
      CHECK(rows[r].error <= rows[r].bound * (1 + 1e-9) + 1e-12);
      if (r > 0) CHECK(rows[r].weight > rows[r - 1].weight);  // α_j grows with β
    }
    CHECK(rows.front().weight == doctest::Approx(1.0 / 6));  // β = 0: uniform
    CHECK(rows.back().error < 1e-6);
  }
}

TEST_CASE("exercises 1: without a positive gap the query copies the other value") {
  // k₂ = 2 k₁: q = β k₁ scores k₂ twice as high as k₁ itself, so c → v₂, not v₁.
  Matrix keys(3, 3), values(3, 3);
  keys << 1, 0, 0, 2, 0, 0, 0, 1, 0;
  values << 1, 0, 0, 0, 1, 0, 0, 0, 1;
  CHECK(exercises::copy_gap(keys, 0) < 0);
  const auto rows = exercises::copying(keys, values, 0, {20});
  CHECK(rows[0].weight < 1e-6);
  CHECK(rows[0].error == doctest::Approx(std::sqrt(2.0)).epsilon(1e-6));  // c ≈ v₂
}

TEST_CASE("exercises 2: orthonormal keys and q = β(k_a + k_b) average two values") {
  attn::Rng rng(7);
  const index_t n = 5;
  const Matrix keys = exercises::orthonormal_rows(n, 8, rng);
  CHECK((keys * keys.transpose() - Matrix::Identity(n, n)).cwiseAbs().maxCoeff() < 1e-12);
  const Matrix values = exercises::gaussian_rows(n, 8, rng);
  const auto rows = exercises::average_of_two(keys, values, 1, 3, {0, 1, 2, 4, 8, 16});
  for (const auto& r : rows) {
    INFO("beta " << r.beta);
    CHECK(r.weight_a == doctest::Approx(r.weight_b).epsilon(1e-14));
    const double exact = std::exp(r.beta) / (2 * std::exp(r.beta) + double(n - 2));
    CHECK(r.weight_a == doctest::Approx(exact).epsilon(1e-12));
    CHECK(r.error <= r.bound * (1 + 1e-9) + 1e-12);
  }
  CHECK(rows.back().error < 1e-6);
  CHECK(rows.back().error < rows.front().error * 1e-6);
}

namespace {

struct Noisy {
  Matrix means, values;
  double tol;
};

Noisy noisy(attn::Rng& rng) {
  Noisy s{exercises::orthonormal_rows(5, 8, rng), exercises::gaussian_rows(5, 8, rng), 0};
  s.tol = 0.1 * (s.values.row(0) - s.values.row(1)).norm();
  return s;
}

double fraction(const std::vector<exercises::NoisySample>& v, double lo, double hi) {
  int n = 0;
  for (const auto& s : v) n += (s.share_a >= lo && s.share_a <= hi) ? 1 : 0;
  return double(n) / double(v.size());
}

}  // namespace

TEST_CASE("exercises 3: one head averages under tiny noise but swings when |k_a| varies") {
  attn::Rng rng(11);
  const Noisy s = noisy(rng);
  const double beta = 20;
  const auto calm = exercises::one_head(exercises::noisy_keys(s.means, s.values, 0, 1, 1e-6, false),
                                        beta, 1000, rng);
  for (const auto& x : calm) REQUIRE(std::abs(x.share_a - 0.5) < 0.05);
  CHECK(exercises::fraction_near_average(calm, s.tol) == 1.0);

  const auto swing = exercises::one_head(exercises::noisy_keys(s.means, s.values, 0, 1, 1e-6, true),
                                         beta, 2000, rng);
  // α_a/α_b = e^{β(γ−1)}, γ ~ N(1, ½): |t − ½| < 0.4 needs |γ − 1| < ln 9 / β ≈ 0.11 (P ≈ 0.12).
  CHECK(fraction(swing, 0.0, 0.1) > 0.35);  // c ≈ v_b (γ < 1), about 44%
  CHECK(fraction(swing, 0.9, 1.0) > 0.35);  // c ≈ v_a (γ > 1), about 44%
  CHECK(exercises::fraction_near_average(swing, s.tol) < 0.1);
  const auto h = exercises::share_histogram(swing, 10, false);
  int total = 0;
  for (const int c : h) total += c;
  CHECK(total == 2000);
  CHECK(h.front() + h.back() > 4 * (total - h.front() - h.back()));
}

TEST_CASE("exercises 4: two heads keep the average under the same perturbation") {
  attn::Rng rng(13);
  const Noisy s = noisy(rng);
  const auto nk = exercises::noisy_keys(s.means, s.values, 0, 1, 1e-6, true);
  for (const double beta : {20.0, 50.0}) {
    INFO("beta " << beta);
    const auto one = exercises::one_head(nk, beta, 2000, rng);
    const auto two = exercises::two_heads(nk, beta, 2000, rng);
    const double one_near = exercises::fraction_near_average(one, s.tol);
    const double two_near = exercises::fraction_near_average(two, s.tol);
    CHECK(one_near < 0.1);
    CHECK(two_near > 0.9);  // misses only where q₁·k_a ≈ 0 (γ near 0)
  }
}

TEST_CASE("exercises 5: plain self-attention cannot reach u_b; K, Q, V projections can") {
  attn::Rng rng(17);
  const double beta = 4;
  const exercises::Kqv e = exercises::kqv_setup(8, beta, rng);
  const Vector ua = e.u.row(0).transpose(), ub = e.u.row(1).transpose(),
               uc = e.u.row(2).transpose();

  const auto plain = exercises::plain_self_attention(e.x);
  CHECK((plain.out.row(1).transpose() - ua).norm() < 1e-5 * beta);  // c₂ ≈ x₂ = u_a

  // The bound: every convex combination of x₁, x₂, x₃ is at least β√(2/5) from u_b, attained
  // at α = (2/5, 1/5, 2/5). Random weights (what any query could produce) respect it.
  const double bound = exercises::plain_distance_bound(beta);
  const Vector best = (0.4 * e.x.row(0) + 0.2 * e.x.row(1) + 0.4 * e.x.row(2)).transpose();
  CHECK((best - ub).norm() == doctest::Approx(bound).epsilon(1e-12));
  for (int t = 0; t < 2000; ++t) {
    const Matrix q = exercises::gaussian_rows(1, 8, rng) * rng.uniform(0, 3);
    const exercises::Attended a = exercises::attend(q, e.x, e.x);
    REQUIRE((a.out.row(0).transpose() - ub).norm() >= bound * (1 - 1e-12));
  }

  // The construction: v₁ = u_b, v₃ = u_b − u_c exactly; c₂ ≈ u_b and c₁ ≈ u_b − u_c.
  const Matrix v = e.x * e.V.transpose();
  CHECK((v.row(0).transpose() - ub).norm() < 1e-12 * beta);
  CHECK((v.row(2).transpose() - (ub - uc)).norm() < 1e-12 * beta);
  const auto sep = exercises::kqv_self_attention(e);
  // The other weights are ≈ e^{−β²} each: at β = 4, |error| ≲ 2 e^{−16} · 2β ≈ 2e-6.
  CHECK((sep.out.row(1).transpose() - ub).norm() < 1e-5);
  CHECK((sep.out.row(0).transpose() - (ub - uc)).norm() < 1e-5);
  CHECK(sep.weights(1, 0) > 1 - 1e-6);
  CHECK(sep.weights(0, 2) > 1 - 1e-6);
}

TEST_CASE("exercises 6: Var(q·k) = d, softmax saturates, its gradient vanishes without 1/√d") {
  attn::Rng rng(19);
  std::vector<exercises::ScalingRow> rows;
  for (const index_t d : {16, 256, 1024}) rows.push_back(exercises::scaling(d, 16, 300, rng));
  for (const auto& r : rows) {
    INFO("d " << r.d);
    CHECK(r.scaled_variance == doctest::Approx(1.0).epsilon(0.1));  // 4800 samples: ±3%
    CHECK(r.scaled_max_weight < 0.35);
    CHECK(r.scaled_grad == doctest::Approx(rows.front().scaled_grad).epsilon(0.2));
  }
  CHECK(rows.back().max_weight > 0.9);
  CHECK(rows.back().grad < 0.3 * rows.back().scaled_grad);
  CHECK(rows[0].grad > rows[1].grad);
  CHECK(rows[1].grad > rows[2].grad);
}

TEST_CASE("exercises 6: the tape's softmax gradient is (diag(α) − ααᵀ) g") {
  attn::Rng rng(23);
  attn::Tape<double> tape;
  const auto s0 = attn::Tensor<double>::randn({1, 7}, rng, 0, 3);
  const auto g0 = attn::Tensor<double>::randn({1, 7}, rng);
  const attn::Var<double> s = tape.leaf(s0, true);
  const attn::Var<double> alpha = attn::softmax(s);
  tape.backward(attn::sum(alpha * tape.leaf(g0)));
  double ag = 0;
  for (index_t i = 0; i < 7; ++i) ag += alpha.value()[i] * g0[i];
  for (index_t i = 0; i < 7; ++i)
    CHECK(s.grad()[i] == doctest::Approx(alpha.value()[i] * (g0[i] - ag)).epsilon(1e-12));
}
