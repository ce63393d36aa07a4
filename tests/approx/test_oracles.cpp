// approx/ per-query oracles: the value-aware study's worked example, value_aware_1
// against brute force and the orthogonal special case, Carathéodory's support and exactness on
// random and degenerate inputs up to L = 4096, value_aware_r never worse than top_r and
// value_aware_1, top_r and sliding_window_r against their definitions and the reference
// attention, and the errors on bad input.
#include <doctest/doctest.h>

#include <Eigen/QR>
#include <algorithm>
#include <attn/approx/approx.hpp>
#include <attn/attention/reference.hpp>
#include <cmath>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../test_util.hpp"

using attn::index_t;
using attn::Rng;
using attn::Tensor;
namespace approx = attn::approx;

namespace {

struct Instance {
  Tensor<double> v;           // [L, d]
  std::vector<double> alpha;  // [L], sums to 1
  attn::ConstMatrixMap<double> values() const { return {v.data(), v.shape()[0], v.shape()[1]}; }
  std::span<const double> weights() const { return alpha; }
  index_t length() const { return v.shape()[0]; }
  index_t dim() const { return v.shape()[1]; }
};

// Softmax weights of N(0, spread²) scores: spread 0 is uniform, large spreads are peaked.
std::vector<double> softmax_weights(index_t n, double spread, Rng& rng) {
  std::vector<double> a(static_cast<std::size_t>(n));
  double z = 0;
  for (double& x : a) z += (x = std::exp(spread * rng.normal()));
  for (double& x : a) x /= z;
  return a;
}

Instance random_instance(index_t L, index_t d, double spread, Rng& rng) {
  return {Tensor<double>::randn({L, d}, rng), softmax_weights(L, spread, rng)};
}

// ‖o − v_i‖² by its definition.
double distance2(const Instance& in, index_t i) {
  double e = 0;
  for (index_t c = 0; c < in.dim(); ++c) {
    double o = 0;
    for (index_t j = 0; j < in.length(); ++j)
      o += in.alpha[static_cast<std::size_t>(j)] * in.v(j, c);
    e += (o - in.v(i, c)) * (o - in.v(i, c));
  }
  return e;
}

double max_norm(const Instance& in) {
  return in.values().rowwise().norm().maxCoeff();
}

// The checks every Carathéodory answer must pass: at most d + 1 distinct keys, all with α > 0,
// convex weights, and output error <= 1e-9 · (largest value norm).
void check_caratheodory(const Instance& in, const char* what) {
  INFO(what << ": L = " << in.length() << ", d = " << in.dim());
  const approx::Sparse s = approx::caratheodory(in.weights(), in.values());
  CHECK(s.size() >= 1);
  CHECK(s.size() <= in.dim() + 1);
  std::vector<index_t> idx = s.index;
  std::sort(idx.begin(), idx.end());
  CHECK(std::adjacent_find(idx.begin(), idx.end()) == idx.end());
  double sum = 0;
  for (std::size_t k = 0; k < s.index.size(); ++k) {
    CHECK(s.weight[k] >= 0);
    CHECK(in.alpha[static_cast<std::size_t>(s.index[k])] > 0);
    sum += s.weight[k];
  }
  CHECK(std::abs(sum - 1) < 1e-12);
  const double err = std::sqrt(approx::squared_error(s, in.weights(), in.values()));
  const double scale = max_norm(in);
  INFO("error " << err << ", scale " << scale << ", support " << s.size());
  CHECK(err <= 1e-9 * scale);
}

}  // namespace

TEST_CASE("value-aware study, worked example: OVA-1 picks v1, OVO-1 picks v3") {
  // v1 = (1, 0, 0), v2 = (0, 2, 0), v3 = (0, 0, 3), α = (0.25, 0.35, 0.4): o = (0.25, 0.7, 1.2).
  const Instance in{Tensor<double>({3, 3}, {1, 0, 0, 0, 2, 0, 0, 0, 3}), {0.25, 0.35, 0.4}};
  const approx::HeadValues<double> values(in.v.data(), 3, 3);
  const approx::Sparse ova = approx::value_aware_1(in.weights(), values);
  const approx::Sparse ovo = approx::top_r(in.weights(), 1);
  REQUIRE(ova.size() == 1);
  REQUIRE(ovo.size() == 1);
  CHECK(ova.index[0] == 0);
  CHECK(ovo.index[0] == 2);
  // The paper's 3.79 and 2.49, rounded from 3.7925 = 0.25² + 0.7² + 1.8² and
  // 2.4925 = 0.75² + 0.7² + 1.2².
  const double e_ovo = approx::squared_error(ovo, in.weights(), in.values());
  const double e_ova = approx::squared_error(ova, in.weights(), in.values());
  CHECK(std::abs(e_ovo - 3.79) < 0.005);
  CHECK(std::abs(e_ova - 2.49) < 0.005);
  CHECK(e_ovo == doctest::Approx(3.7925).epsilon(1e-14));
  CHECK(e_ova == doctest::Approx(2.4925).epsilon(1e-14));
  // The two rankings are exactly opposite: ‖o − v_i‖² = 2.49, 3.59, 3.79 for i = 1, 2, 3.
  CHECK(distance2(in, 0) < distance2(in, 1));
  CHECK(distance2(in, 1) < distance2(in, 2));
  // With r = d + 1 = 4 keys (here all three) the value-aware error is 0.
  CHECK(approx::squared_error(approx::caratheodory(in.weights(), in.values()), in.weights(),
                              in.values()) < 1e-28);
  // Growing v3's 3 makes OVO-1's error grow without bound, while OVA-1 stays with v1.
  double previous = 0;
  for (const double big : {3.0, 30.0, 300.0}) {
    Instance grown = in;
    grown.v(2, 2) = big;
    const approx::HeadValues<double> gv(grown.v.data(), 3, 3);
    const double e_ovo =
        approx::squared_error(approx::top_r(grown.weights(), 1), grown.weights(), grown.values());
    CHECK(e_ovo > previous);
    previous = e_ovo;
    CHECK(approx::value_aware_1(grown.weights(), gv).index[0] == 0);
  }
  CHECK(previous > 1e4);
}

TEST_CASE("value_aware_1 is argmin ||o - v_i||^2 (the Gram identity), with or without o given") {
  Rng rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const index_t L = 1 + index_t(rng.uniform_int(40)), d = 1 + index_t(rng.uniform_int(9));
    Instance in = random_instance(L, d, rng.uniform(0, 4), rng);
    // Mask some keys (weight 0): they must never be chosen, however close their value is.
    for (index_t j = 0; j < L; ++j)
      if (rng.uniform() < 0.2 && j > 0) in.alpha[static_cast<std::size_t>(j)] = 0;
    const double kept = std::accumulate(in.alpha.begin(), in.alpha.end(), 0.0);
    for (double& a : in.alpha) a /= kept;
    index_t want = -1;
    for (index_t i = 0; i < L; ++i)
      if (in.alpha[static_cast<std::size_t>(i)] > 0 &&
          (want < 0 || distance2(in, i) < distance2(in, want) - 1e-12))
        want = i;
    const approx::HeadValues<double> values(in.v.data(), L, d);
    const approx::Sparse got = approx::value_aware_1(in.weights(), values);
    REQUIRE(got.size() == 1);
    INFO("trial " << trial);
    CHECK(distance2(in, got.index[0]) <= distance2(in, want) + 1e-12);
    CHECK(in.alpha[static_cast<std::size_t>(got.index[0])] > 0);
    // Given the exact output (the model's), the same answer.
    std::vector<double> o(static_cast<std::size_t>(d), 0.0);
    for (index_t j = 0; j < L; ++j)
      for (index_t c = 0; c < d; ++c)
        o[static_cast<std::size_t>(c)] += in.alpha[static_cast<std::size_t>(j)] * in.v(j, c);
    CHECK(approx::value_aware_1(in.weights(), values, std::span<const double>(o)).index[0] ==
          got.index[0]);
  }
}

TEST_CASE(
    "value_aware_1 = argmax alpha for orthogonal values of equal norm, or when alpha_max >= 1/2") {
  Rng rng(12);
  for (int trial = 0; trial < 100; ++trial) {
    const index_t d = 2 + index_t(rng.uniform_int(15)), L = 2 + index_t(rng.uniform_int(d - 1));
    // L orthonormal directions (QR of a Gaussian matrix).
    const Eigen::MatrixXd g = Eigen::MatrixXd::NullaryExpr(d, L, [&] { return rng.normal(); });
    const Eigen::MatrixXd basis =
        Eigen::HouseholderQR<Eigen::MatrixXd>(g).householderQ() * Eigen::MatrixXd::Identity(d, L);
    const std::vector<double> alpha = softmax_weights(L, rng.uniform(0.1, 3), rng);
    const index_t argmax = index_t(std::max_element(alpha.begin(), alpha.end()) - alpha.begin());
    INFO("trial " << trial << ", L = " << L << ", d = " << d);
    // Equal norms c: argmin ‖v_i‖²(½ − α_i) = argmax α_i.
    const double c = rng.uniform(0.1, 10);
    Instance equal{Tensor<double>({L, d}), alpha};
    for (index_t i = 0; i < L; ++i)
      for (index_t k = 0; k < d; ++k) equal.v(i, k) = c * basis(k, i);
    const approx::HeadValues<double> ev(equal.v.data(), L, d);
    CHECK(approx::value_aware_1(equal.weights(), ev).index[0] == argmax);
    CHECK(approx::top_r(equal.weights(), 1).index[0] == argmax);
    // Unequal norms, but one weight >= 1/2: still argmax.
    std::vector<double> peaked = alpha;
    for (double& a : peaked) a *= 0.4 / (1 - alpha[static_cast<std::size_t>(argmax)]);
    peaked[static_cast<std::size_t>(argmax)] = 0.6;
    Instance skew{Tensor<double>({L, d}), peaked};
    for (index_t i = 0; i < L; ++i) {
      const double norm = rng.uniform(0.1, 10);
      for (index_t k = 0; k < d; ++k) skew.v(i, k) = norm * basis(k, i);
    }
    const approx::HeadValues<double> sv(skew.v.data(), L, d);
    CHECK(approx::value_aware_1(skew.weights(), sv).index[0] == argmax);
  }
}

namespace kernel_skew {

// α_i = κ(s_i) / Σ_j κ(s_j) for a kernel policy's value function.
template <class Kernel>
std::vector<double> kernel_weights(const Kernel& kappa, const std::vector<double>& scores) {
  std::vector<double> a(scores.size());
  double z = 0;
  for (std::size_t i = 0; i < a.size(); ++i) z += (a[i] = kappa.value(scores[i]));
  for (double& x : a) x /= z;
  return a;
}

double max_weight(const std::vector<double>& a) {
  return *std::max_element(a.begin(), a.end());
}
index_t arg_max(const std::vector<double>& a) {
  return index_t(std::max_element(a.begin(), a.end()) - a.begin());
}

// L orthogonal values with the given norms (rows of a random orthonormal basis, scaled).
Tensor<double> orthogonal_values(const std::vector<double>& norms, index_t d, Rng& rng) {
  const auto L = index_t(norms.size());
  const Eigen::MatrixXd g = Eigen::MatrixXd::NullaryExpr(d, L, [&] { return rng.normal(); });
  const Eigen::MatrixXd basis =
      Eigen::HouseholderQR<Eigen::MatrixXd>(g).householderQ() * Eigen::MatrixXd::Identity(d, L);
  Tensor<double> v({L, d});
  for (index_t i = 0; i < L; ++i)
    for (index_t k = 0; k < d; ++k) v(i, k) = norms[std::size_t(i)] * basis(k, i);
  return v;
}

index_t value_aware_choice(const std::vector<double>& alpha, const Tensor<double>& v) {
  const approx::HeadValues<double> hv(v.data(), v.shape()[0], v.shape()[1]);
  return approx::value_aware_1(std::span<const double>(alpha), hv).index[0];
}

// The degree-C polynomial kernel's weights for C = 1, 2, 3, 4, 8, 16, 32, 64 (attn's
// kernel::Polynomial<C>), in that order.
template <int... C>
std::vector<std::vector<double>> polynomial_weights(const std::vector<double>& scores,
                                                    std::integer_sequence<int, C...>) {
  return {kernel_weights(attn::kernel::Polynomial<C>{}, scores)...};
}
using Degrees = std::integer_sequence<int, 1, 2, 3, 4, 8, 16, 32, 64>;

}  // namespace kernel_skew

// "Value-aware Approximate Attention" (Gupta and Berant), on the choice of kernel: with
// orthogonal values the best single value is argmin_i ‖v_i‖²(½ − α_i). A degree-C polynomial
// kernel gives α_i = s_i^C / Σ_j s_j^C: at C = 0 uniform, so the choice is the shortest value,
// set by the values alone; as C grows (distinct positive scores) max α reaches ½ and the choice
// is argmax α, which ignores the values. The exponential is "more skewed" than a low-degree
// polynomial; exactly, for scores all at least C every ratio α_i / α_j (s_i > s_j) is larger under
// e^s than under s^C, since e^δ ≥ (1 + δ/C)^C ≥ (s_i / s_j)^C for δ = s_i − s_j and s_j ≥ C, so e^s
// also puts more weight on its top key. Below C the order can turn: no kernel is the most skewed
// for every set of scores.
TEST_CASE("kernel skew: degree 0 is uniform, high degrees reach argmax, e^s beats s^C above C") {
  using namespace kernel_skew;
  Rng rng(31);
  int differs_at_zero = 0, differs_at_one = 0;
  for (int trial = 0; trial < 100; ++trial) {
    const index_t L = 3 + index_t(rng.uniform_int(30)), d = L + 2;
    INFO("trial " << trial << ", L = " << L);
    // Distinct positive scores (inner products), the largest at least 10 % above the next.
    std::vector<double> scores(static_cast<std::size_t>(L));
    for (double& x : scores) x = rng.uniform(0.5, 3.0);
    std::sort(scores.begin(), scores.end());
    for (std::size_t i = 1; i < scores.size(); ++i)
      scores[i] = std::max(scores[i], 1.01 * scores[i - 1]);
    scores.back() = 1.1 * scores[scores.size() - 2];
    attn::shuffle(std::span<double>(scores), rng);  // the top key anywhere
    std::vector<double> norms(static_cast<std::size_t>(L));
    for (double& n : norms) n = rng.uniform(0.1, 10);
    const Tensor<double> v = orthogonal_values(norms, d, rng);
    const index_t shortest = index_t(std::min_element(norms.begin(), norms.end()) - norms.begin());

    // C = 0: uniform weights, and the value-aware choice is the shortest value, whatever the
    // scores; the value-oblivious one (top-1, ties to the lowest index) is key 0.
    const std::vector<double> uniform(static_cast<std::size_t>(L), 1.0 / double(L));
    CHECK(value_aware_choice(uniform, v) == shortest);
    differs_at_zero += shortest != approx::top_r(std::span<const double>(uniform), 1).index[0];

    // C growing: the top weight never falls, and from the degree at which it reaches ½ on the
    // value-aware choice is argmax α for these values of unequal norms.
    const auto by_degree = polynomial_weights(scores, Degrees{});
    for (std::size_t c = 1; c < by_degree.size(); ++c)
      CHECK(max_weight(by_degree[c]) >= max_weight(by_degree[c - 1]) - 1e-15);
    CHECK(max_weight(by_degree.back()) >= 0.5);  // 1.1^64 > 400 > L
    for (const std::vector<double>& a : by_degree)
      if (max_weight(a) >= 0.5) CHECK(value_aware_choice(a, v) == arg_max(a));
    // The control: at C = 1 the top weight is below ½ and values can decide. With the top key's
    // value 10 times longer than the rest, the value-aware choice is not argmax α.
    const std::vector<double>& linear = by_degree.front();
    REQUIRE(max_weight(linear) < 0.5);
    std::vector<double> long_top(static_cast<std::size_t>(L), 1.0);
    long_top[std::size_t(arg_max(linear))] = 10.0;
    const Tensor<double> w = orthogonal_values(long_top, d, rng);
    differs_at_one += value_aware_choice(linear, w) != arg_max(linear);
  }
  CHECK(differs_at_zero > 75);  // the shortest of 3 to 32 random norms is key 0 about 1 in 12
  CHECK(differs_at_one == 100);

  // e^s against s^C for scores all at least C: every pairwise ratio, and so the top weight.
  for (int trial = 0; trial < 200; ++trial) {
    const int C = trial % 2 == 0 ? 2 : 8;
    const index_t L = 2 + index_t(rng.uniform_int(40));
    std::vector<double> scores(static_cast<std::size_t>(L));
    for (double& x : scores) x = C + rng.uniform(0, 5);
    const std::vector<double> e = kernel_weights(attn::kernel::Softmax{}, scores);
    const std::vector<double> p = C == 2 ? kernel_weights(attn::kernel::Polynomial<2>{}, scores)
                                         : kernel_weights(attn::kernel::Polynomial<8>{}, scores);
    INFO("trial " << trial << ", C = " << C);
    for (std::size_t i = 0; i < scores.size(); ++i)
      for (std::size_t j = 0; j < scores.size(); ++j)
        if (scores[i] > scores[j]) CHECK(e[i] / e[j] >= p[i] / p[j] * (1 - 1e-12));
    CHECK(max_weight(e) >= max_weight(p) * (1 - 1e-12));
  }
  // The control: below C the polynomial can be the more skewed (scores 1 and 2, C = 8: 256 to 1
  // against e to 1), so "the exponential is the most skewed" needs the condition.
  const std::vector<double> low{1.0, 2.0};
  CHECK(max_weight(kernel_weights(attn::kernel::Polynomial<8>{}, low)) >
        max_weight(kernel_weights(attn::kernel::Softmax{}, low)) + 0.2);
}

TEST_CASE("caratheodory: at most d + 1 values, the same output, on random inputs up to L = 4096") {
  Rng rng(13);
  for (const index_t d : {1, 2, 3, 8, 64})
    for (const index_t L : {d + 2, index_t(100), index_t(700)})
      for (const double spread : {0.0, 1.0, 6.0}) {
        const Instance in = random_instance(L, d, spread, rng);
        check_caratheodory(in, "random");
      }
  check_caratheodory(random_instance(4096, 64, 1.0, rng), "random, L = 4096, d = 64");
  check_caratheodory(random_instance(4096, 8, 3.0, rng), "random, L = 4096, d = 8");
  // Values far from the origin and weights down to 1e-30 of the largest.
  Instance far = random_instance(500, 16, 15.0, rng);
  for (index_t i = 0; i < far.v.numel(); ++i) far.v[i] = 1e6 + far.v[i];
  check_caratheodory(far, "offset 1e6, weights over 30 orders of magnitude");
  // Fewer points than d + 1: returned as they are.
  const Instance few = random_instance(5, 8, 1.0, rng);
  CHECK(approx::caratheodory(few.weights(), few.values()).size() == 5);
}

TEST_CASE("caratheodory on degenerate inputs: repeated, collinear, low-rank, identical points") {
  Rng rng(14);
  // Repeated: 40 distinct points in R^16, each repeated up to 50 times (L = 1000 .. 4096).
  for (const index_t L : {index_t(1000), index_t(4096)}) {
    const Tensor<double> base = Tensor<double>::randn({40, 16}, rng);
    Instance rep{Tensor<double>({L, 16}), softmax_weights(L, 1.0, rng)};
    for (index_t i = 0; i < L; ++i)
      for (index_t c = 0; c < 16; ++c) rep.v(i, c) = base(index_t(rng.uniform_int(40)), c);
    check_caratheodory(rep, "repeated");
  }
  // Collinear: v_i = a + t_i b in R^32, so any combination is one of two points' (support <= 2).
  for (const index_t L : {index_t(50), index_t(4096)}) {
    const Tensor<double> ab = Tensor<double>::randn({2, 32}, rng);
    Instance line{Tensor<double>({L, 32}), softmax_weights(L, 2.0, rng)};
    for (index_t i = 0; i < L; ++i) {
      const double t = rng.uniform(-3, 3);
      for (index_t c = 0; c < 32; ++c) line.v(i, c) = ab(0, c) + t * ab(1, c);
    }
    check_caratheodory(line, "collinear");
    CHECK(approx::caratheodory(line.weights(), line.values()).size() <= 2);
  }
  // Low rank: points on a 3-dimensional affine subspace of R^24: support <= 4.
  {
    const Tensor<double> frame = Tensor<double>::randn({4, 24}, rng);
    Instance flat{Tensor<double>({3000, 24}), softmax_weights(3000, 1.0, rng)};
    for (index_t i = 0; i < 3000; ++i) {
      const double a = rng.normal(), b = rng.normal(), c = rng.normal();
      for (index_t k = 0; k < 24; ++k)
        flat.v(i, k) = frame(0, k) + a * frame(1, k) + b * frame(2, k) + c * frame(3, k);
    }
    check_caratheodory(flat, "3-dimensional affine subspace");
    CHECK(approx::caratheodory(flat.weights(), flat.values()).size() <= 4);
  }
  // Identical points: one of them.
  Instance same{Tensor<double>({300, 5}, 0.5), softmax_weights(300, 1.0, rng)};
  CHECK(approx::caratheodory(same.weights(), same.values()).size() == 1);
  check_caratheodory(same, "identical");
  // Points on the vertices of a simplex, each repeated, plus their centroid.
  Instance simplex{Tensor<double>({200, 4}), softmax_weights(200, 0.5, rng)};
  for (index_t i = 0; i < 200; ++i)
    for (index_t c = 0; c < 4; ++c) simplex.v(i, c) = (i % 6 == c) ? 1.0 : (i % 6 >= 4 ? 0.2 : 0.0);
  check_caratheodory(simplex, "simplex vertices with repeats");
}

TEST_CASE("caratheodory with float values: exact to the float inputs, computed in double") {
  Rng rng(15);
  const index_t L = 2000, d = 32;
  const Tensor<float> v = Tensor<float>::randn({L, d}, rng);
  std::vector<float> alpha(static_cast<std::size_t>(L));
  for (float& a : alpha) a = float(std::exp(2 * rng.normal()));
  const attn::ConstMatrixMap<float> vm(v.data(), L, d);
  const approx::Sparse s = approx::caratheodory(std::span<const float>(alpha), vm);
  CHECK(s.size() <= d + 1);
  const double err = std::sqrt(approx::squared_error(s, std::span<const float>(alpha), vm));
  CHECK(err <= 1e-9 * vm.cast<double>().rowwise().norm().maxCoeff());
}

TEST_CASE("value_aware_r (heuristic): never worse than top_r or value_aware_1, at most r keys") {
  Rng rng(16);
  int better_than_both = 0, trials = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const index_t d = 2 + index_t(rng.uniform_int(15)), L = d + 2 + index_t(rng.uniform_int(60));
    const Instance in = random_instance(L, d, rng.uniform(0, 4), rng);
    const approx::HeadValues<double> values(in.v.data(), L, d);
    const double e1 = approx::squared_error(approx::value_aware_1(in.weights(), values),
                                            in.weights(), in.values());
    for (const index_t r : {index_t(1), index_t(2), d / 2 + 1, d, d + 1, L}) {
      const approx::Sparse s = approx::value_aware_r(in.weights(), values, r);
      const double e = approx::squared_error(s, in.weights(), in.values());
      const double e_top =
          approx::squared_error(approx::top_r(in.weights(), r), in.weights(), in.values());
      INFO("trial " << trial << ", L = " << L << ", d = " << d << ", r = " << r);
      CHECK(s.size() <= r);
      CHECK(e <= e_top + 1e-15);
      CHECK(e <= e1 + 1e-15);
      double sum = 0;
      for (const double w : s.weight) {
        CHECK(w > 0);
        sum += w;
      }
      CHECK(std::abs(sum - 1) < 1e-9);
      if (r > d) CHECK(std::sqrt(e) <= 1e-9 * max_norm(in));  // Carathéodory: exact
      if (r > 1 && r <= d) {
        ++trials;
        if (e < 0.999 * std::min(e_top, e1)) ++better_than_both;
      }
    }
  }
  // The refits and the greedy search do find better combinations, in most instances.
  MESSAGE("value_aware_r beat both top_r and value_aware_1 in " << better_than_both << " of "
                                                                << trials << " instances");
  CHECK(better_than_both > trials / 2);
}

TEST_CASE("top_r: the r largest weights (ties to the lower index), renormalised; r >= L is exact") {
  const std::vector<double> a{0.1, 0.3, 0.0, 0.3, 0.2, 0.1};
  const approx::Sparse s2 = approx::top_r(std::span<const double>(a), 2);
  CHECK(s2.index == std::vector<index_t>{1, 3});
  CHECK(s2.weight[0] == doctest::Approx(0.5));
  const approx::Sparse s3 = approx::top_r(std::span<const double>(a), 3);
  CHECK(s3.index == std::vector<index_t>{1, 3, 4});
  const approx::Sparse s5 = approx::top_r(std::span<const double>(a), 5);
  CHECK(s5.index == std::vector<index_t>{0, 1, 3, 4, 5});  // the masked key 2 is never used
  CHECK(approx::top_r(std::span<const double>(a), 100).size() == 5);
  const std::vector<double> zero(4, 0.0);
  CHECK(approx::top_r(std::span<const double>(zero), 2).size() == 0);
  // Unnormalised weights give the same combination.
  std::vector<double> scaled = a;
  for (double& x : scaled) x *= 7;
  CHECK(approx::top_r(std::span<const double>(scaled), 2).weight == s2.weight);
}

TEST_CASE("sliding_window_r equals attention under mask::SlidingWindow (the reference)") {
  Rng rng(17);
  const index_t T = 9, D = 4;
  const Tensor<double> q = Tensor<double>::randn({1, 1, T, D}, rng),
                       k = Tensor<double>::randn({1, 1, T, D}, rng),
                       v = Tensor<double>::randn({1, 1, T, D}, rng);
  const auto exact = attn::reference_attention(q, k, v, attn::score::ScaledDot{},
                                               attn::kernel::Softmax{}, attn::mask::None{});
  const attn::ConstMatrixMap<double> vm(v.data(), T, D);
  for (const index_t r : {1, 2, 3, 5}) {
    const auto causal =
        attn::reference_attention(q, k, v, attn::score::ScaledDot{}, attn::kernel::Softmax{},
                                  attn::mask::SlidingWindow::causal(r));
    const auto centered =
        attn::reference_attention(q, k, v, attn::score::ScaledDot{}, attn::kernel::Softmax{},
                                  attn::mask::SlidingWindow{r / 2, r - r / 2 - 1});
    for (index_t i = 0; i < T; ++i) {
      const std::span<const double> row(exact.weights.data() + i * T, std::size_t(T));
      double got[D], got_c[D];
      approx::combine(approx::sliding_window_r(row, i, r, approx::Window::causal), vm, got);
      approx::combine(approx::sliding_window_r(row, i, r, approx::Window::centered), vm, got_c);
      for (index_t c = 0; c < D; ++c) {
        CHECK(got[c] == doctest::Approx(causal.out(0, 0, i, c)).epsilon(1e-12));
        CHECK(got_c[c] == doctest::Approx(centered.out(0, 0, i, c)).epsilon(1e-12));
      }
    }
  }
}

TEST_CASE("approx: bad input throws, naming the function") {
  const Tensor<double> v({3, 2}, {1, 0, 0, 1, 1, 1});
  const approx::HeadValues<double> values(v.data(), 3, 2);
  const std::vector<double> negative{0.5, -0.1, 0.6}, short_row{0.5, 0.5},
      nan_row{0.5, std::nan(""), 0.5}, ok{0.2, 0.3, 0.5};
  using attn::test::message_of;
  CHECK(message_of<attn::value_error>([&] {
          approx::value_aware_1(std::span<const double>(negative), values);
        }).find("value_aware_1: attention weights must be finite and >= 0") != std::string::npos);
  CHECK(message_of<attn::value_error>([&] {
          approx::caratheodory(std::span<const double>(nan_row), values.v);
        }).find("caratheodory") != std::string::npos);
  CHECK(message_of<attn::shape_error>([&] {
          approx::value_aware_r(std::span<const double>(short_row), values, 2);
        }).find("value_aware_r: 2 weights for 3 values") != std::string::npos);
  CHECK(message_of<attn::value_error>([&] {
          approx::top_r(std::span<const double>(ok), 0);
        }).find("top_r: r must be >= 1") != std::string::npos);
  CHECK(message_of<attn::value_error>([&] {
          approx::sliding_window_r(std::span<const double>(ok), 3, 2);
        }).find("sliding_window_r: position 3") != std::string::npos);
  const std::vector<double> o3{0, 0, 0};
  CHECK(message_of<attn::shape_error>([&] {
          approx::value_aware_1(std::span<const double>(ok), values, std::span<const double>(o3));
        }).find("value_aware_1: the output has 3 entries") != std::string::npos);
  // A row with no weight gives the empty combination (output 0), as attention does.
  const std::vector<double> zero(3, 0.0);
  CHECK(approx::value_aware_1(std::span<const double>(zero), values).size() == 0);
  CHECK(approx::caratheodory(std::span<const double>(zero), values.v).size() == 0);
  CHECK(approx::value_aware_r(std::span<const double>(zero), values, 2).size() == 0);
}
