// attn/attention/mask.hpp: which keys each query may attend to. Every mask answers per element
// (`allowed`: true = may attend) and per tile (`tile`: all / none / partial allowed), so the
// fused kernels can skip whole tiles. Does not hold scores or apply −∞: the operator does.
//
// A mask policy provides, for batch entry b, query i in [0, Tq) and key j in [0, Tk):
//   bool allowed(b, i, j, Tq, Tk) const;
//   TileKind tile(b, i0, i1, j0, j1, Tq, Tk) const;   // rows [i0, i1) x columns [j0, j1)
//   void validate(B, Tq, Tk) const;                   // throws value_error/shape_error if unusable
// A mask whose allowed() and tile() are ATTN_HOST_DEVICE and that is trivially copyable also says
// `static constexpr bool host_device = true;`: the CUDA kernels take those (DeviceMaskPolicy).
// Guarantees: tile() never says all or none unless every element agrees; a query that may
// attend to no key gets output 0 and zero gradient (never NaN).
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <memory>
#include <vector>

#include "../core/error.hpp"
#include "../core/host_device.hpp"
#include "../core/rng.hpp"
#include "../core/tensor.hpp"

namespace attn {

enum class TileKind { none, partial, all };

// Classifies a tile by asking every element (for masks with no structure to exploit).
template <class M>
TileKind classify_elementwise(const M& m, index_t b, index_t i0, index_t i1, index_t j0, index_t j1,
                              index_t tq, index_t tk) {
  bool any = false, every = true;
  for (index_t i = i0; i < i1; ++i)
    for (index_t j = j0; j < j1; ++j) {
      const bool a = m.allowed(b, i, j, tq, tk);
      any = any || a;
      every = every && a;
    }
  return every ? TileKind::all : (any ? TileKind::partial : TileKind::none);
}

template <class M>
concept MaskPolicy = std::copy_constructible<M> &&
    requires(const M& m, index_t b, index_t i, index_t j, index_t n) {
  { m.allowed(b, i, j, n, n) } -> std::convertible_to<bool>;
  { m.tile(b, i, i, j, j, n, n) } -> std::same_as<TileKind>;
  m.validate(n, n, n);
};

namespace mask {

// Every query sees every key.
struct None {
  static constexpr bool host_device = true;
  ATTN_HOST_DEVICE bool allowed(index_t, index_t, index_t, index_t, index_t) const { return true; }
  ATTN_HOST_DEVICE TileKind tile(index_t, index_t, index_t, index_t, index_t, index_t,
                                 index_t) const {
    return TileKind::all;
  }
  void validate(index_t, index_t, index_t) const {}
};

// Causal, aligned at the end: query i sees keys j <= i + (Tk − Tq), so the last query sees the
// last key. With Tq = Tk this is the usual lower triangle; with one new query and a cache of Tk
// keys (decoding) it sees them all.
struct Causal {
  static constexpr bool host_device = true;
  ATTN_HOST_DEVICE static index_t offset(index_t tq, index_t tk) { return tk - tq; }
  ATTN_HOST_DEVICE bool allowed(index_t, index_t i, index_t j, index_t tq, index_t tk) const {
    return j <= i + offset(tq, tk);
  }
  ATTN_HOST_DEVICE TileKind tile(index_t, index_t i0, index_t i1, index_t j0, index_t j1,
                                 index_t tq, index_t tk) const {
    const index_t off = offset(tq, tk);
    if (j1 - 1 <= i0 + off) return TileKind::all;
    if (j0 > i1 - 1 + off) return TileKind::none;
    return TileKind::partial;
  }
  void validate(index_t, index_t, index_t) const {}
};

// Causal, aligned at the start: query i sees keys j <= i, whatever Tq and Tk are.
struct CausalTopLeft {
  static constexpr bool host_device = true;
  ATTN_HOST_DEVICE bool allowed(index_t, index_t i, index_t j, index_t, index_t) const {
    return j <= i;
  }
  ATTN_HOST_DEVICE TileKind tile(index_t, index_t i0, index_t i1, index_t j0, index_t j1, index_t,
                                 index_t) const {
    if (j1 - 1 <= i0) return TileKind::all;
    if (j0 > i1 - 1) return TileKind::none;
    return TileKind::partial;
  }
  void validate(index_t, index_t, index_t) const {}
};

// A band around the query's position p = i + (Tk − Tq) (end-aligned as Causal): key j is seen
// when p − before <= j <= p + after. SlidingWindow::causal(w) sees the w most recent keys.
struct SlidingWindow {
  static constexpr bool host_device = true;
  index_t before = 0;
  index_t after = 0;

  static SlidingWindow causal(index_t window) { return {window - 1, 0}; }
  static SlidingWindow symmetric(index_t half) { return {half, half}; }

  ATTN_HOST_DEVICE bool allowed(index_t, index_t i, index_t j, index_t tq, index_t tk) const {
    const index_t p = i + tk - tq;
    return j >= p - before && j <= p + after;
  }
  ATTN_HOST_DEVICE TileKind tile(index_t, index_t i0, index_t i1, index_t j0, index_t j1,
                                 index_t tq, index_t tk) const {
    const index_t off = tk - tq;
    const index_t p0 = i0 + off, p1 = i1 - 1 + off;  // first and last query positions
    if (j1 - 1 < p0 - before || j0 > p1 + after) return TileKind::none;
    if (j0 >= p1 - before && j1 - 1 <= p0 + after) return TileKind::all;
    return TileKind::partial;
  }
  void validate(index_t, index_t, index_t) const {
    ATTN_CHECK(before >= 0 && after >= 0, value_error, "mask::SlidingWindow: before (", before,
               ") and after (", after, ") must be >= 0");
  }
};

// Per-sequence key lengths: in batch entry b only keys j < lengths[b] are real (the rest is
// padding). Queries are not masked; a query in a padded position still sees the real keys.
struct Padding {
  std::shared_ptr<const std::vector<index_t>> lengths;

  Padding() = default;
  explicit Padding(std::vector<index_t> l)
      : lengths(std::make_shared<const std::vector<index_t>>(std::move(l))) {}

  bool allowed(index_t b, index_t, index_t j, index_t, index_t) const {
    return j < (*lengths)[static_cast<std::size_t>(b)];
  }
  TileKind tile(index_t b, index_t, index_t, index_t j0, index_t j1, index_t, index_t) const {
    const index_t len = (*lengths)[static_cast<std::size_t>(b)];
    if (j1 <= len) return TileKind::all;
    if (j0 >= len) return TileKind::none;
    return TileKind::partial;
  }
  void validate(index_t batch, index_t, index_t tk) const {
    ATTN_CHECK(lengths != nullptr, value_error, "mask::Padding: no lengths given");
    ATTN_CHECK(static_cast<index_t>(lengths->size()) == batch, shape_error,
               "mask::Padding: ", lengths->size(), " lengths for a batch of ", batch);
    for (const index_t l : *lengths)
      ATTN_CHECK(l >= 0 && l <= tk, value_error, "mask::Padding: length ", l, " outside [0, ", tk,
                 "]");
  }
};

// Any pattern: allowed[i, j] != 0 means query i may attend to key j (same for every batch entry).
struct Custom {
  std::shared_ptr<const Tensor<std::uint8_t>> allowed_matrix;

  Custom() = default;
  explicit Custom(Tensor<std::uint8_t> m)
      : allowed_matrix(std::make_shared<const Tensor<std::uint8_t>>(std::move(m))) {}

  bool allowed(index_t, index_t i, index_t j, index_t, index_t) const {
    return (*allowed_matrix)(i, j) != 0;
  }
  TileKind tile(index_t b, index_t i0, index_t i1, index_t j0, index_t j1, index_t tq,
                index_t tk) const {
    return classify_elementwise(*this, b, i0, i1, j0, j1, tq, tk);
  }
  void validate(index_t, index_t tq, index_t tk) const {
    ATTN_CHECK(allowed_matrix != nullptr, value_error, "mask::Custom: no matrix given");
    ATTN_CHECK(allowed_matrix->shape() == (Shape{tq, tk}), shape_error,
               "mask::Custom: the matrix is ", allowed_matrix->shape(), " but attention is ",
               Shape{tq, tk});
  }
};

// BigBird's block pattern (Zaheer et al. 2020): positions are grouped in blocks of `block`;
// query block a sees key block c when |a − c| <= window (sliding), when a or c is one of the
// first `global` blocks (global tokens), or when c is one of `random` blocks drawn for a from
// `seed` (the same draw every call, no storage). Tq and Tk are blocked alike.
struct BigBird {
  index_t block = 64;
  index_t window = 1;
  index_t global = 1;
  index_t random = 1;
  std::uint64_t seed = 0;

  bool random_pick(index_t a, index_t c, index_t key_blocks) const {
    for (index_t r = 0; r < random; ++r) {
      const auto pick = static_cast<index_t>(
          hash_uniform(seed ^ static_cast<std::uint64_t>(a) * 0x9E3779B97F4A7C15ull,
                       static_cast<std::uint64_t>(r)) *
          static_cast<double>(key_blocks));
      if (pick == c) return true;
    }
    return false;
  }
  bool block_allowed(index_t a, index_t c, index_t key_blocks) const {
    return (a - c <= window && c - a <= window) || a < global || c < global ||
           random_pick(a, c, key_blocks);
  }
  bool allowed(index_t, index_t i, index_t j, index_t, index_t tk) const {
    return block_allowed(i / block, j / block, (tk + block - 1) / block);
  }
  TileKind tile(index_t b, index_t i0, index_t i1, index_t j0, index_t j1, index_t tq,
                index_t tk) const {
    return classify_elementwise(*this, b, i0, i1, j0, j1, tq, tk);
  }
  void validate(index_t, index_t, index_t) const {
    ATTN_CHECK(block > 0 && window >= 0 && global >= 0 && random >= 0, value_error,
               "mask::BigBird: block must be > 0 and window, global, random >= 0");
  }
};

}  // namespace mask

static_assert(MaskPolicy<mask::None>);
static_assert(MaskPolicy<mask::Causal>);
static_assert(MaskPolicy<mask::CausalTopLeft>);
static_assert(MaskPolicy<mask::SlidingWindow>);
static_assert(MaskPolicy<mask::Padding>);
static_assert(MaskPolicy<mask::Custom>);
static_assert(MaskPolicy<mask::BigBird>);

}  // namespace attn
