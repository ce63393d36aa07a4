// attn/core/gemm.hpp: C = op(A) op(B) + beta C on raw row-major buffers, split into output blocks
// fixed by the sizes (not the thread count) and run one block per thread, so every element is
// computed identically with 1 or many threads. Each block runs single-threaded on one of two
// backends: Eigen's GEMM, or OpenBLAS's sgemm/dgemm when attn is built with ATTN_BLAS=OpenBLAS.
// Does not rely on Eigen's or OpenBLAS's own threading, whose results change with the thread count.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <string>
#include <type_traits>
#include <vector>

#include "error.hpp"
#include "gemm_bf16.hpp"
#include "parallel.hpp"
#include "tensor.hpp"

#ifdef ATTN_USE_OPENBLAS
#include <cblas.h>

#include <cstring>
#endif

namespace attn {

// Which library multiplies the blocks. Both give thread-count-independent results; they round
// differently from each other.
enum class GemmBackend { eigen, openblas };

// True when attn was built against OpenBLAS (CMake option ATTN_BLAS=OpenBLAS, the default when
// OpenBLAS is installed).
constexpr bool have_openblas() {
#ifdef ATTN_USE_OPENBLAS
  return true;
#else
  return false;
#endif
}

namespace detail {

#ifdef ATTN_USE_OPENBLAS
// OpenBLAS picks its kernels for the CPU at load time, unless OPENBLAS_CORETYPE names older ones.
// When attn itself is compiled for AVX-512 (-march=native on such a machine), Eigen's AVX-512
// GEMM beats OpenBLAS's AVX2 (Haswell) kernels, so OpenBLAS is the default only when its kernels
// are AVX-512 ones too (or attn is not compiled for AVX-512). Measured in docs/performance.md.
inline bool openblas_kernels_are_wide() {
#ifdef __AVX512F__
  const char* core = openblas_get_corename();
  if (core == nullptr) return false;
  for (const char* wide : {"skylakex", "cooperlake", "sapphirerapids", "zen4", "zen5"}) {
    std::string name(core);
    for (char& ch : name) ch = static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
    if (name == wide) return true;
  }
  return false;
#else
  return true;
#endif
}
#endif

inline std::atomic<GemmBackend>& gemm_backend_state() {
#ifdef ATTN_USE_OPENBLAS
  static std::atomic<GemmBackend> backend{openblas_kernels_are_wide() ? GemmBackend::openblas
                                                                      : GemmBackend::eigen};
#else
  static std::atomic<GemmBackend> backend{GemmBackend::eigen};
#endif
  return backend;
}

}  // namespace detail

// The backend gemm uses now: OpenBLAS when built with it and its kernels are as wide as attn's
// own (see above), else Eigen.
inline GemmBackend gemm_backend() {
  return detail::gemm_backend_state().load(std::memory_order_relaxed);
}

// Chooses the backend (benchmarks compare the two in one process). Throws value_error for
// OpenBLAS when attn was built without it. Call it outside parallel regions.
inline void set_gemm_backend(GemmBackend b) {
  ATTN_CHECK(b == GemmBackend::eigen || have_openblas(), value_error,
             "set_gemm_backend: attn was built without OpenBLAS (CMake option ATTN_BLAS=OpenBLAS)");
  detail::gemm_backend_state().store(b, std::memory_order_relaxed);
}

// How float products are computed. float32: in float (the default). bf16: both operands rounded to
// bfloat16, each product exact, the sums in float (core/gemm_bf16.hpp), on CPUs with AVX512_BF16
// (Zen 4, Zen 5, Intel Cooper Lake and Sapphire Rapids on): twice the multiply rate of float, at
// the accuracy of PyTorch's CPU bf16 autocast. Elsewhere bf16 falls back to float32. Applies to
// every float product gemm and gemm_serial do except vector ones (m or n = 1, which are limited by
// memory, not by multiplies); double products are always double.
enum class MatmulPrecision { float32, bf16 };

namespace detail {
inline std::atomic<MatmulPrecision>& matmul_precision_state() {
  static std::atomic<MatmulPrecision> precision{MatmulPrecision::float32};
  return precision;
}
}  // namespace detail

// Requests the precision of float products (see MatmulPrecision). Call it outside parallel
// regions; products already running are not affected.
inline void set_matmul_precision(MatmulPrecision p) {
  detail::matmul_precision_state().store(p, std::memory_order_relaxed);
}

// The precision float products use now: bf16 only when requested and this CPU has AVX512_BF16.
inline MatmulPrecision matmul_precision() {
  const MatmulPrecision requested =
      detail::matmul_precision_state().load(std::memory_order_relaxed);
  return requested == MatmulPrecision::bf16 && cpu_has_avx512_bf16() ? MatmulPrecision::bf16
                                                                     : MatmulPrecision::float32;
}

// "float32" or "bf16 (AVX512_BF16)": for benchmark and trainer output.
inline std::string matmul_precision_name(MatmulPrecision p = matmul_precision()) {
  return p == MatmulPrecision::bf16 ? "bf16 (AVX512_BF16)" : "float32";
}

// "Eigen 3.4.0", or "OpenBLAS 0.3.21 (Cooperlake kernels)": for benchmark output.
inline std::string gemm_backend_name(GemmBackend b = gemm_backend()) {
#ifdef ATTN_USE_OPENBLAS
  if (b == GemmBackend::openblas) {
    std::string s = "OpenBLAS";
    const char* config = openblas_get_config();  // "OpenBLAS 0.3.21 DYNAMIC_ARCH ..."
    if (config != nullptr && std::strncmp(config, "OpenBLAS ", 9) == 0) {
      const char* v = config + 9;
      s += ' ';
      while (*v != '\0' && *v != ' ') s += *v++;
    }
    const char* core = openblas_get_corename();
    return s + " (" + (core ? core : "?") + " kernels)";
  }
#endif
  (void)b;
  return "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." +
         std::to_string(EIGEN_MAJOR_VERSION) + "." + std::to_string(EIGEN_MINOR_VERSION);
}

namespace detail {

// C [m, n] (row stride ldc) (+)= op(A) op(B), single-threaded, on operands stored row-major with
// row strides lda and ldb: A is [m, k] (or [k, m] when ta), B is [k, n] (or [n, k] when tb).
// Runs OpenBLAS's OpenMP build when it is the backend: it stays single-threaded inside a parallel
// region, and outside one with one thread or below its own threading threshold (which every
// unsplit product here is). beta = 0 does not read C, so NaN in C does not leak into the result.
// A vector product (m or n = 1: each step of cached generation) always runs Eigen, which does it
// as a GEMV: OpenBLAS 0.3.21 sends it through its whole GEMM driver, packing both operands (only
// its AVX-512 kernels have a small-matrix path), which made cached generation 2.4x slower with its
// AVX2 (Zen) kernels; measured in docs/performance.md.
// Under MatmulPrecision::bf16 a float product (not a vector one) runs the bf16 kernel instead.
template <class T>
void strided_gemm(const T* a, bool ta, index_t lda, const T* b, bool tb, index_t ldb, T* c,
                  index_t ldc, index_t m, index_t n, index_t k, bool accumulate) {
#ifdef ATTN_HAVE_BF16_GEMM
  if constexpr (std::is_same_v<T, float>) {
    if (m > 1 && n > 1 && k > 0 && matmul_precision() == MatmulPrecision::bf16) {
      bf16_gemm::strided_gemm(a, ta, lda, b, tb, ldb, c, ldc, m, n, k, accumulate);
      return;
    }
  }
#endif
#ifdef ATTN_USE_OPENBLAS
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (gemm_backend() == GemmBackend::openblas && m > 1 && n > 1) {
      const auto tra = ta ? CblasTrans : CblasNoTrans, trb = tb ? CblasTrans : CblasNoTrans;
      const auto M = static_cast<blasint>(m), N = static_cast<blasint>(n),
                 K = static_cast<blasint>(k);
      const auto la = static_cast<blasint>(lda), lb = static_cast<blasint>(ldb),
                 lc = static_cast<blasint>(ldc);
      if constexpr (std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, tra, trb, M, N, K, 1.0f, a, la, b, lb, accumulate ? 1.0f : 0.0f,
                    c, lc);
      else
        cblas_dgemm(CblasRowMajor, tra, trb, M, N, K, 1.0, a, la, b, lb, accumulate ? 1.0 : 0.0, c,
                    lc);
      return;
    }
  }
#endif
  using Strided = Eigen::OuterStride<>;
  Eigen::Map<RowMatrix<T>, Eigen::Unaligned, Strided> out(c, m, n, Strided(ldc));
  const Eigen::Map<const RowMatrix<T>, Eigen::Unaligned, Strided> A(a, ta ? k : m, ta ? m : k,
                                                                    Strided(lda));
  const Eigen::Map<const RowMatrix<T>, Eigen::Unaligned, Strided> B(b, tb ? n : k, tb ? k : n,
                                                                    Strided(ldb));
  // Four spellings so that Eigen sees plain (possibly transposed) maps and picks its GEMM kernel.
  auto run = [&](const auto& lhs, const auto& rhs) {
    if (accumulate)
      out.noalias() += lhs * rhs;
    else
      out.noalias() = lhs * rhs;
  };
  if (!ta && !tb)
    run(A, B);
  else if (!ta && tb)
    run(A, B.transpose());
  else if (ta && !tb)
    run(A.transpose(), B);
  else
    run(A.transpose(), B.transpose());
}

// One block of the full product C [m_total, n_total] (+)= op(A) op(B) with inner length k:
// C[r0:r0+m, c0:c0+n], from op(A)'s rows r0.. and op(B)'s columns c0.., single-threaded.
template <class T>
void gemm_block(const T* a, bool ta, const T* b, bool tb, T* c, index_t m_total, index_t n_total,
                index_t k, index_t r0, index_t m, index_t c0, index_t n, bool accumulate) {
  strided_gemm(ta ? a + r0 : a + r0 * k, ta, ta ? m_total : k,  // A's columns (ta) or rows
               tb ? b + c0 * k : b + c0, tb, tb ? k : n_total,  // B's rows (tb) or columns
               c + r0 * n_total + c0, n_total, m, n, k, accumulate);
}

// Scratch for the partial products of an inner-dimension split (grows, never shrinks).
template <class T>
std::vector<T>& gemm_partials() {
  thread_local std::vector<T> partials;
  return partials;
}

}  // namespace detail

// Row/column block size for splitting an output dimension of length n: 1, 2, 4 or 8 blocks of
// equal length (a multiple of 16; the last one may be shorter), none below 256 from n = 512 on
// (each block repacks the whole other operand, so small blocks cost; 256 < n < 512 is cut in two
// halves). A power-of-two count keeps 2 or 4 threads evenly loaded: a weight gradient 768 wide
// used to be 3 blocks of 256, which left one thread of two idle for a third of the product.
// Depends only on n.
constexpr index_t gemm_block_size(index_t n) {
  if (n <= 256) return 256;
  const index_t blocks = n >= 2048 ? 8 : n >= 1024 ? 4 : 2;
  return ((n + blocks - 1) / blocks + 15) / 16 * 16;
}

// Pieces the inner dimension k is cut into when the output is small (m, n <= 512: one or two
// blocks, too few for the threads) but k is long: weight gradients [D, D] summed over B·T rows.
// 2 or 4 pieces of at least 1024 (a power of two, as the blocks above), computed in parallel and
// added in piece order, so the rounding depends on the sizes only. Without the split such a
// product would run on one or two threads, unevenly when the output is 384 wide (blocks of 256 and
// 128). For larger outputs the split into blocks is as fast and needs no partial sums.
constexpr index_t gemm_inner_pieces(index_t m, index_t n, index_t k) {
  if (std::max(m, n) > 512) return 1;
  return k >= 4096 ? 4 : k >= 2048 ? 2 : 1;
}

// C [M, N] = op(A) op(B) (+ C when accumulate), with op(A) [M, K] and op(B) [K, N]; A is stored
// [M, K] or, when ta, [K, M]; B is stored [K, N] or, when tb, [N, K]. Parallel over blocks of
// the longer output dimension (or pieces of K, see gemm_inner_pieces); call it from outside any
// parallel region.
template <class T>
void gemm(const T* a, bool ta, const T* b, bool tb, T* c, index_t m, index_t n, index_t k,
          bool accumulate = false) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) std::fill(c, c + m * n, T{0});
    return;
  }
  // The team is opened even when there is one piece of work: inside a team of more than one
  // thread Eigen never starts threads of its own, which would change the rounding. Below the
  // threshold the product is too small for Eigen to split it either.
  [[maybe_unused]] const bool parallel = 2.0 * double(m) * double(n) * double(k) >= 131072.0;
  const index_t pieces = gemm_inner_pieces(m, n, k);
  if (pieces > 1) {
    // C (+)= Σ_p op(A)[:, K_p] op(B)[K_p, :]: piece 0 into C, the others into scratch, then
    // added to C in piece order.
    const index_t kp = (k + pieces - 1) / pieces, mn = m * n;
    std::vector<T>& partial = detail::gemm_partials<T>();
    if (partial.size() < static_cast<std::size_t>((pieces - 1) * mn))
      partial.resize(static_cast<std::size_t>((pieces - 1) * mn));
    T* scratch = partial.data();
    auto piece = [&](index_t p) {
      const index_t k0 = p * kp, kn = std::min(kp, k - k0);
      // Piece p is op(A)'s columns [k0, k0 + kn) (A's rows when ta) and op(B)'s rows (B's
      // columns when tb), read in place with the full operands' row strides.
      const T* ap = ta ? a + k0 * m : a + k0;
      const T* bp = tb ? b + k0 : b + k0 * n;
      T* out = p == 0 ? c : scratch + (p - 1) * mn;
      detail::strided_gemm(ap, ta, ta ? m : k, bp, tb, tb ? k : n, out, n, m, n, kn,
                           p == 0 && accumulate);
    };
#ifdef _OPENMP
#pragma omp parallel if (parallel)
    {
#pragma omp for schedule(static)
      for (index_t p = 0; p < pieces; ++p) piece(p);
    }
#else
    for (index_t p = 0; p < pieces; ++p) piece(p);
#endif
    for (index_t p = 1; p < pieces; ++p) {
      const T* s = scratch + (p - 1) * mn;
      for (index_t i = 0; i < mn; ++i) c[i] += s[i];
    }
    return;
  }
  const bool split_rows = m >= n;
  const index_t len = split_rows ? m : n;
  const index_t bs = gemm_block_size(len);
  const index_t blocks = block_count(len, bs);
  auto block = [&](index_t blk) {
    const index_t lo = blk * bs, cnt = std::min(bs, len - lo);
    if (split_rows)
      detail::gemm_block(a, ta, b, tb, c, m, n, k, lo, cnt, 0, n, accumulate);
    else
      detail::gemm_block(a, ta, b, tb, c, m, n, k, 0, m, lo, cnt, accumulate);
  };
#ifdef _OPENMP
#pragma omp parallel if (parallel)
  {
#pragma omp for schedule(static)
    for (index_t blk = 0; blk < blocks; ++blk) block(blk);
  }
#else
  for (index_t blk = 0; blk < blocks; ++blk) block(blk);
#endif
}

// The same product as one block, on the calling thread; for use inside attn's parallel loops
// (batched matmul). Inside a running team Eigen and OpenBLAS stay single-threaded by themselves;
// outside one (a loop that ran its lone task without a team) SerialScope keeps them so.
template <class T>
void gemm_serial(const T* a, bool ta, const T* b, bool tb, T* c, index_t m, index_t n, index_t k,
                 bool accumulate = false) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) std::fill(c, c + m * n, T{0});
    return;
  }
  const SerialScope serial;
  detail::gemm_block(a, ta, b, tb, c, m, n, k, 0, m, 0, n, accumulate);
}

// The float and double products: src/gemm.cpp instantiates them into attn::compiled
// (PREFIX `template`); with the compiled part (ATTN_COMPILED) every other file declares them
// `extern template`, so it does not compile Eigen's GEMM kernels again.
#define ATTN_GEMM_INSTANTIATIONS(PREFIX, T)                                                 \
  PREFIX void detail::strided_gemm<T>(const T*, bool, index_t, const T*, bool, index_t, T*, \
                                      index_t, index_t, index_t, index_t, bool);            \
  PREFIX void gemm<T>(const T*, bool, const T*, bool, T*, index_t, index_t, index_t, bool); \
  PREFIX void gemm_serial<T>(const T*, bool, const T*, bool, T*, index_t, index_t, index_t, bool);
#ifdef ATTN_COMPILED
ATTN_GEMM_INSTANTIATIONS(extern template, float)
ATTN_GEMM_INSTANTIATIONS(extern template, double)
#endif

}  // namespace attn
