// attn/core/bf16.hpp: bfloat16 storage (the top 16 bits of an IEEE float: 8 exponent bits, 7
// mantissa bits) and its conversions, usable on the CPU and in CUDA kernels alike.
// Does not do arithmetic in bf16: values are widened to float, computed on, and rounded back.
//
// The layout is that of CUDA's __nv_bfloat16 and PyTorch's torch.bfloat16, so buffers of either
// can be reinterpreted as attn::bf16 and back.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "host_device.hpp"

namespace attn {

struct bf16 {
  std::uint16_t bits = 0;
};
static_assert(sizeof(bf16) == 2, "attn: bf16 must be two bytes, like __nv_bfloat16");

// Exact: a bf16 is a float whose low 16 mantissa bits are zero.
ATTN_HOST_DEVICE inline float to_float(bf16 x) {
  const std::uint32_t u = static_cast<std::uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
ATTN_HOST_DEVICE inline float to_float(float x) {
  return x;
}

// Round to nearest, ties to even (what __float2bfloat16 and torch do); NaN stays a quiet NaN,
// ±inf stays ±inf, and values beyond the largest bf16 round to ±inf.
ATTN_HOST_DEVICE inline bf16 to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u)  // NaN: keep the sign, force a quiet-NaN payload
    return bf16{static_cast<std::uint16_t>((u >> 16) | 0x0040u)};
  // Adding 0x7fff plus the lowest kept bit carries into the kept half exactly when the dropped
  // half is above one half ulp, or equal to it with an odd kept half.
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<std::uint16_t>(u >> 16)};
}

// element_cast<To>(x) between arithmetic types and bf16: a bf16 widens exactly; a value becomes
// a bf16 by rounding its float to nearest even (a double is rounded to float first).
template <class To, class From>
ATTN_HOST_DEVICE To element_cast(From x) {
  if constexpr (std::is_same_v<To, From>)
    return x;
  else if constexpr (std::is_same_v<From, bf16>)
    return static_cast<To>(to_float(x));
  else if constexpr (std::is_same_v<To, bf16>)
    return to_bf16(static_cast<float>(x));
  else
    return static_cast<To>(x);
}

}  // namespace attn
