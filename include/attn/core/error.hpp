// attn/core/error.hpp: the exception types attn throws and the ATTN_CHECK macro that throws them.
// Does not log, abort or return error codes: every failure at a public entry point is an exception.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace attn {

// Base of every exception attn throws; catch this to catch them all.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A tensor had the wrong rank or shape for the operation, e.g.
// "matmul: inner dimensions differ: [4, 3] x [5, 2]".
class shape_error : public error {
 public:
  using error::error;
};

// An argument had an invalid value (an index out of range, a probability outside [0, 1], ...).
class value_error : public error {
 public:
  using error::error;
};

// Reading or writing a file failed, or a file's contents are invalid.
class io_error : public error {
 public:
  using error::error;
};

// A CUDA runtime or cuBLAS call failed (attn/cuda/): the message names the call and the error,
// e.g. "cudaMalloc(&ptr, bytes) failed: out of memory (cudaErrorMemoryAllocation)". Declared
// here, without CUDA headers, so code compiled without nvcc can catch it.
class cuda_error : public error {
 public:
  using error::error;
};

// A data-parallel collective failed or timed out (attn/dist/): the message names the operation,
// the rank and what went wrong, e.g. "dist::GradientReducer::reduce: rank 0 of 2 waited 600 s
// …". Declared here, without MPI headers, so code built without MPI can catch it.
class dist_error : public error {
 public:
  using error::error;
};

namespace detail {

// Concatenates any streamable arguments into one string: message("matmul: ", a, " x ", b).
template <class... Args>
std::string message(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

}  // namespace detail
}  // namespace attn

// ATTN_CHECK(cond, error_type, parts...): always on (release builds too). Throws
// error_type(parts...) when cond is false. Used at public entry points only, where the cost of
// one branch is nothing next to the operation it guards.
#define ATTN_CHECK(cond, error_type, ...)                     \
  do {                                                        \
    if (!(cond)) [[unlikely]]                                 \
      throw error_type(::attn::detail::message(__VA_ARGS__)); \
  } while (false)

// ATTN_ASSERT(cond): debug-only sanity check for inner loops; compiled out with NDEBUG.
#ifdef NDEBUG
#define ATTN_ASSERT(cond) ((void)0)
#else
#include <cassert>
#define ATTN_ASSERT(cond) assert(cond)
#endif
