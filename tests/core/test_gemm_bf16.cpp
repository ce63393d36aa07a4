// Tests for MatmulPrecision::bf16 (core/gemm_bf16.hpp through attn::gemm): against a product in
// double of the operands rounded to bf16 here (by an independent rounding), every transpose and
// accumulate setting on sizes that cross the kernel's blocks; exact results where bf16 and float
// sums are exact; the rounding itself (ties to even, subnormals read as zero) visible in results;
// bitwise-identical results for 1, 2 and 3 threads; and the fallback to float32.
// On a CPU without AVX512_BF16 only the fallback is checked (the rest needs the instruction).
#include <doctest/doctest.h>
#include <attn/core/gemm.hpp>
#include <attn/core/rng.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace bf16_gemm_test {

using attn::index_t;

// Restores the precision and thread count a test changed, even when a CHECK fails.
struct PrecisionGuard {
  attn::MatmulPrecision saved = attn::matmul_precision();
  int threads = attn::num_threads();
  ~PrecisionGuard() {
    attn::set_matmul_precision(saved);
    attn::set_num_threads(threads);
  }
};

// x rounded to 8 significant bits, ties to even (nearbyint in the default rounding mode), with
// subnormal floats taken as zero: what the kernel is documented to multiply.
double round_bf16(float x) {
  if (std::fpclassify(x) == FP_SUBNORMAL || x == 0.0f) return 0.0;
  int e = 0;
  const double m = std::frexp(static_cast<double>(x), &e);  // |m| in [0.5, 1)
  return std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8);
}

struct Sizes {
  index_t m, n, k;
};

// Sizes around the kernel's blocks: 6 rows, 16-column packets, 64-column panels, 144-row and
// 512-column blocks, 256-long inner blocks (and odd k, whose last pair is half padding); long k
// that gemm cuts into pieces; vectors (which stay float32, checked separately).
constexpr Sizes kSizes[] = {{2, 2, 1},      {7, 13, 5},      {6, 16, 2},    {5, 17, 3},
                            {130, 67, 257}, {150, 600, 513}, {600, 70, 91}, {9, 333, 21},
                            {24, 19, 2100}, {145, 65, 256}};

std::vector<float> random_vector(index_t n, attn::Rng& rng) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = static_cast<float>(rng.uniform(-1.0, 1.0));
  return v;
}

float at(const std::vector<float>& v, index_t i) {
  return v[static_cast<std::size_t>(i)];
}

}  // namespace bf16_gemm_test

using bf16_gemm_test::at;
using bf16_gemm_test::index_t;
using bf16_gemm_test::PrecisionGuard;
using bf16_gemm_test::random_vector;
using bf16_gemm_test::round_bf16;

TEST_CASE("matmul precision: bf16 is used exactly when requested on a CPU that has AVX512_BF16") {
  PrecisionGuard guard;
  attn::set_matmul_precision(attn::MatmulPrecision::float32);
  CHECK(attn::matmul_precision() == attn::MatmulPrecision::float32);
  CHECK(attn::matmul_precision_name() == "float32");
  attn::set_matmul_precision(attn::MatmulPrecision::bf16);
  CHECK(attn::matmul_precision() == (attn::cpu_has_avx512_bf16() ? attn::MatmulPrecision::bf16
                                                                 : attn::MatmulPrecision::float32));
  MESSAGE("this CPU: " << attn::matmul_precision_name());
}

TEST_CASE("bf16 gemm: the float product of the bf16-rounded operands, every transpose and size") {
  if (!attn::cpu_has_avx512_bf16()) {
    MESSAGE("skipped: this CPU has no AVX512_BF16");
    return;
  }
  PrecisionGuard guard;
  attn::set_matmul_precision(attn::MatmulPrecision::bf16);
  attn::Rng rng(7);
  for (const bf16_gemm_test::Sizes d : bf16_gemm_test::kSizes)
    for (const bool ta : {false, true})
      for (const bool tb : {false, true})
        for (const bool accumulate : {false, true}) {
          CAPTURE(d.m);
          CAPTURE(d.n);
          CAPTURE(d.k);
          CAPTURE(ta);
          CAPTURE(tb);
          CAPTURE(accumulate);
          const auto a = random_vector(d.m * d.k, rng), b = random_vector(d.k * d.n, rng);
          auto c = random_vector(d.m * d.n, rng);
          if (!accumulate) std::fill(c.begin(), c.end(), std::numeric_limits<float>::quiet_NaN());
          const auto c0 = c;
          attn::gemm(a.data(), ta, b.data(), tb, c.data(), d.m, d.n, d.k, accumulate);
          // Each product of two bf16 is exact in float; the k + 1 float additions each round by
          // at most 2^-24 of a partial sum bounded by Σ|a b| (+ |c0|).
          double worst = 0.0;
          for (index_t i = 0; i < d.m; ++i)
            for (index_t j = 0; j < d.n; ++j) {
              const double start = accumulate ? static_cast<double>(at(c0, i * d.n + j)) : 0.0;
              double s = start, mag = std::abs(start);
              for (index_t p = 0; p < d.k; ++p) {
                const double x = round_bf16(at(a, ta ? p * d.m + i : i * d.k + p));
                const double y = round_bf16(at(b, tb ? j * d.k + p : p * d.n + j));
                s += x * y;
                mag += std::abs(x * y);
              }
              const double bound = std::ldexp(1.0, -24) * static_cast<double>(d.k + 1) * mag +
                                   std::numeric_limits<float>::min();
              const double e = std::abs(static_cast<double>(at(c, i * d.n + j)) - s) / bound;
              worst = std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(worst, e);
            }
          CHECK(worst <= 1.0);
        }
}

TEST_CASE("bf16 gemm: exact where every operand is a bf16 and every sum a float (small integers)") {
  if (!attn::cpu_has_avx512_bf16()) {
    MESSAGE("skipped: this CPU has no AVX512_BF16");
    return;
  }
  PrecisionGuard guard;
  attn::set_matmul_precision(attn::MatmulPrecision::bf16);
  attn::Rng rng(3);
  const index_t m = 37, n = 71, k = 601;  // |sum| <= 601 · 256 < 2^24
  std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n));
  for (float& x : a) x = static_cast<float>(std::floor(rng.uniform(-16.0, 16.0)));
  for (float& x : b) x = static_cast<float>(std::floor(rng.uniform(-16.0, 16.0)));
  std::vector<float> c(static_cast<std::size_t>(m * n));
  attn::gemm(a.data(), false, b.data(), true, c.data(), m, n, k);  // B read as [n, k]
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (index_t p = 0; p < k; ++p) s += double(at(a, i * k + p)) * double(at(b, j * k + p));
      REQUIRE(static_cast<double>(at(c, i * n + j)) == s);
    }
}

TEST_CASE("bf16 gemm: operands are rounded to nearest even, subnormals read as zero") {
  if (!attn::cpu_has_avx512_bf16()) {
    MESSAGE("skipped: this CPU has no AVX512_BF16");
    return;
  }
  PrecisionGuard guard;
  const index_t m = 8, n = 16, k = 64;
  std::vector<float> c(static_cast<std::size_t>(m * n));
  // Σ_p a b with every a = value and every b = scale.
  auto row_sum_of = [&](float value, float scale = 1.0f) {
    const std::vector<float> a(static_cast<std::size_t>(m * k), value);
    const std::vector<float> b(static_cast<std::size_t>(k * n), scale);
    attn::gemm(a.data(), false, b.data(), false, c.data(), m, n, k);
    return c[5];
  };
  const float below_half = 1.0f + std::ldexp(1.0f, -9);  // a quarter ulp of bf16 above 1: to 1
  const float tie_down = 1.0f + std::ldexp(1.0f, -8);    // half an ulp, 1 is even: to 1
  const float tie_up = 1.0f + 3 * std::ldexp(1.0f, -8);  // 1.5 ulp: to 1 + 2 ulp (even)
  // 2^-130: a subnormal float (and a bf16 one), times 2^100 a normal 2^-30 had it been kept.
  const float subnormal = std::ldexp(1.0f, -130), large = std::ldexp(1.0f, 100);
  attn::set_matmul_precision(attn::MatmulPrecision::float32);
  CHECK(row_sum_of(below_half) == doctest::Approx(64.125).epsilon(1e-6));
  attn::set_matmul_precision(attn::MatmulPrecision::bf16);
  CHECK(row_sum_of(below_half) == 64.0f);
  CHECK(row_sum_of(tie_down) == 64.0f);
  CHECK(row_sum_of(tie_up) == 64.0f * (1.0f + std::ldexp(1.0f, -6)));
  CHECK(row_sum_of(subnormal, large) == 0.0f);
  attn::set_matmul_precision(attn::MatmulPrecision::float32);
  CHECK(row_sum_of(subnormal, large) == std::ldexp(1.0f, -24));
  attn::set_matmul_precision(attn::MatmulPrecision::bf16);
  CHECK(std::isnan(row_sum_of(std::numeric_limits<float>::quiet_NaN())));
  CHECK(row_sum_of(std::numeric_limits<float>::infinity()) ==
        std::numeric_limits<float>::infinity());
}

TEST_CASE("bf16 gemm: vector products stay float32") {
  PrecisionGuard guard;
  attn::set_matmul_precision(attn::MatmulPrecision::bf16);
  const index_t k = 32, n = 16;
  const std::vector<float> a(static_cast<std::size_t>(k), 1.0f + std::ldexp(1.0f, -9));
  const std::vector<float> b(static_cast<std::size_t>(k * n), 1.0f);
  std::vector<float> c(static_cast<std::size_t>(n));
  attn::gemm(a.data(), false, b.data(), false, c.data(), 1, n, k);
  CHECK(c[3] == doctest::Approx(32.0625).epsilon(1e-6));
}

TEST_CASE("bf16 gemm: results are bitwise identical for 1, 2 and 3 threads") {
  if (!attn::cpu_has_avx512_bf16()) {
    MESSAGE("skipped: this CPU has no AVX512_BF16");
    return;
  }
  PrecisionGuard guard;
  attn::set_matmul_precision(attn::MatmulPrecision::bf16);
  attn::Rng rng(11);
  for (const bf16_gemm_test::Sizes d :
       {bf16_gemm_test::Sizes{700, 700, 700}, bf16_gemm_test::Sizes{384, 384, 4500}}) {
    CAPTURE(d.k);
    const auto a = random_vector(d.m * d.k, rng), b = random_vector(d.k * d.n, rng);
    std::vector<std::vector<float>> results;
    for (const int threads : {1, 2, 3}) {
      attn::set_num_threads(threads);
      std::vector<float> c(static_cast<std::size_t>(d.m * d.n));
      attn::gemm(a.data(), true, b.data(), false, c.data(), d.m, d.n, d.k);
      results.push_back(std::move(c));
    }
    CHECK(std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)) ==
          0);
    CHECK(std::memcmp(results[0].data(), results[2].data(), results[0].size() * sizeof(float)) ==
          0);
  }
}
