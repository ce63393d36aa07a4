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
