// Attention paths against the reference: the feature map kernels.
#include "paths_fixture.hpp"

#include <string>

using namespace attn::test;

TEST_CASE_TEMPLATE("feature-map kernels: linear path = quadratic formula, every mask", T, float,
                   double) {
  check_all_masks<score::ScaledDot, kernel::EluPlusOne, T>();
  check_all_masks<score::Dot, kernel::Relu, T>();
  check_all_masks<score::ScaledDot, kernel::RandomFeatures, T>();
  check_all_masks<score::ScaledDot, kernel::TaylorExp, T>();
  // Linear path with the padded keys dropped; and (double only) a composition on the
  // materialised path.
  check_combination<score::ScaledDot, kernel::EluPlusOne, LeftPaddedCausal, T>();
  if constexpr (std::is_same_v<T, double>)
    check_combination<score::Dot, kernel::Relu, WindowOrCustom, T>();
}

TEST_CASE("a left-padded causal batch: each prompt's rows equal the prompt alone (linear path)") {
  using Linear = attn::Attention<score::ScaledDot, kernel::EluPlusOne, LeftPaddedCausal>;
  static_assert(Linear::linear_path);
  check_left_padded(Linear{});
  check_left_padded(Linear{}, true);
}

TEST_CASE("random features: a large future key does not change earlier causal outputs") {
  // In float, where a stabiliser over the whole sequence moved earlier rows by 0.26 (in double,
  // by rounding: 1e-15).
  using T = float;
  // Causal attention must not let key j influence a query i < j, and in exact arithmetic it does
  // not: whatever stabiliser the keys' features subtract, it must not depend on later keys, or
  // their size shows up in earlier rows through underflow and rounding.
  attn::Rng rng(12);
  const index_t L = 9, D = 4;
  Tensor<T> q = Tensor<T>::randn({1, 1, L, D}, rng, 0, 0.5),
            k = Tensor<T>::randn({1, 1, L, D}, rng, 0, 0.5);
  const Tensor<T> v = Tensor<T>::randn({1, 1, L, 3}, rng);
  attn::Attention<score::ScaledDot, kernel::RandomFeatures, mask::Causal> linear{{}, {64, 3}, {}};
  for (const bool materialised : {false, true}) {
    auto run = [&](const Tensor<T>& keys) {
      attn::Tape<T> tape;
      const auto qv = tape.leaf(q), kv = tape.leaf(keys), vv = tape.leaf(v);
      return Tensor<T>(
          (materialised ? linear.materialized(qv, kv, vv) : linear(qv, kv, vv)).value());
    };
    const Tensor<T> before = run(k);
    Tensor<T> big = k;
    for (index_t d = 0; d < D; ++d) big(0, 0, L - 1, d) = T(60) * (d % 2 == 0 ? 1 : -1);
    const Tensor<T> after = run(big);
    double worst = 0, scale = 0;
    for (index_t i = 0; i + 1 < L; ++i)
      for (index_t d = 0; d < 3; ++d) {
        worst = std::max(worst, std::abs(double(before(0, 0, i, d)) - double(after(0, 0, i, d))));
        scale = std::max(scale, std::abs(double(before(0, 0, i, d))));
      }
    const std::string path = materialised ? "materialised" : "linear";
    CAPTURE(path);
    CHECK(scale > 0.1);  // the rows are not all zero
    CHECK(worst == 0);
  }
}

namespace {

// κ(s) = 1 + s + s²/2 as a score kernel: the materialised path, written as the docs' example.
struct TaylorScore {
  static constexpr const char* name = "taylor_score";
  static constexpr bool feature_map = false;
  static constexpr bool shift_invariant = false;
  template <class T>
  T value(T s) const {
    return 1 + s + s * s / 2;
  }
  template <class T>
  T derivative(T s, T) const {
    return 1 + s;
  }
};

}  // namespace

TEST_CASE("TaylorExp's features give the same attention as the score kernel 1 + s + s²/2") {
  // Two independent computations of one formula: φ(q)·φ(k) with F = 1 + d + d² on the linear
  // path, and κ(q·k/√d) on the materialised path.
  attn::Rng rng(13);
  const Tensor<double> q = Tensor<double>::randn({2, 2, 11, 5}, rng),
                       k = Tensor<double>::randn({2, 1, 11, 5}, rng),
                       v = Tensor<double>::randn({2, 1, 11, 3}, rng);
  attn::Tape<double> tape;
  auto features = attn::attention<score::ScaledDot, kernel::TaylorExp>(
      tape.leaf(q), tape.leaf(k), tape.leaf(v), mask::Causal{});
  auto scores = attn::attention<score::ScaledDot, TaylorScore>(tape.leaf(q), tape.leaf(k),
                                                               tape.leaf(v), mask::Causal{});
  static_assert(attn::Attention<score::ScaledDot, kernel::TaylorExp, mask::Causal>::linear_path);
  CHECK(attn::max_abs_diff(features.value(), scores.value()) < 1e-12);
}

TEST_CASE("RandomFeatures: each query row scaled by its own constant, every key by one constant") {
  const index_t d = 6, F = 16;
  const kernel::RandomFeatures rf{F, 4};
  const Tensor<double> r = attn::random_feature_matrix<double>(F, d, 4);  // [F, d]
  attn::Rng rng(14);
  const Tensor<double> x = Tensor<double>::randn({3, d}, rng);
  auto exponent = [&](index_t row, index_t a) {  // r_a·x − ‖x‖²/2
    double p = 0, n2 = 0;
    for (index_t j = 0; j < d; ++j) {
      p += r(a, j) * x(row, j);
      n2 += x(row, j) * x(row, j);
    }
    return p - n2 / 2;
  };
  std::vector<double> fq(3 * F), fk(3 * F);
  rf.map(x.data(), 3, d, fq.data(), attn::FeatureSide::query);
  rf.map(x.data(), 3, d, fk.data(), attn::FeatureSide::key);
  for (index_t row = 0; row < 3; ++row) {
    double top = 0;
    for (index_t a = 0; a < F; ++a) {
      top = std::max(top, fq[row * F + a]);
      // Queries: φ_a / φ_0 = exp(e_a − e_0) within a row.
      CHECK(fq[row * F + a] / fq[row * F] ==
            doctest::Approx(std::exp(exponent(row, a) - exponent(row, 0))).epsilon(1e-12));
      // Keys: φ_a(x_row) / φ_a(x_0) = exp(e_a(row) − e_a(0)): one shift for every key.
      CHECK(fk[row * F + a] / fk[a] ==
            doctest::Approx(std::exp(exponent(row, a) - exponent(0, a))).epsilon(1e-12));
    }
    CHECK(top == doctest::Approx(1 / std::sqrt(double(F))));  // the row's largest feature
  }
  // A head too wide for float: the shared key shift would leave ordinary keys near underflow.
  const Tensor<float> wide = Tensor<float>::randn({1, 300}, rng);
  std::vector<float> out(256);
  const kernel::RandomFeatures few{4, 0};
  CHECK_THROWS_AS(few.map(wide.data(), 1, 300, out.data(), attn::FeatureSide::key),
                  attn::value_error);
  const Tensor<float> narrow = Tensor<float>::randn({1, 64}, rng);
  CHECK_NOTHROW(
      kernel::RandomFeatures{}.map(narrow.data(), 1, 64, out.data(), attn::FeatureSide::key));
}

TEST_CASE("RandomFeatures: the per-thread matrix cache hands back the matrix of its own key") {
  // Five distinct keys (the first repeated last) cycled through a cache of four: every lookup
  // after the first round is either a hit or a redraw after eviction, and keys differing in one
  // field only (seed, d, F; the type below) must not be confused. The reference is each key's
  // matrix drawn afresh, outside the cache.
  struct Key {
    index_t features, d;
    std::uint64_t seed;
  };
  const Key keys[] = {{16, 6, 4}, {16, 6, 5}, {16, 7, 4}, {17, 6, 4}, {8, 3, 4}, {16, 6, 4}};
  auto same = [](const Tensor<double>& a, const Tensor<double>& b) {
    return a.shape() == b.shape() && attn::max_abs_diff(a, b) == 0.0;
  };
  const auto first = attn::detail::cached_random_feature_matrix<double>(16, 6, 4);
  for (int round = 0; round < 3; ++round)
    for (const Key& k : keys) {
      const auto got = attn::detail::cached_random_feature_matrix<double>(k.features, k.d, k.seed);
      CHECK(same(*got, attn::random_feature_matrix<double>(k.features, k.d, k.seed)));
    }
  // A matrix handed out earlier outlives its eviction.
  CHECK(same(*first, attn::random_feature_matrix<double>(16, 6, 4)));
  // float and double keep separate caches, each with its own type's matrix.
  const auto f = attn::detail::cached_random_feature_matrix<float>(16, 6, 4);
  CHECK(attn::max_abs_diff(*f, attn::random_feature_matrix<float>(16, 6, 4)) == 0.0);
  // Every thread of a parallel loop fills its own cache with the same matrices.
  std::vector<int> ok(8, 0);
  attn::parallel_for(8, 1e9, [&](index_t i) {
    const Key& k = keys[static_cast<std::size_t>(i % 5)];
    ok[static_cast<std::size_t>(i)] =
        same(*attn::detail::cached_random_feature_matrix<double>(k.features, k.d, k.seed),
             attn::random_feature_matrix<double>(k.features, k.d, k.seed));
  });
  CHECK(std::count(ok.begin(), ok.end(), 1) == 8);
  // map() after its matrix was evicted and redrawn gives the same features.
  const kernel::RandomFeatures rf{16, 4};
  attn::Rng rng(21);
  const Tensor<double> x = Tensor<double>::randn({3, 6}, rng);
  std::vector<double> before(3 * 16), after(3 * 16);
  rf.map(x.data(), 3, 6, before.data(), attn::FeatureSide::key);
  for (const Key& k : keys) attn::detail::cached_random_feature_matrix<double>(k.features, k.d, 99);
  rf.map(x.data(), 3, 6, after.data(), attn::FeatureSide::key);
  CHECK(before == after);
}
