// attn/cuda/timing.cuh: the median time of a GPU workload, measured with CUDA events around each
// run (for benchmarks and examples). Does not synchronise anything but its own events.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "error.hpp"

namespace attn::cuda {

// Median milliseconds of `reps` runs of f() on `stream`, after one untimed warm-up run.
template <class F>
double median_ms(int reps, F&& f, cudaStream_t stream = nullptr) {
  f();
  cudaEvent_t start, stop;
  ATTN_CUDA_CHECK(cudaEventCreate(&start));
  ATTN_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    ATTN_CUDA_CHECK(cudaEventRecord(start, stream));
    f();
    ATTN_CUDA_CHECK(cudaEventRecord(stop, stream));
    ATTN_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    ATTN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  ATTN_CUDA_CHECK(cudaEventDestroy(start));
  ATTN_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace attn::cuda
