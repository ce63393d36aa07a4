// attn/attention/tile_gemm.hpp: register-blocked products and softmax row steps on the small
// tiles of the fused attention kernel (tens to hundreds of rows, operands in L1/L2), written with
// Eigen's packet primitives so they vectorise on every target Eigen knows (AVX-512: 16 floats).
// Does not block for caches, pack its operands or thread: core/gemm.hpp does large products;
// here the caller lays the operands out once per head (see tile_layout.hpp).
//
// Why not Eigen's GEMM per tile: it repacks both operands on every call and its AVX-512 kernel
// works in 48-row panels, so a 64 x 64 x 64 tile product spends much of its time outside the
// multiply-add loop. The kernel below reads A by broadcasting single elements (any strides, so
// Aᵀ costs nothing) and B in whole packets from rows already laid out contiguously.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "../core/fast_math.hpp"
#include "../core/shape.hpp"

namespace attn::detail {

template <class T>
using Packet = typename Eigen::internal::packet_traits<T>::type;

// Elements per packet (16 floats with AVX-512, 8 with AVX, 1 without vectorisation).
template <class T>
inline constexpr index_t packet_size = Eigen::internal::unpacket_traits<Packet<T>>::size;

// Columns rounded up to whole packets: the padded width of every B and C operand.
template <class T>
constexpr index_t packet_round(index_t n) {
  return (n + packet_size<T> - 1) / packet_size<T> * packet_size<T>;
}

// The register block of the kernel: MR rows x NV packets of accumulators, plus NV packets of B
// and one broadcast of A live at once. 32 vector registers (AVX-512): 6 x 4; 16 (AVX): 6 x 2.
inline constexpr int tile_nv = EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS >= 32 ? 4 : 2;
inline constexpr int tile_mr =
    (EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS - tile_nv - 1) / tile_nv >= 6
        ? 6
        : (EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS - tile_nv - 1) / tile_nv;

// f(integral_constant<int, 0>), ..., f(integral_constant<int, N - 1>): a loop unrolled at compile
// time, so that arrays of packets indexed by it stay in registers.
template <int N, class F>
EIGEN_ALWAYS_INLINE void static_for(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) {
    (f(std::integral_constant<int, I>{}), ...);
  }
  (std::make_integer_sequence<int, N>{});
}

// C[MR, NV packets] (+)= Σ_kk A(r, kk) B[kk, :], with A(r, kk) = a[r·ars + kk·acs] and the rows
// of B and C `ldb` and `ldc` apart.
template <int MR, int NV, class T>
void tile_kernel(index_t k, const T* a, index_t ars, index_t acs, const T* b, index_t ldb, T* c,
                 index_t ldc, bool accumulate) {
  using P = Packet<T>;
  using namespace Eigen::internal;
  constexpr index_t W = packet_size<T>;
  P acc[MR][NV];
  static_for<MR>([&](auto r) {
    static_for<NV>(
        [&](auto v) { acc[r][v] = accumulate ? ploadu<P>(c + r * ldc + v * W) : pset1<P>(T{0}); });
  });
  for (index_t kk = 0; kk < k; ++kk) {
    P bv[NV];
    static_for<NV>([&](auto v) { bv[v] = ploadu<P>(b + kk * ldb + v * W); });
    const T* ak = a + kk * acs;
    static_for<MR>([&](auto r) {
      const P x = pset1<P>(ak[r * ars]);
      static_for<NV>([&](auto v) { acc[r][v] = pmadd(x, bv[v], acc[r][v]); });
    });
  }
  static_for<MR>(
      [&](auto r) { static_for<NV>([&](auto v) { pstoreu(c + r * ldc + v * W, acc[r][v]); }); });
}

template <class T>
using TileKernel = void (*)(index_t, const T*, index_t, index_t, const T*, index_t, T*, index_t,
                            bool);

// The kernel for mr rows (1..tile_mr) and nv packets (1..tile_nv), from a table built at compile
// time: full blocks use tile_kernel<tile_mr, tile_nv>, the edges the smaller ones.
template <class T>
TileKernel<T> tile_kernel_for(int mr, int nv) {
  static constexpr auto table = []<int... I>(std::integer_sequence<int, I...>) {
    return std::array<TileKernel<T>, sizeof...(I)>{
        &tile_kernel<I / tile_nv + 1, I % tile_nv + 1, T>...};
  }
  (std::make_integer_sequence<int, tile_mr * tile_nv>{});
  return table[static_cast<std::size_t>((mr - 1) * tile_nv + (nv - 1))];
}

// C[m, n] (+)= A[m, k] B[k, n] with A(r, kk) = a[r·ars + kk·acs] (so Aᵀ is a = &M[0][0],
// ars = 1, acs = ld), B and C row-major with leading dimensions ldb and ldc. Columns are done in
// whole packets: B and C must have packet_round(n) readable / writable columns per row; the
// columns past n of C receive A times B's padding (zero if B's padding is zero).
template <class T>
void tile_gemm(index_t m, index_t n, index_t k, const T* a, index_t ars, index_t acs, const T* b,
               index_t ldb, T* c, index_t ldc, bool accumulate) {
  constexpr index_t W = packet_size<T>;
  const index_t np = (n + W - 1) / W;
  // Rows in as few blocks as tile_mr allows, of nearly equal height (64 = 9·6 + 2·5, not
  // 10·6 + 4): a short block keeps fewer accumulators busy per loaded packet of B.
  const index_t blocks = (m + tile_mr - 1) / tile_mr;
  if (blocks == 0) return;
  const index_t base = m / blocks, taller = m % blocks;  // the first `taller` get base + 1 rows
  for (index_t p0 = 0; p0 < np; p0 += tile_nv) {
    const int nv = static_cast<int>(std::min<index_t>(tile_nv, np - p0));
    index_t r0 = 0;
    for (index_t blk = 0; blk < blocks; ++blk) {
      const index_t mr = base + (blk < taller ? 1 : 0);
      tile_kernel_for<T>(static_cast<int>(mr), nv)(k, a + r0 * ars, ars, acs, b + p0 * W, ldb,
                                                   c + r0 * ldc + p0 * W, ldc, accumulate);
      r0 += mr;
    }
  }
}

// vec(j) for each whole packet [j, j + W) of [0, n), then one(j) for each element left over.
template <class T, class Vec, class One>
EIGEN_ALWAYS_INLINE void for_packets(index_t n, Vec&& vec, One&& one) {
  constexpr index_t W = packet_size<T>;
  index_t j = 0;
  for (; j + W <= n; j += W) vec(j);
  for (; j < n; ++j) one(j);
}

// row[0, n) ← alpha·row + bias (bias may be null: none); returns the maximum (−∞ stays −∞).
template <class T>
T scale_row_max(T* row, index_t n, T alpha, const T* bias) {
  using namespace Eigen::internal;
  const Packet<T> pa = pset1<Packet<T>>(alpha);
  Packet<T> mx = pset1<Packet<T>>(-std::numeric_limits<T>::infinity());
  T m = -std::numeric_limits<T>::infinity();
  for_packets<T>(
      n,
      [&](index_t j) {
        Packet<T> x = pmul(ploadu<Packet<T>>(row + j), pa);
        if (bias) x = padd(x, ploadu<Packet<T>>(bias + j));
        pstoreu(row + j, x);
        mx = pmax(mx, x);
      },
      [&](index_t j) {
        row[j] = row[j] * alpha + (bias ? bias[j] : T{0});
        m = std::max(m, row[j]);
      });
  return std::max(m, predux_max(mx));
}

// max(row[0, n)) (−∞ when empty). With `propagate_nan`, NaN when some element is NaN: the maxima
// of a call with non-finite inputs (non_finite.hpp); without, a NaN's effect is unspecified (the
// fast packet max).
template <class T, bool propagate_nan = false>
T row_max(const T* row, index_t n) {
  using namespace Eigen::internal;
  Packet<T> mx = pset1<Packet<T>>(-std::numeric_limits<T>::infinity());
  T m = -std::numeric_limits<T>::infinity();
  const auto max_of = [](T a, T b) {
    if constexpr (propagate_nan)
      if (std::isnan(a) || std::isnan(b)) return a + b;
    return std::max(a, b);
  };
  for_packets<T>(
      n,
      [&](index_t j) {
        if constexpr (propagate_nan)
          mx = pmax<Eigen::PropagateNaN>(mx, ploadu<Packet<T>>(row + j));
        else
          mx = pmax(mx, ploadu<Packet<T>>(row + j));
      },
      [&](index_t j) { m = max_of(m, row[j]); });
  if constexpr (propagate_nan)
    return max_of(m, predux_max<Eigen::PropagateNaN>(mx));
  else
    return max_of(m, predux_max(mx));
}

// e^x on a packet of floats for x <= 88.37, exactly 0 below −87.34 (so for −∞, a masked score):
// exp_fast's method (core/fast_math.hpp) with the polynomial evaluated as two chains at once.
// exp_row_sum uses it on packets of 4 and 8 floats, where Eigen's pexp (rounding by floor, 2^n
// built in two steps) takes 1.6 times as long, and 4 times on rows with masked entries (its result
// for −∞ is a denormal, slow to compute). Eigen's AVX-512 pexp is as fast as this and is kept.
// Measured by `bench_attention --exp` (docs/performance.md, "AVX2 code paths").
template <class P>
EIGEN_ALWAYS_INLINE P pexp_float(const P& x) {
  using namespace Eigen::internal;
  using C = ExpFloat;
  using Pi = typename unpacket_traits<P>::integer_packet;
  const P lo = pset1<P>(C::lo);
  const P xc = pmin(pmax(x, lo), pset1<P>(C::hi));
  const P t = pmadd(xc, pset1<P>(C::log2e), pset1<P>(C::shifter));
  const P n = psub(t, pset1<P>(C::shifter));
  const P r = pmadd(n, pset1<P>(-C::ln2_lo), pmadd(n, pset1<P>(-C::ln2_hi), xc));
  const P r2 = pmul(r, r);
  const P odd =
      pmadd(pmadd(pmadd(pset1<P>(C::p0), r, pset1<P>(C::p1)), r, pset1<P>(C::p2)), pmul(r2, r),
            pmadd(pmadd(pset1<P>(C::p3), r, pset1<P>(C::p4)), r, pset1<P>(C::p5)));
  const P er = pmadd(odd, r2, padd(r, pset1<P>(1.0f)));
  const Pi bits = plogical_shift_left<23>(padd(preinterpret<Pi>(t), pset1<Pi>(C::exponent_bias)));
  return pand(pmul(er, preinterpret<P>(bits)), pcmp_le(lo, x));
}

// e^x on any packet with −∞ giving exactly 0, by Eigen's pexp (which returns a tiny denormal for
// −∞).
template <class P>
EIGEN_ALWAYS_INLINE P pexp_masked(const P& x) {
  using namespace Eigen::internal;
  using T = typename unpacket_traits<P>::type;
  return pselect(pcmp_eq(x, pset1<P>(-std::numeric_limits<T>::infinity())), pzero(x), pexp(x));
}

// Whether exp_row_sum<T> takes pexp_float (packets of 4 or 8 floats) or pexp_masked.
template <class T>
inline constexpr bool use_pexp_float = std::is_same_v<T, float> &&
                                       (packet_size<T> > 1 && packet_size<T> <= 8);

// row[0, n) ← exp(row − shift) with −∞ (masked) entries exactly 0; returns the sum. The caller's
// shift is at least the row's maximum (a running maximum or the log-sum-exp), so the exponents
// are <= 0.
template <class T>
T exp_row_sum(T* row, index_t n, T shift) {
  using namespace Eigen::internal;
  using P = Packet<T>;
  constexpr T ninf = -std::numeric_limits<T>::infinity();
  const P ps = pset1<P>(shift);
  P sum = pset1<P>(T{0});
  T s = 0;
  for_packets<T>(
      n,
      [&](index_t j) {
        const P x = psub(ploadu<P>(row + j), ps);
        P e;
        if constexpr (use_pexp_float<T>)
          e = pexp_float(x);
        else
          e = pexp_masked(x);
        pstoreu(row + j, e);
        sum = padd(sum, e);
      },
      [&](index_t j) {
        row[j] = row[j] == ninf ? T{0} : std::exp(row[j] - shift);
        s += row[j];
      });
  return predux(sum) + s;
}

// row[0, n) ·= c.
template <class T>
void scale_row(T* row, index_t n, T c) {
  using namespace Eigen::internal;
  const Packet<T> pc = pset1<Packet<T>>(c);
  for_packets<T>(
      n, [&](index_t j) { pstoreu(row + j, pmul(ploadu<Packet<T>>(row + j), pc)); },
      [&](index_t j) { row[j] *= c; });
}

// dp[0, n) ← p ∘ (dp − d): the softmax backward dS = P ∘ (dP − D) for one row.
template <class T>
void softmax_grad_row(const T* p, T* dp, index_t n, T d) {
  using namespace Eigen::internal;
  const Packet<T> pd = pset1<Packet<T>>(d);
  for_packets<T>(
      n,
      [&](index_t j) {
        pstoreu(dp + j, pmul(ploadu<Packet<T>>(p + j), psub(ploadu<Packet<T>>(dp + j), pd)));
      },
      [&](index_t j) { dp[j] = p[j] * (dp[j] - d); });
}

}  // namespace attn::detail
