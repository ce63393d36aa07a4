// attn/core/rng.hpp: a seeded random number generator whose streams are the same on every
// platform (xoshiro256** seeded by splitmix64), and counter-based hashing for parallel draws.
// Does not use std::*_distribution: their output differs between standard libraries.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <span>
#include <type_traits>
#include <utility>

#include "error.hpp"

namespace attn {

namespace detail {

// splitmix64 (Steele, Lea, Flood 2014): a bijective 64-bit mixer; used to seed and to hash.
constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__extension__ using uint128 =
    unsigned __int128;  // GCC/Clang extension; __extension__ keeps -Wpedantic quiet

constexpr std::uint64_t rotl(std::uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

}  // namespace detail

// Uniform double in [0, 1) from the top 53 bits of a 64-bit word.
constexpr double bits_to_unit_double(std::uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

namespace detail {

// The 64-bit hash behind hash_uniform and DropoutMask, from splitmix64(seed) (computed once per
// draw by DropoutMask) and the counter.
constexpr std::uint64_t counter_hash(std::uint64_t mixed_seed, std::uint64_t counter) {
  return splitmix64(mixed_seed ^ (counter * 0xD1B54A32D192ED03ull));
}

}  // namespace detail

// A uniform double in [0, 1) that depends only on (seed, counter): the same value whichever thread
// draws it, so parallel loops (dropout masks) give the same result for every thread count.
constexpr double hash_uniform(std::uint64_t seed, std::uint64_t counter) {
  return bits_to_unit_double(detail::counter_hash(detail::splitmix64(seed), counter));
}

// The masks of inverted dropout with drop probability p: element `counter` of the draw `seed` is
// kept when hash_uniform(seed, counter) >= p and then scaled by 1/(1 − p); a dropped element is 0
// (even where the input is infinite or NaN). The test runs in integers, the hash's top 53 bits
// against ceil(p · 2^53) (the same decisions: p · 2^53 is exact), and the select by bit masks, so
// the loops below vectorise: with AVX2 there is no 64-bit integer to double conversion, and a
// multiplication on one branch only stays scalar under GCC's default -ftrapping-math.
class DropoutMask {
 public:
  DropoutMask(std::uint64_t seed, double p)
      : mixed_seed_(detail::splitmix64(seed)),
        threshold_(threshold(p)),
        scale_(p < 1.0 ? 1.0 / (1.0 - p) : 0.0) {}

  bool keep(std::uint64_t counter) const {
    return (detail::counter_hash(mixed_seed_, counter) >> 11) >= threshold_;
  }

  // y[i] = x[i] / (1 − p) where element first + i is kept, else 0, for i in [0, n); y may be x.
  template <class T>
  void apply(const T* x, T* y, std::int64_t n, std::uint64_t first) const {
    const T s = static_cast<T>(scale_);
    for (std::int64_t i = 0; i < n; ++i)
      y[i] = kept_or_zero(x[i] * s, keep(first + static_cast<std::uint64_t>(i)));
  }

  // The same mask on two arrays at once (the hash computed once): y1 from x1, y2 from x2.
  template <class T>
  void apply(const T* x1, T* y1, const T* x2, T* y2, std::int64_t n, std::uint64_t first) const {
    const T s = static_cast<T>(scale_);
    for (std::int64_t i = 0; i < n; ++i) {
      const bool k = keep(first + static_cast<std::uint64_t>(i));
      y1[i] = kept_or_zero(x1[i] * s, k);
      y2[i] = kept_or_zero(x2[i] * s, k);
    }
  }

  // y[i] += (x[i] / (1 − p) where element first + i is kept, else 0), for i in [0, n).
  template <class T>
  void apply_add(const T* x, T* y, std::int64_t n, std::uint64_t first) const {
    const T s = static_cast<T>(scale_);
    for (std::int64_t i = 0; i < n; ++i)
      y[i] += kept_or_zero(x[i] * s, keep(first + static_cast<std::uint64_t>(i)));
  }

 private:
  // ceil(p · 2^53): the least top-53-bit value u with u · 2^-53 >= p.
  static std::uint64_t threshold(double p) {
    ATTN_CHECK(p >= 0.0 && p <= 1.0, value_error, "dropout: p must be in [0, 1], got ", p);
    return static_cast<std::uint64_t>(std::ceil(p * 0x1.0p53));
  }

  template <class T>
  static T kept_or_zero(T v, bool kept) {
    static_assert(std::is_floating_point_v<T> && (sizeof(T) == 4 || sizeof(T) == 8));
    using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
    return std::bit_cast<T>(std::bit_cast<Bits>(v) & (Bits{0} - static_cast<Bits>(kept)));
  }

  std::uint64_t mixed_seed_, threshold_;
  double scale_;
};

// xoshiro256** 1.0 (Blackman & Vigna): fast, 256-bit state, passes BigCrush. Every draw is
// defined bit for bit here, so a seed gives the same numbers with every compiler and library
// (normal() additionally relies on the platform's std::log, std::sqrt, std::cos being the
// correctly rounded IEEE functions, which glibc, musl and MSVC provide for these inputs).
class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0) { reseed(seed); }

  void reseed(std::uint64_t seed) {
    // The splitmix64 sequence started at `seed`, as the xoshiro authors recommend.
    std::uint64_t x = seed;
    for (auto& s : state_) {
      s = detail::splitmix64(x);
      x += 0x9E3779B97F4A7C15ull;
    }
    has_spare_ = false;
  }

  std::uint64_t next_u64() {
    const std::uint64_t result = detail::rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = detail::rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, 1).
  double uniform() { return bits_to_unit_double(next_u64()); }

  // Uniform in [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

  // Uniform integer in [0, n), unbiased (Lemire's multiply-and-reject method).
  std::uint64_t uniform_int(std::uint64_t n) {
    ATTN_CHECK(n > 0, value_error, "Rng::uniform_int: the range must not be empty");
    detail::uint128 m = static_cast<detail::uint128>(next_u64()) * n;
    auto low = static_cast<std::uint64_t>(m);
    if (low < n) {
      const std::uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<detail::uint128>(next_u64()) * n;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }

  // Standard normal by the Box–Muller transform; the second value of each pair is kept for the
  // next call.
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = uniform();
    while (u1 <= 0.0) u1 = uniform();  // log(0) is -inf; redraw (probability 2^-53)
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 2.0 * std::numbers::pi * u2;
    spare_ = r * std::sin(theta);
    has_spare_ = true;
    return r * std::cos(theta);
  }

  double normal(double mean, double stddev) { return mean + stddev * normal(); }

  // A fresh 64-bit seed for a sub-generator or a counter-based draw (dropout).
  std::uint64_t split() { return next_u64(); }

 private:
  std::uint64_t state_[4]{};
  double spare_ = 0.0;
  bool has_spare_ = false;
};

// Puts x in a uniformly random order drawn from `rng` (Fisher–Yates, from the last element down:
// element i swaps with one of 0 .. i), so a seed gives the same order everywhere.
template <class T>
void shuffle(std::span<T> x, Rng& rng) {
  for (std::size_t i = x.size(); i > 1; --i) std::swap(x[i - 1], x[rng.uniform_int(i)]);
}

}  // namespace attn
