// attn/core/rng.hpp: a seeded random number generator whose streams are the same on every
// platform (xoshiro256** seeded by splitmix64), and counter-based hashing for parallel draws.
// Does not use std::*_distribution: their output differs between standard libraries.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <span>
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

// A uniform double in [0, 1) that depends only on (seed, counter): the same value whichever thread
// draws it, so parallel loops (dropout masks) give the same result for every thread count.
constexpr double hash_uniform(std::uint64_t seed, std::uint64_t counter) {
  return bits_to_unit_double(
      detail::splitmix64(detail::splitmix64(seed) ^ (counter * 0xD1B54A32D192ED03ull)));
}

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
