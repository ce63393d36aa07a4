// Tests for exp_fast and erf_fast (core/fast_math.hpp): the accuracy the header documents, over
// dense grids against the double-precision functions; the special values; double falls back to
// std::exp / std::erf; and the float GELU built on them against GELU in double.
#include <doctest/doctest.h>

#include <attn/autodiff/expression.hpp>
#include <attn/core/fast_math.hpp>
#include <cmath>
#include <limits>

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();

}  // namespace

TEST_CASE("exp_fast: relative error <= 2e-7 on [-87.3, 88.3], 0 below, infinity above") {
  double worst = 0.0;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = -87.3f + static_cast<float>(i) * (175.6f / 2000000.0f);
    const double want = std::exp(static_cast<double>(x));
    const double err = std::abs(static_cast<double>(attn::exp_fast(x)) - want) / want;
    worst = std::max(worst, err);
  }
  MESSAGE("exp_fast worst relative error: " << worst);
  CHECK(worst <= 2e-7);
  CHECK(attn::exp_fast(0.0f) == 1.0f);
  CHECK(attn::exp_fast(-87.4f) == 0.0f);
  CHECK(attn::exp_fast(-1e4f) == 0.0f);
  CHECK(attn::exp_fast(-inf) == 0.0f);
  CHECK(attn::exp_fast(88.8f) == inf);
  CHECK(attn::exp_fast(inf) == inf);
  CHECK(std::isnan(attn::exp_fast(std::numeric_limits<float>::quiet_NaN())));
  CHECK(attn::exp_fast(0.3) == std::exp(0.3));  // double: the library function itself
}

TEST_CASE("erf_fast: absolute error <= 5e-7 on the whole line") {
  double worst = 0.0;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = -8.0f + static_cast<float>(i) * (16.0f / 2000000.0f);
    const double err =
        std::abs(static_cast<double>(attn::erf_fast(x)) - std::erf(static_cast<double>(x)));
    worst = std::max(worst, err);
  }
  MESSAGE("erf_fast worst absolute error: " << worst);
  CHECK(worst <= 5e-7);
  CHECK(attn::erf_fast(0.0f) == 0.0f);
  CHECK(attn::erf_fast(inf) == doctest::Approx(1.0f));
  CHECK(attn::erf_fast(-inf) == doctest::Approx(-1.0f));
  CHECK(std::isnan(attn::erf_fast(std::numeric_limits<float>::quiet_NaN())));
  CHECK(attn::erf_fast(0.3) == std::erf(0.3));
}

TEST_CASE("GELU in float (fast erf and exp) matches GELU in double") {
  const attn::expr::Gelu gelu;
  double worst_value = 0.0, worst_derivative = 0.0;
  for (int i = 0; i <= 200000; ++i) {
    const float x = -12.0f + static_cast<float>(i) * (24.0f / 200000.0f);
    const double xd = x;
    worst_value = std::max(worst_value, std::abs(double(gelu.value(x)) - gelu.value(xd)) /
                                            std::max(1.0, std::abs(xd)));
    worst_derivative = std::max(
        worst_derivative, std::abs(double(gelu.derivative(x, 0.0f)) - gelu.derivative(xd, 0.0)));
  }
  MESSAGE("GELU float: worst value error " << worst_value << ", derivative " << worst_derivative);
  CHECK(worst_value <= 1e-6);
  CHECK(worst_derivative <= 2e-6);
}
