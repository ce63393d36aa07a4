// attn/core/parallel.hpp: OpenMP helpers that keep results independent of the thread count.
// Work is split into blocks whose boundaries depend only on the sizes, never on the number of
// threads, and every block is computed by one thread; reductions combine blocks in a fixed order.
// Does not use nested parallelism or Eigen's internal threads.
#pragma once

#include <algorithm>

#include "shape.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace attn {

// Threads attn's parallel loops use (OpenMP's max threads; 1 without OpenMP).
inline int num_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// Sets the thread count for attn's (and every other) OpenMP region of the calling thread.
inline void set_num_threads(int n) {
#ifdef _OPENMP
  omp_set_num_threads(std::max(1, n));
#else
  (void)n;
#endif
}

// While it lives, OpenMP regions opened by the calling thread, and the libraries that size their
// own threading by OpenMP's thread count (OpenBLAS built with OpenMP, Eigen's GEMM), run on one
// thread; outside a parallel region only (inside one they already do). For products that must
// stay on their thread even when no team is running: parallel_for runs a lone task, or one too
// small to share, on the calling thread without a team, and OpenBLAS would then start its own
// threads for each product of it (on a 2-core machine a materialised backward with one key/value
// head ran 1.3x slower on 2 threads than on 1 that way).
class SerialScope {
 public:
  SerialScope() {
#ifdef _OPENMP
    if (!omp_in_parallel() && (saved_ = omp_get_max_threads()) > 1) omp_set_num_threads(1);
#endif
  }
  ~SerialScope() {
#ifdef _OPENMP
    if (saved_ > 1) omp_set_num_threads(saved_);
#endif
  }
  SerialScope(const SerialScope&) = delete;
  SerialScope& operator=(const SerialScope&) = delete;

 private:
  [[maybe_unused]] int saved_ = 0;
};

// Calls f(i) for i in [0, n), in parallel when there is more than one item and the total work
// (n * cost_per_item, in rough flops) is worth waking threads for. Items must be independent.
template <class F>
void parallel_for(index_t n, double cost_per_item, F&& f) {
  [[maybe_unused]] const bool parallel =
      n > 1 && static_cast<double>(n) * cost_per_item >= 131072.0;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (parallel)
#endif
  for (index_t i = 0; i < n; ++i) f(i);
}

// Number of fixed-size blocks covering [0, n).
constexpr index_t block_count(index_t n, index_t block) {
  return (n + block - 1) / block;
}

}  // namespace attn
