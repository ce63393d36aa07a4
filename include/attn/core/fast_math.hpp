// attn/core/fast_math.hpp: exp and erf for float written without branches or library calls, so
// that loops over arrays calling them vectorise (glibc's expf/erff are scalar calls); double keeps
// std::exp / std::erf (gradient checks run in double and need the exact functions).
// Does not handle float denormal results: exp of arguments below -87.3 returns exactly 0.
//
// Accuracy, checked by tests/core/test_fast_math.cpp against the double functions:
//   exp_fast(x), float: relative error <= 2e-7 (measured 8.4e-8, under 1 ulp) for x in
//   [-87.3, 88.3];
//                       0 below -87.34 (the smallest normal float is e^-87.34), e^88.37 up to
//                       88.72 (where float overflows), +∞ beyond; NaN stays NaN.
//   erf_fast(x), float: absolute error <= 5e-7 (measured 3.3e-7) on the whole line (±1 beyond |x| =
//   4).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace attn {

namespace detail {

// The float exp's constants, shared by exp_fast and its packet form (pexp_float in
// attention/tile_gemm.hpp).
struct ExpFloat {
  static constexpr float hi = 88.37f, lo = -87.33654f;  // n <= 127 below hi; e^lo ≈ 2^-126
  static constexpr float overflow = 88.72283f;          // e^x is +∞ in float above
  static constexpr float log2e = 1.44269504088896341f;
  // Adding 1.5 ⋅ 2^23 rounds to an integer n and leaves n in the low mantissa bits.
  static constexpr float shifter = 12582912.0f;
  static constexpr float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;  // ln2 = hi + lo
  // e^r ≈ 1 + r + r² (p0 r⁵ + p1 r⁴ + … + p5) on |r| <= ln2/2 (Cephes' expf.c).
  static constexpr float p0 = 1.9875691500e-4f, p1 = 1.3981999507e-3f, p2 = 8.3334519073e-3f,
                         p3 = 4.1665795894e-2f, p4 = 1.6666665459e-1f, p5 = 5.0000001201e-1f;
  // (bits of x ⋅ log2e + shifter) + exponent_bias, shifted left by 23: the bits of 2^n.
  static constexpr std::int32_t exponent_bias = 127 - 0x4B400000;
};

// c ? a : b for floats, by bit masks. With a ternary that selects a constant, GCC's
// partial-redundancy pass splits the arithmetic after it into two paths; keeping floating-point
// traps (-ftrapping-math, its default) it cannot merge them back into vector selects without
// AVX-512's masks, so with AVX2 the loops calling exp_fast and erf_fast stayed scalar. The masks
// leave no branch to split.
inline float select_bits(bool c, float a, float b) {
  const std::uint32_t m = 0u - static_cast<std::uint32_t>(c);
  return std::bit_cast<float>((std::bit_cast<std::uint32_t>(a) & m) |
                              (std::bit_cast<std::uint32_t>(b) & ~m));
}

}  // namespace detail

// e^x. Float: x = n ln2 + r with |r| <= ln2/2 (Cody and Waite's two-part ln2 keeps r exact to a
// few ulp), e^r by Cephes' degree-6 polynomial (expf.c), and 2^n put into the exponent bits.
template <class T>
inline T exp_fast(T x) {
  if constexpr (!std::is_same_v<T, float>) {
    return std::exp(x);
  } else {
    using C = detail::ExpFloat;
    const bool nan = x != x, below = (x < C::lo), above = (x > C::hi), overflow = (x > C::overflow);
    // Clamp (NaN becomes 0 here and is restored at the end), so the integer work below is defined.
    float xc = detail::select_bits(above, C::hi, x);
    xc = detail::select_bits(below, C::lo, xc);
    xc = detail::select_bits(nan, 0.0f, xc);
    const float t = xc * C::log2e + C::shifter;
    const float n = t - C::shifter;
    const float r = (xc - n * C::ln2_hi) - n * C::ln2_lo;
    float p = C::p0;
    p = p * r + C::p1;
    p = p * r + C::p2;
    p = p * r + C::p3;
    p = p * r + C::p4;
    p = p * r + C::p5;
    const float er = p * r * r + r + 1.0f;
    // 2^n: n + 127 in the exponent field (n in [-126, 127] after the clamp).
    const std::int32_t bits = (std::bit_cast<std::int32_t>(t) + C::exponent_bias) << 23;
    float y = er * std::bit_cast<float>(bits);
    y = detail::select_bits(overflow, std::numeric_limits<float>::infinity(), y);
    y = detail::select_bits(below, 0.0f, y);
    return detail::select_bits(nan, x, y);
  }
}

// erf(x). Float: Eigen's generic_fast_erf_float (unsupported/SpecialFunctions), a 13/8-degree
// odd/even rational function on [-4, 4], outside which erf is ±1 in float.
template <class T>
inline T erf_fast(T x) {
  if constexpr (!std::is_same_v<T, float>) {
    return std::erf(x);
  } else {
    // Clamped to [-4, 4]; NaN stays NaN.
    const float xc = detail::select_bits(x < -4.0f, -4.0f, detail::select_bits(x > 4.0f, 4.0f, x));
    const float x2 = xc * xc;
    float p = -2.72614225801306e-10f;
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 + -2.10102402082508e-06f;
    p = p * x2 + -5.69250639462346e-05f;
    p = p * x2 + -7.34990630326855e-04f;
    p = p * x2 + -2.95459980854025e-03f;
    p = p * x2 + -1.60960333262415e-02f;
    p = p * xc;
    float q = -1.45660718464996e-05f;
    q = q * x2 + -2.13374055278905e-04f;
    q = q * x2 + -1.68282697438203e-03f;
    q = q * x2 + -7.37332916720468e-03f;
    q = q * x2 + -1.42647390514189e-02f;
    return p / q;
  }
}

}  // namespace attn
