// attn/core/float_env.hpp: whether float arithmetic keeps subnormal ("denormal") numbers or
// flushes them to zero, on the calling thread and on every thread of the OpenMP pool.
//
// IEEE arithmetic underflows gradually: below 2^-126 (float) a result keeps shrinking through the
// subnormals instead of jumping to zero. Many x86 cores take a microcode assist for every
// operation that produces or reads a subnormal, tens to a hundred cycles instead of one. Training
// makes them: a trained model's softmax gives probabilities of e^-90 to tokens it has ruled out,
// their gradients and the optimizer's moments of rarely used weights shrink towards zero. On an
// Intel Xeon (family 6 model 167) the birth-place pretraining step went from 3.7 to 8.5 CPU
// seconds by step 360 for that reason alone. Flushing (the FTZ and DAZ bits of SSE's MXCSR, FZ of
// AArch64's FPCR) changes only values below 1.2e-38, which no loss or update of attn depends on;
// TensorFlow's CPU kernels run so by default, PyTorch keeps IEEE unless told
// (torch.set_flush_denormal). attn's library code never changes the mode: the trainers choose it
// (their --denormals option). Results stay independent of the thread count either way, as long as
// every thread runs in the same mode, which set_denormals ensures.
//
//   attn::set_num_threads(4);
//   attn::set_denormals(attn::Denormals::flush);   // this thread and the 4 of the pool
//
// Does not touch rounding modes or exception masks, nor the x87 unit (attn does not use it).
#pragma once

#include <string_view>

#include "error.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace attn {

enum class Denormals {
  keep,   // IEEE gradual underflow (every C++ program's default)
  flush,  // results below the smallest normal become zero, and so do such inputs
};

namespace detail {

#if defined(__x86_64__) || defined(__i386__)
inline constexpr unsigned mxcsr_ftz = 1u << 15, mxcsr_daz = 1u << 6;
inline unsigned read_mxcsr() {
  unsigned csr;
  __asm__ volatile("stmxcsr %0" : "=m"(csr));
  return csr;
}
inline void write_mxcsr(unsigned csr) {
  __asm__ volatile("ldmxcsr %0" : : "m"(csr));
}
inline bool flushing_here() {
  return (read_mxcsr() & (mxcsr_ftz | mxcsr_daz)) != 0;
}
inline void set_denormals_here(Denormals d) {
  const unsigned csr = read_mxcsr() & ~(mxcsr_ftz | mxcsr_daz);
  write_mxcsr(d == Denormals::flush ? csr | mxcsr_ftz | mxcsr_daz : csr);
}
inline constexpr bool can_flush_denormals = true;
#elif defined(__aarch64__)
inline constexpr unsigned long fpcr_fz = 1ul << 24;
inline unsigned long read_fpcr() {
  unsigned long r;
  __asm__ volatile("mrs %0, fpcr" : "=r"(r));
  return r;
}
inline bool flushing_here() {
  return (read_fpcr() & fpcr_fz) != 0;
}
inline void set_denormals_here(Denormals d) {
  const unsigned long r = read_fpcr() & ~fpcr_fz;
  __asm__ volatile("msr fpcr, %0" : : "r"(d == Denormals::flush ? r | fpcr_fz : r));
}
inline constexpr bool can_flush_denormals = true;
#else
inline bool flushing_here() {
  return false;
}
inline void set_denormals_here(Denormals) {}
inline constexpr bool can_flush_denormals = false;
#endif

}  // namespace detail

// Whether this build's processor has a flush-to-zero mode attn can set (x86 SSE, AArch64).
constexpr bool can_flush_denormals() {
  return detail::can_flush_denormals;
}

// The mode of the calling thread.
inline Denormals denormals() {
  return detail::flushing_here() ? Denormals::flush : Denormals::keep;
}

// Sets the mode on the calling thread and on every thread of its OpenMP pool (as many as
// num_threads() says now: call it after set_num_threads). Threads created later inherit it from
// the thread that creates them, as POSIX threads inherit the floating-point environment. Asking to
// flush where the processor cannot is a value_error.
inline void set_denormals(Denormals d) {
  ATTN_CHECK(d == Denormals::keep || can_flush_denormals(), value_error,
             "set_denormals: this processor has no flush-to-zero mode attn can set");
  detail::set_denormals_here(d);
#ifdef _OPENMP
#pragma omp parallel num_threads(omp_get_max_threads())
  detail::set_denormals_here(d);
#endif
}

// "keep" or "flush", as the trainers' --denormals option spells them.
inline std::string_view denormals_name(Denormals d) {
  return d == Denormals::flush ? "flush" : "keep";
}
inline Denormals parse_denormals(std::string_view name) {
  ATTN_CHECK(name == "keep" || name == "flush", value_error, "denormals: '", name,
             "' is neither keep nor flush");
  return name == "flush" ? Denormals::flush : Denormals::keep;
}

}  // namespace attn
