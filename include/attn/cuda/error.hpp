// attn/cuda/error.hpp: ATTN_CUDA_CHECK and ATTN_CUBLAS_CHECK, which turn a failed CUDA runtime or
// cuBLAS call into an attn::cuda_error naming the call, the error and where it happened.
// Does not reset the device or clear sticky errors: after one, every later call fails too.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "../core/error.hpp"

namespace attn::cuda::detail {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                          int line) {
  throw cuda_error(attn::detail::message(call, " failed: ", cudaGetErrorString(status), " (",
                                         cudaGetErrorName(status), ") at ", file, ":", line));
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, const char* call,
                                            const char* file, int line) {
  throw cuda_error(attn::detail::message(call, " failed: ", cublasGetStatusString(status), " (",
                                         cublasGetStatusName(status), ") at ", file, ":", line));
}

}  // namespace attn::cuda::detail

// ATTN_CUDA_CHECK(cudaMalloc(&p, n)): always on; throws attn::cuda_error when the call does not
// return cudaSuccess.
#define ATTN_CUDA_CHECK(call)                                                               \
  do {                                                                                      \
    const cudaError_t attn_cuda_status_ = (call);                                           \
    if (attn_cuda_status_ != cudaSuccess) [[unlikely]]                                      \
      ::attn::cuda::detail::throw_cuda_error(attn_cuda_status_, #call, __FILE__, __LINE__); \
  } while (false)

// ATTN_CUBLAS_CHECK(cublasSgemm(...)): the same for cuBLAS status codes.
#define ATTN_CUBLAS_CHECK(call)                                                                 \
  do {                                                                                          \
    const cublasStatus_t attn_cublas_status_ = (call);                                          \
    if (attn_cublas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                              \
      ::attn::cuda::detail::throw_cublas_error(attn_cublas_status_, #call, __FILE__, __LINE__); \
  } while (false)
