// attn/core/gemm_bf16.hpp: C (+)= op(A) op(B) on float buffers, computed as bf16 hardware does it:
// both operands rounded to bfloat16, each product exact, the sums kept in float. Runs AVX512_BF16's
// vdpbf16ps (Intel Cooper Lake and Sapphire Rapids on, AMD Zen 4 and Zen 5), which does two such
// multiply-adds per float lane in the time of one float FMA. Does not choose when to run: gemm.hpp
// calls it under MatmulPrecision::bf16 on CPUs that have the instruction (cpu_has_avx512_bf16).
//
// What is computed, exactly: every operand element rounded to the nearest bf16 (ties to even, as
// torch.bfloat16 and __float2bfloat16 do), with subnormal floats read as zero (the conversion
// instruction's rule); every product of two bf16 exact in float (8-bit significands); each output
// is the float sum, in an order fixed by the sizes alone (pairs of k in order within blocks of 256,
// block by block into C), so the result does not depend on the thread count. vdpbf16ps flushes
// subnormal sums to zero. The relative error against the float product is that of rounding the
// operands, about 2^-8 per operand: use it where PyTorch's bf16 autocast is acceptable.
//
// The kernel follows the layout of the GotoBLAS/BLIS GEMMs (Goto and van de Geijn, "Anatomy of
// High-Performance Matrix Multiplication"): a 64-column panel of op(B), packed as [k pairs][64
// columns][2] bf16, stays in L1 while 6-row panels of op(A) stream past it; each step broadcasts
// one pair of A's row and multiplies it into 4 packets of 16 columns (24 accumulators in zmm
// registers).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "shape.hpp"

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define ATTN_HAVE_BF16_GEMM 1
#include <immintrin.h>
// The kernel is compiled for AVX512_BF16 whatever the -march, and run only where the CPU says it
// has it: one binary serves a Zen 3 (float path) and a Zen 4 (bf16 path).
#define ATTN_TARGET_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
// The micro-kernel's accumulators stay in registers only when its loops are unrolled completely.
// nvcc's front end rejects GCC's pragma; there the host compiler's own unrolling has to do.
#if defined(__NVCC__)
#define ATTN_BF16_UNROLL
#else
#define ATTN_BF16_UNROLL _Pragma("GCC unroll 8")
#endif
#endif

namespace attn {

// True when this CPU (and the operating system) runs AVX512_BF16: vdpbf16ps and the float-to-bf16
// conversions. Asked once.
inline bool cpu_has_avx512_bf16() {
#ifdef ATTN_HAVE_BF16_GEMM
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  }();
  return has;
#else
  return false;
#endif
}

#ifdef ATTN_HAVE_BF16_GEMM
namespace detail::bf16_gemm {

inline constexpr int mr = 6;        // rows of A per micro-kernel call
inline constexpr int nv = 4;        // 16-column packets of B per micro-kernel call
inline constexpr index_t nr = 64;   // = nv · 16: the width of a packed panel of B
inline constexpr index_t kc = 256;  // inner length per packed block (128 pairs): a B panel is
                                    // 32 KiB, inside every target's L1
inline constexpr index_t mc = 144;  // rows of A per packed block (72 KiB, in L2)
inline constexpr index_t nc = 512;  // columns of B per packed block (256 KiB, in L2)

// The 16-bit lanes of a cvtne2ps_pbh(hi, lo) result (lo's 16 values, then hi's) reordered into
// pairs (lo[i], hi[i]): the pair of consecutive k for column (or row) i.
ATTN_TARGET_AVX512_BF16 inline __m512i interleave_halves() {
  alignas(64) static constexpr std::array<std::uint16_t, 32> order = [] {
    std::array<std::uint16_t, 32> o{};
    for (int i = 0; i < 16; ++i) {
      o[static_cast<std::size_t>(2 * i)] = static_cast<std::uint16_t>(i);
      o[static_cast<std::size_t>(2 * i + 1)] = static_cast<std::uint16_t>(16 + i);
    }
    return o;
  }();
  return _mm512_load_si512(order.data());
}

// The first `count` lanes of 16 (none when count <= 0).
inline __mmask16 lanes(index_t count) {
  if (count <= 0) return 0;
  return count >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << count) - 1u);
}

// Packs (x[i], y[i]) for i < count (16 at a time; zero past count, and y = 0 when y is null):
// the bf16 pairs of two rows that hold consecutive k. out receives count pairs (32-bit words).
ATTN_TARGET_AVX512_BF16 inline void pack_pairs_across(const float* x, const float* y, index_t count,
                                                      std::uint32_t* out) {
  const __m512i order = interleave_halves();
  for (index_t i = 0; i < count; i += 16) {
    const __mmask16 m = lanes(count - i);
    const __m512 lo = _mm512_maskz_loadu_ps(m, x + i);
    const __m512 hi = y ? _mm512_maskz_loadu_ps(m, y + i) : _mm512_setzero_ps();
    const __m512i both = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
    _mm512_mask_storeu_epi32(out + i, m, _mm512_permutexvar_epi16(order, both));
  }
}

// The pairs of a row holding k contiguously: pair p = (x[2p], x[2p + 1]) for 2p < count (a zero
// second half when count is odd), written to out[p · stride].
ATTN_TARGET_AVX512_BF16 inline void pack_pairs_along(const float* x, index_t count,
                                                     std::uint32_t* out, index_t stride) {
  const __m512i step =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(static_cast<int>(stride)));
  for (index_t e = 0; e < count; e += 32) {
    const __m512 lo = _mm512_maskz_loadu_ps(lanes(count - e), x + e);
    const __m512 hi = _mm512_maskz_loadu_ps(lanes(count - e - 16), x + e + 16);
    const __m512i pairs = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
    const __mmask16 m = lanes((count - e + 1) / 2);
    if (stride == 1)
      _mm512_mask_storeu_epi32(out + e / 2, m, pairs);
    else
      _mm512_mask_i32scatter_epi32(out + (e / 2) * stride, m, step, pairs, 4);
  }
}

// op(B)[k0 : k0 + kn, j0 : j0 + nn] into panels of nr columns, each [kp pairs][nr][2] bf16 (kp =
// ceil(kn / 2)), zero past kn and past nn. B is stored [k, n] (ldb) or, when tb, [n, k].
ATTN_TARGET_AVX512_BF16 inline void pack_b(const float* b, bool tb, index_t ldb, index_t k0,
                                           index_t kn, index_t j0, index_t nn, std::uint32_t* out) {
  const index_t kp = (kn + 1) / 2, panels = (nn + nr - 1) / nr;
  for (index_t q = 0; q < panels; ++q) {
    std::uint32_t* panel = out + q * kp * nr;
    const index_t c0 = j0 + q * nr, width = std::min(nr, j0 + nn - c0);
    if (!tb) {
      for (index_t p = 0; p < kp; ++p) {
        const float* x = b + (k0 + 2 * p) * ldb + c0;
        pack_pairs_across(x, 2 * p + 1 < kn ? x + ldb : nullptr, width, panel + p * nr);
        if (width < nr) std::fill(panel + p * nr + width, panel + (p + 1) * nr, 0u);
      }
    } else {
      for (index_t c = 0; c < width; ++c)
        pack_pairs_along(b + (c0 + c) * ldb + k0, kn, panel + c, nr);
      for (index_t p = 0; p < kp && width < nr; ++p)
        std::fill(panel + p * nr + width, panel + (p + 1) * nr, 0u);
    }
  }
}

// op(A)[i0 : i0 + mn, k0 : k0 + kn] as pairs of k. A stored [m, k] (not ta): row-major per row,
// pair (r, p) at out[r · kp + p]; stored [k, m] (ta): pair (r, p) at out[p · mn + r]. The
// micro-kernel reads pair (r, p) at a[r · ars + p · aps] with the strides a_strides returns.
ATTN_TARGET_AVX512_BF16 inline void pack_a(const float* a, bool ta, index_t lda, index_t i0,
                                           index_t mn, index_t k0, index_t kn, std::uint32_t* out) {
  const index_t kp = (kn + 1) / 2;
  if (!ta) {
    for (index_t r = 0; r < mn; ++r) pack_pairs_along(a + (i0 + r) * lda + k0, kn, out + r * kp, 1);
  } else {
    for (index_t p = 0; p < kp; ++p) {
      const float* x = a + (k0 + 2 * p) * lda + i0;
      pack_pairs_across(x, 2 * p + 1 < kn ? x + lda : nullptr, mn, out + p * mn);
    }
  }
}

// C[MR, NV packets] (+)= Σ_p A-pair(r, p) · B-pair(p, :), the last packet's columns limited to
// `last` (its stores and, when accumulating, its loads). Without accumulate C is not read.
template <int MR, int NV>
ATTN_TARGET_AVX512_BF16 void kernel(index_t kp, const std::uint32_t* a, index_t ars, index_t aps,
                                    const std::uint32_t* b, float* c, index_t ldc, bool accumulate,
                                    __mmask16 last) {
  __m512 acc[MR][NV];
ATTN_BF16_UNROLL
  for (int r = 0; r < MR; ++r)
ATTN_BF16_UNROLL
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = v == NV - 1 ? last : __mmask16(0xffff);
      acc[r][v] = accumulate ? _mm512_maskz_loadu_ps(m, c + r * ldc + v * 16) : _mm512_setzero_ps();
    }
  for (index_t p = 0; p < kp; ++p) {
    __m512bh bv[NV];
ATTN_BF16_UNROLL
    for (int v = 0; v < NV; ++v)
      bv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + p * nr + v * 16));
ATTN_BF16_UNROLL
    for (int r = 0; r < MR; ++r) {
      const __m512bh x =
          reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(a[r * ars + p * aps])));
ATTN_BF16_UNROLL
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], x, bv[v]);
    }
  }
ATTN_BF16_UNROLL
  for (int r = 0; r < MR; ++r)
ATTN_BF16_UNROLL
    for (int v = 0; v < NV; ++v)
      _mm512_mask_storeu_ps(c + r * ldc + v * 16, v == NV - 1 ? last : __mmask16(0xffff),
                            acc[r][v]);
}

using Kernel = void (*)(index_t, const std::uint32_t*, index_t, index_t, const std::uint32_t*,
                        float*, index_t, bool, __mmask16);

// The kernel for rows (1..mr) and packets (1..nv).
inline Kernel kernel_for(index_t rows, index_t packets) {
  static constexpr auto table = []<int... I>(std::integer_sequence<int, I...>) {
    return std::array<Kernel, sizeof...(I)>{&kernel<I / nv + 1, I % nv + 1>...};
  }
  (std::make_integer_sequence<int, mr * nv>{});
  return table[static_cast<std::size_t>((rows - 1) * nv + (packets - 1))];
}

// C [m, n] (row stride ldc) (+)= op(A) op(B), single-threaded; the operands as in
// detail::strided_gemm (gemm.hpp). k > 0.
ATTN_TARGET_AVX512_BF16 inline void strided_gemm(const float* a, bool ta, index_t lda,
                                                 const float* b, bool tb, index_t ldb, float* c,
                                                 index_t ldc, index_t m, index_t n, index_t k,
                                                 bool accumulate) {
  thread_local std::vector<std::uint32_t> packed_b, packed_a;
  const index_t kp_max = (std::min(kc, k) + 1) / 2;
  packed_b.resize(static_cast<std::size_t>(kp_max * ((std::min(nc, n) + nr - 1) / nr) * nr));
  packed_a.resize(static_cast<std::size_t>(kp_max * std::min(mc, m)));
  for (index_t jc = 0; jc < n; jc += nc) {
    const index_t nn = std::min(nc, n - jc);
    for (index_t pc = 0; pc < k; pc += kc) {
      const index_t kn = std::min(kc, k - pc), kp = (kn + 1) / 2;
      pack_b(b, tb, ldb, pc, kn, jc, nn, packed_b.data());
      const bool add = accumulate || pc > 0;
      for (index_t ic = 0; ic < m; ic += mc) {
        const index_t mn = std::min(mc, m - ic);
        pack_a(a, ta, lda, ic, mn, pc, kn, packed_a.data());
        const index_t ars = ta ? 1 : kp, aps = ta ? mn : 1;
        for (index_t jr = 0; jr < nn; jr += nr) {
          const index_t width = std::min(nr, nn - jr), packets = (width + 15) / 16;
          const __mmask16 last = lanes(width - (packets - 1) * 16);
          const std::uint32_t* bp = packed_b.data() + (jr / nr) * kp * nr;
          for (index_t ir = 0; ir < mn; ir += mr) {
            const index_t rows = std::min<index_t>(mr, mn - ir);
            kernel_for(rows, packets)(kp, packed_a.data() + ir * ars, ars, aps, bp,
                                      c + (ic + ir) * ldc + jc + jr, ldc, add, last);
          }
        }
      }
    }
  }
}

}  // namespace detail::bf16_gemm
#endif

}  // namespace attn
