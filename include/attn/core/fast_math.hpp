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

// e^x. Float: x = n ln2 + r with |r| <= ln2/2 (Cody and Waite's two-part ln2 keeps r exact to a
// few ulp), e^r by Cephes' degree-6 polynomial (expf.c), and 2^n put into the exponent bits.
template <class T>
inline T exp_fast(T x) {
  if constexpr (!std::is_same_v<T, float>) {
    return std::exp(x);
  } else {
    constexpr float hi = 88.37f, lo = -87.33654f;  // n <= 127 below hi; e^lo ≈ 2^-126
    // Clamp (NaN becomes 0 here and is restored at the end), so the integer work below is defined.
    const float xc = x > hi ? hi : (x < lo ? lo : (x == x ? x : 0.0f));
    // n = round(x / ln2) by the 1.5 ⋅ 2^23 trick: adding it leaves n in the low mantissa bits.
    constexpr float shifter = 12582912.0f;
    const float t = xc * 1.44269504088896341f + shifter;
    const float n = t - shifter;
    const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;  // ln2 = 0.693359375 − 2.12e-4
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float er = p * r * r + r + 1.0f;
    // 2^n: n + 127 in the exponent field (n in [-126, 127] after the clamp).
    const std::int32_t bits = (std::bit_cast<std::int32_t>(t) - 0x4B400000 + 127) << 23;
    const float y = er * std::bit_cast<float>(bits);
    const float big = x > 88.72283f ? std::numeric_limits<float>::infinity() : y;
    return x == x ? (x < lo ? 0.0f : big) : x;
  }
}

// erf(x). Float: Eigen's generic_fast_erf_float (unsupported/SpecialFunctions), a 13/8-degree
// odd/even rational function on [-4, 4], outside which erf is ±1 in float.
template <class T>
inline T erf_fast(T x) {
  if constexpr (!std::is_same_v<T, float>) {
    return std::erf(x);
  } else {
    const float xc = x > 4.0f ? 4.0f : (x < -4.0f ? -4.0f : x);  // NaN stays NaN
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
