// Tests for attn::Rng, attn::hash_uniform and attn::DropoutMask (core/rng.hpp): golden streams that
// pin the exact bits on every platform, the ranges and statistics of each distribution, and
// reseeding. The golden constants come from tests/core/rng_reference.py, an independent Python
// version.
#include <doctest/doctest.h>
#include <attn/core/rng.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>

namespace {

constexpr int kGolden = 6;

// python3 tests/core/rng_reference.py (xoshiro256** seeded by splitmix64).
constexpr std::array<std::uint64_t, kGolden> kSeed0 = {
    0x99EC5F36CB75F2B4ull, 0xBF6E1F784956452Aull, 0x1A5F849D4933E6E0ull,
    0x6AA594F1262D2D2Cull, 0xBBA5AD4A1F842E59ull, 0xFFEF8375D9EBCACAull};
constexpr std::array<std::uint64_t, kGolden> kSeed42 = {
    0x15780B2E0C2EC716ull, 0x6104D9866D113A7Eull, 0xAE17533239E499A1ull,
    0xECB8AD4703B360A1ull, 0xFDE6DC7FE2EC5E64ull, 0xC50DA53101795238ull};

// Pearson's chi-square statistic of `counts` against a uniform expectation.
template <std::size_t K>
double chi_square(const std::array<int, K>& counts, int total) {
  const double expected = static_cast<double>(total) / K;
  double chi2 = 0.0;
  for (const int c : counts) chi2 += (c - expected) * (c - expected) / expected;
  return chi2;
}

}  // namespace

TEST_CASE("Rng: golden next_u64 streams for seeds 0 and 42") {
  attn::Rng r0(0);
  for (int i = 0; i < kGolden; ++i) {
    CAPTURE(i);
    CHECK(r0.next_u64() == kSeed0[static_cast<std::size_t>(i)]);
  }
  attn::Rng r42(42);
  for (int i = 0; i < kGolden; ++i) {
    CAPTURE(i);
    CHECK(r42.next_u64() == kSeed42[static_cast<std::size_t>(i)]);
  }
  // The default seed is 0.
  attn::Rng def;
  CHECK(def.next_u64() == kSeed0[0]);
}

TEST_CASE("Rng: golden uniform() and normal() values for seed 0") {
  attn::Rng r(0);
  // Exact: uniform() is the top 53 bits times 2^-53, no rounding anywhere.
  CHECK(r.uniform() == 0.6012629994179048);
  CHECK(r.uniform() == 0.7477740925472398);
  CHECK(r.uniform() == 0.10301998939503632);
  // normal() goes through log, sqrt, cos and sin: compared to a few ulps, not bit for bit.
  attn::Rng n(0);
  CHECK(n.normal() == doctest::Approx(-0.01410679738124918).epsilon(1e-13));
  CHECK(n.normal() == doctest::Approx(-1.0085864725210538).epsilon(1e-13));
  CHECK(n.normal() == doctest::Approx(-1.8458950876958273).epsilon(1e-13));
  CHECK(n.normal() == doctest::Approx(1.0669282078900475).epsilon(1e-13));
}

TEST_CASE("Rng: reseed restarts the stream and drops a pending normal") {
  attn::Rng r(42);
  for (int i = 0; i < 10; ++i) (void)r.next_u64();
  r.reseed(0);
  CHECK(r.next_u64() == kSeed0[0]);

  attn::Rng a(5), b(5);
  (void)a.normal();  // leaves the second value of the pair pending
  a.reseed(5);
  CHECK(a.normal() == b.normal());
  CHECK(a.next_u64() == b.next_u64());
}

TEST_CASE("Rng: nearby seeds give unrelated streams") {
  attn::Rng a(1), b(2);
  int equal = 0;
  for (int i = 0; i < 1000; ++i) equal += a.next_u64() == b.next_u64();
  CHECK(equal == 0);
}

TEST_CASE("Rng: split() returns the next word, so sub-generators are reproducible") {
  attn::Rng a(7), b(7);
  const std::uint64_t s = a.split();
  CHECK(s == b.next_u64());
  attn::Rng child1(s), child2(s);
  CHECK(child1.next_u64() == child2.next_u64());
}

TEST_CASE("bits_to_unit_double maps the extremes into [0, 1)") {
  CHECK(attn::bits_to_unit_double(0) == 0.0);
  CHECK(attn::bits_to_unit_double(~std::uint64_t{0}) < 1.0);
  CHECK(attn::bits_to_unit_double(~std::uint64_t{0}) == 1.0 - 0x1.0p-53);
  CHECK(attn::bits_to_unit_double(std::uint64_t{1} << 63) == 0.5);
}

TEST_CASE("Rng: uniform() lies in [0, 1) with mean 1/2 and variance 1/12") {
  attn::Rng r(11);
  const int n = 200000;
  double sum = 0.0, sq = 0.0, lo = 1.0, hi = 0.0;
  for (int i = 0; i < n; ++i) {
    const double u = r.uniform();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    sum += u;
    sq += u * u;
    lo = std::min(lo, u);
    hi = std::max(hi, u);
  }
  const double mean = sum / n, var = sq / n - mean * mean;
  CHECK(std::abs(mean - 0.5) < 0.004);  // standard error ~ 0.00065
  CHECK(std::abs(var - 1.0 / 12.0) < 0.002);
  CHECK(lo < 1e-3);
  CHECK(hi > 1.0 - 1e-3);

  attn::Rng s(12);
  for (int i = 0; i < 10000; ++i) {
    const double u = s.uniform(-3.0, 5.0);
    REQUIRE(u >= -3.0);
    REQUIRE(u < 5.0);
  }
}

TEST_CASE("Rng: uniform_int(10) passes a chi-square test over its 10 values") {
  attn::Rng r(2024);
  std::array<int, 10> counts{};
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t v = r.uniform_int(10);
    REQUIRE(v < 10);
    ++counts[static_cast<std::size_t>(v)];
  }
  // 9 degrees of freedom: P(chi2 > 27.88) = 0.001.
  CHECK(chi_square(counts, n) < 27.88);
}

TEST_CASE("Rng: uniform_int is unbiased where taking a remainder would not be") {
  // n = 3 * 2^62: `next_u64() % n` would put values below 2^62 twice as often as the rest
  // (probability 1/2 instead of 1/3). Lemire's rejection step removes that bias.
  const std::uint64_t n = 3ull << 62;
  attn::Rng r(99);
  const int draws = 60000;
  int low = 0;
  for (int i = 0; i < draws; ++i) {
    const std::uint64_t v = r.uniform_int(n);
    REQUIRE(v < n);
    low += v < (1ull << 62);
  }
  CHECK(std::abs(static_cast<double>(low) / draws - 1.0 / 3.0) < 0.01);  // standard error ~ 0.002
}

TEST_CASE("Rng: uniform_int edge cases") {
  attn::Rng r(3);
  for (int i = 0; i < 100; ++i) CHECK(r.uniform_int(1) == 0);
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  for (int i = 0; i < 100; ++i) CHECK(r.uniform_int(max) < max);
  CHECK_THROWS_AS((void)r.uniform_int(0), attn::value_error);
  try {
    (void)r.uniform_int(0);
  } catch (const attn::value_error& e) {
    CHECK(std::string(e.what()).find("uniform_int") != std::string::npos);
  }
}

TEST_CASE("shuffle: a pinned order per seed, all 3! orders equally often, short spans") {
  // The order shuffled_indices gave for seed 0 before it called shuffle: the draws are pinned.
  std::array<int, 10> x{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  attn::Rng r(0);
  attn::shuffle(std::span<int>(x), r);
  CHECK(x == std::array<int, 10>{7, 8, 3, 1, 5, 4, 2, 0, 9, 6});

  // Each of the 6 orders of {0, 1, 2}, numbered 3·x[0] + x[1] (unique for a permutation).
  std::array<int, 6> counts{};
  const std::array<int, 9> slot{-1, 0, 1, 2, -1, 3, 4, 5, -1};  // 3·a + b → order number
  attn::Rng s(11);
  const int n = 60000;
  for (int i = 0; i < n; ++i) {
    std::array<int, 3> p{0, 1, 2};
    attn::shuffle(std::span<int>(p), s);
    const int k = slot[std::size_t(3 * p[0] + p[1])];
    REQUIRE(k >= 0);
    ++counts[std::size_t(k)];
  }
  // 5 degrees of freedom: P(chi2 > 20.52) = 0.001.
  CHECK(chi_square(counts, n) < 20.52);

  std::array<int, 1> one{5};
  attn::shuffle(std::span<int>(one), s);
  CHECK(one[0] == 5);
  attn::shuffle(std::span<int>(), s);  // empty: nothing to do
}

TEST_CASE("Rng: normal() has mean 0 and variance 1, and normal(mean, stddev) scales it") {
  attn::Rng r(77);
  const int n = 200000;
  double sum = 0.0, sq = 0.0, fourth = 0.0;
  int beyond2 = 0;
  for (int i = 0; i < n; ++i) {
    const double z = r.normal();
    REQUIRE(std::isfinite(z));
    sum += z;
    sq += z * z;
    fourth += z * z * z * z;
    beyond2 += std::abs(z) > 2.0;
  }
  const double mean = sum / n, var = sq / n - mean * mean;
  CHECK(std::abs(mean) < 0.012);            // standard error ~ 0.0022
  CHECK(std::abs(var - 1.0) < 0.016);       // standard error ~ 0.0032
  CHECK(std::abs(fourth / n - 3.0) < 0.1);  // kurtosis of a Gaussian
  CHECK(std::abs(static_cast<double>(beyond2) / n - 0.0455) < 0.003);

  attn::Rng s(78);
  double ssum = 0.0, ssq = 0.0;
  for (int i = 0; i < n; ++i) {
    const double z = s.normal(-2.0, 3.0);
    ssum += z;
    ssq += z * z;
  }
  const double smean = ssum / n;
  CHECK(std::abs(smean + 2.0) < 0.04);
  CHECK(std::abs(std::sqrt(ssq / n - smean * smean) - 3.0) < 0.03);
}

TEST_CASE("hash_uniform: deterministic, in [0, 1), golden, and uniform over counters") {
  // Golden values from tests/core/rng_reference.py.
  CHECK(attn::hash_uniform(7, 0) == 0.7215081806049702);
  CHECK(attn::hash_uniform(7, 1) == 0.18352846128559808);
  CHECK(attn::hash_uniform(7, 2) == 0.43010006931974265);
  // constexpr: usable at compile time, so device code can share it.
  static_assert(attn::hash_uniform(7, 0) >= 0.0 && attn::hash_uniform(7, 0) < 1.0);

  CHECK(attn::hash_uniform(123, 456) == attn::hash_uniform(123, 456));
  CHECK(attn::hash_uniform(123, 456) != attn::hash_uniform(124, 456));
  CHECK(attn::hash_uniform(123, 456) != attn::hash_uniform(123, 457));

  std::array<int, 10> counts{};
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = attn::hash_uniform(42, static_cast<std::uint64_t>(i));
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    ++counts[static_cast<std::size_t>(u * 10)];
  }
  CHECK(chi_square(counts, n) < 27.88);
}

// The dropout mask's definition, written out with hash_uniform: kept iff hash_uniform >= p.
template <class T>
T dropped_or_scaled(T x, std::uint64_t seed, std::uint64_t counter, double p) {
  if (!(attn::hash_uniform(seed, counter) >= p)) return T{0};
  return x * static_cast<T>(1.0 / (1.0 - p));
}

TEST_CASE_TEMPLATE("DropoutMask: the decisions and values of hash_uniform(seed, i) >= p", T, float,
                   double) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  const std::uint64_t seed = 2024, first = 1000;
  constexpr std::int64_t n = 517;  // not a multiple of a vector's width
  std::array<T, n> x{};
  for (std::int64_t i = 0; i < n; ++i) x[std::size_t(i)] = T(0.25) * T(i % 13) - T(1.5);
  x[3] = T(inf);  // a dropped or kept inf / NaN must follow the definition too
  x[4] = T(-inf);
  x[5] = std::numeric_limits<T>::quiet_NaN();
  auto same = [](T a, T b) { return (std::isnan(a) && std::isnan(b)) || a == b; };

  for (const double p : {0.0, 0x1.0p-53, 0.1, 0.5, 0.9, 1.0}) {
    CAPTURE(p);
    const attn::DropoutMask mask(seed, p);
    std::array<T, n> y{}, y1{}, y2{}, acc{};
    acc.fill(T(2));
    mask.apply(x.data(), y.data(), n, first);
    mask.apply(x.data(), y1.data(), x.data(), y2.data(), n, first);
    mask.apply_add(x.data(), acc.data(), n, first);
    int mismatches = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const auto c = first + static_cast<std::uint64_t>(i);
      const T want = p < 1.0 ? dropped_or_scaled(x[std::size_t(i)], seed, c, p) : T{0};
      mismatches += mask.keep(c) != (attn::hash_uniform(seed, c) >= p);
      mismatches += !same(y[std::size_t(i)], want) || !same(y1[std::size_t(i)], want) ||
                    !same(y2[std::size_t(i)], want) || !same(acc[std::size_t(i)], T(2) + want);
    }
    CHECK(mismatches == 0);
  }
  // In place (y = x).
  std::array<T, n> z = x;
  attn::DropoutMask(seed, 0.3).apply(z.data(), z.data(), n, 0);
  for (std::int64_t i = 0; i < n; ++i)
    CHECK(
        same(z[std::size_t(i)], dropped_or_scaled(x[std::size_t(i)], seed, std::uint64_t(i), 0.3)));
}

TEST_CASE("DropoutMask: p on either side of a hash value decides that element as hash_uniform") {
  // For a counter whose hash_uniform is u, p = u keeps it (u >= p) and the next double above u
  // drops it: the integer threshold must round p up, not down, and compare with >=.
  const std::uint64_t seed = 77;
  for (std::uint64_t c = 0; c < 50; ++c) {
    const double u = attn::hash_uniform(seed, c);
    CAPTURE(c);
    CHECK(attn::DropoutMask(seed, u).keep(c));
    CHECK_FALSE(attn::DropoutMask(seed, std::nextafter(u, 1.0)).keep(c));
    if (u > 0.0) CHECK(attn::DropoutMask(seed, std::nextafter(u, 0.0)).keep(c));
  }
  for (const double bad : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    CAPTURE(bad);
    std::string message;
    try {
      attn::DropoutMask mask(seed, bad);
    } catch (const attn::value_error& e) {
      message = e.what();
    }
    CHECK(message.find("dropout: p must be in [0, 1]") != std::string::npos);
  }
}
