// attn/cuda/blas.cuh: a cuBLAS handle with RAII, and row-major GEMMs on column-major cuBLAS
// (attn's tensors are row-major). Does not choose math modes: cuBLAS's default (FP32, no TF32).
#pragma once

#include <cublas_v2.h>

#include <utility>

#include "error.hpp"

namespace attn::cuda {

// cuBLAS handle with RAII, bound to the default stream.
class CublasHandle {
 public:
  CublasHandle() { ATTN_CUBLAS_CHECK(cublasCreate(&handle_)); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  CublasHandle(CublasHandle&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  CublasHandle& operator=(CublasHandle&& o) noexcept {
    std::swap(handle_, o.handle_);
    return *this;
  }
  ~CublasHandle() {
    if (handle_) static_cast<void>(cublasDestroy(handle_));  // cannot throw here (see DeviceBuffer)
  }
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

// The column-major (cuBLAS) call that computes the row-major product C [M, N] = op(A) op(B),
// op(A) [M, K], op(B) [K, N], A stored [M, K] or, when trans_a, [K, M] (likewise B). A row-major
// matrix read column-major is its transpose, so cuBLAS is asked for Cᵀ = op(B)ᵀ op(A)ᵀ: B
// first, then A, with the same transpose flags and each matrix's row length as its leading
// dimension. (The tests run this mapping through a plain column-major GEMM on the CPU.)
struct ColumnMajorGemm {
  bool trans_first, trans_second;  // op of the first operand (B) and of the second (A)
  int m, n, k;                     // Cᵀ is [m, n] = [N, M], the inner dimension K
  int ld_first, ld_second, ldc;
};
inline ColumnMajorGemm column_major_gemm(bool trans_a, bool trans_b, int M, int N, int K) {
  return {trans_b, trans_a, N, M, K, trans_b ? K : N, trans_a ? M : K, N};
}

// C = alpha op(A) op(B) + beta C, row-major (see column_major_gemm), FP32 without TF32.
inline void gemm_row_major(cublasHandle_t h, bool trans_a, bool trans_b, int M, int N, int K,
                           float alpha, const float* A, const float* B, float beta, float* C) {
  if (M == 0 || N == 0) return;
  const ColumnMajorGemm c = column_major_gemm(trans_a, trans_b, M, N, K);
  ATTN_CUBLAS_CHECK(cublasSgemm(h, c.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N,
                                c.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N, c.m, c.n, c.k, &alpha,
                                B, c.ld_first, A, c.ld_second, &beta, C, c.ldc));
}

}  // namespace attn::cuda
