// attn/core/gemm.hpp: C = op(A) op(B) + beta C on raw row-major buffers through Eigen's GEMM,
// split into output blocks fixed by the sizes (not the thread count) and run one block per
// thread, so every element is computed identically with 1 or many threads.
// Does not rely on Eigen's own threading, whose result changes with the thread count.
#pragma once

#include <Eigen/Core>
#include <algorithm>

#include "parallel.hpp"
#include "tensor.hpp"

namespace attn {

namespace detail {

// One block of the product, single-threaded: C[r0:r0+m, c0:c0+n] (+)= op(A)[rows] op(B)[cols].
template <class T>
void gemm_block(const T* a, bool ta, const T* b, bool tb, T* c, index_t m_total, index_t n_total,
                index_t k, index_t r0, index_t m, index_t c0, index_t n, bool accumulate) {
  Eigen::Map<RowMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>> out(
      c + r0 * n_total + c0, m, n, Eigen::OuterStride<>(n_total));
  // Four spellings so that Eigen sees plain (possibly transposed) maps and picks its GEMM kernel.
  auto run = [&](const auto& lhs, const auto& rhs) {
    if (accumulate)
      out.noalias() += lhs * rhs;
    else
      out.noalias() = lhs * rhs;
  };
  const index_t ra = ta ? k : m_total, ca = ta ? m_total : k;
  const index_t rb = tb ? n_total : k, cb = tb ? k : n_total;
  ConstMatrixMap<T> A(a, ra, ca), B(b, rb, cb);
  if (!ta && !tb)
    run(A.middleRows(r0, m), B.middleCols(c0, n));
  else if (!ta && tb)
    run(A.middleRows(r0, m), B.middleRows(c0, n).transpose());
  else if (ta && !tb)
    run(A.middleCols(r0, m).transpose(), B.middleCols(c0, n));
  else
    run(A.middleCols(r0, m).transpose(), B.middleRows(c0, n).transpose());
}

}  // namespace detail

// Row/column block size for splitting an output dimension of length n: about 8 blocks, none
// smaller than 256 (each block repacks the whole other operand, so small blocks cost). Depends
// only on n.
constexpr index_t gemm_block_size(index_t n) {
  return std::max<index_t>(256, (n / 8 + 15) / 16 * 16);
}

// C [M, N] = op(A) op(B) (+ C when accumulate), with op(A) [M, K] and op(B) [K, N]; A is stored
// [M, K] or, when ta, [K, M]; B is stored [K, N] or, when tb, [N, K]. Parallel over blocks of
// the longer output dimension; call it from outside any parallel region.
template <class T>
void gemm(const T* a, bool ta, const T* b, bool tb, T* c, index_t m, index_t n, index_t k,
          bool accumulate = false) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) std::fill(c, c + m * n, T{0});
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
  // The team is opened even when there are fewer blocks than threads: inside a team of more
  // than one thread Eigen never starts threads of its own, which would change the rounding.
  // Below the threshold the product is too small for Eigen to split it either.
  [[maybe_unused]] const bool parallel = 2.0 * double(m) * double(n) * double(k) >= 131072.0;
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

// The same product as one block; for use inside attn's parallel loops (batched matmul), where
// Eigen sees a running team and stays single-threaded.
template <class T>
void gemm_serial(const T* a, bool ta, const T* b, bool tb, T* c, index_t m, index_t n, index_t k,
                 bool accumulate = false) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) std::fill(c, c + m * n, T{0});
    return;
  }
  detail::gemm_block(a, ta, b, tb, c, m, n, k, 0, m, 0, n, accumulate);
}

}  // namespace attn
