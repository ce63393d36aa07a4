// attn/core/host_device.hpp: ATTN_HOST_DEVICE marks a function that one definition serves on the
// CPU and, in a CUDA translation unit, on the GPU. Does nothing else; without nvcc it is empty.
//
// Functions marked with it (the policies' per-element math, the online-softmax merge, the
// kernels' block programs) may use only what both sides have: arithmetic, <cmath> functions of
// float/double, and other ATTN_HOST_DEVICE functions; no allocation, exceptions or Eigen.
#pragma once

#if defined(__CUDACC__)
#define ATTN_HOST_DEVICE __host__ __device__
#else
#define ATTN_HOST_DEVICE
#endif

// ATTN_EXEC_CHECK_DISABLE goes before an ATTN_HOST_DEVICE template whose instantiations may call
// host-only functions (mask::And<Causal, Padding>): nvcc then checks the call only where a device
// function really makes it, instead of warning for every host instantiation.
#if defined(__NVCC__)
#define ATTN_EXEC_CHECK_DISABLE _Pragma("nv_exec_check_disable")
#else
#define ATTN_EXEC_CHECK_DISABLE
#endif
