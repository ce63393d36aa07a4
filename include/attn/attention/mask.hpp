// attn/attention/mask.hpp: which keys each query may attend to. Every mask answers per element
// (`allowed`: true = may attend) and per tile (`tile`: all / none / partial allowed), so the
// fused kernels can skip whole tiles; masks compose with And / Or. Does not hold scores or apply
// −∞: the operator does.
//
// A mask policy provides, for batch entry b, query i in [0, Tq) and key j in [0, Tk):
//   bool allowed(b, i, j, Tq, Tk) const;
//   TileKind tile(b, i0, i1, j0, j1, Tq, Tk) const;   // rows [i0, i1) x columns [j0, j1)
//   void validate(B, Tq, Tk) const;                   // throws value_error/shape_error if unusable
// and may say two more things about itself:
//   static constexpr bool host_device = true;  allowed() and tile() are ATTN_HOST_DEVICE and the
//       mask is trivially copyable: the CUDA kernels take it (DeviceMaskPolicy);
//   static constexpr bool key_only = true;     allowed() depends on (b, j) only, never on i, Tq:
//       feature-map kernels then stay on the linear path, with the masked keys dropped.
// Guarantees: tile() never says all or none unless every element agrees (a composition may say
// partial where its elements happen to agree); a query that may attend to no key gets output 0
// and zero gradient (never NaN).
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

// Classifies a tile by asking its elements (for masks with no structure to exploit); stops at
// the first pair of an allowed and a forbidden element, so a partial tile costs little.
template <class M>
TileKind classify_elementwise(const M& m, index_t b, index_t i0, index_t i1, index_t j0, index_t j1,
                              index_t tq, index_t tk) {
  bool any = false, every = true;
  for (index_t i = i0; i < i1; ++i)
    for (index_t j = j0; j < j1; ++j) {
      const bool a = m.allowed(b, i, j, tq, tk);
      any = any || a;
      every = every && a;
      if (any && !every) return TileKind::partial;
    }
  return every ? TileKind::all : TileKind::none;
}

template <class M>
concept MaskPolicy = std::copy_constructible<M> &&
    requires(const M& m, index_t b, index_t i, index_t j, index_t n) {
  { m.allowed(b, i, j, n, n) } -> std::convertible_to<bool>;
  { m.tile(b, i, i, j, j, n, n) } -> std::same_as<TileKind>;
  m.validate(n, n, n);
};

namespace detail {
// The optional declarations of a mask (see the top of this file); absent means false.
template <class M>
inline constexpr bool host_device_mask = requires {
  requires M::host_device;
};
template <class M>
inline constexpr bool key_only_mask = requires {
  requires M::key_only;
};
}  // namespace detail

namespace mask {

// Every query sees every key.
struct None {
  static constexpr bool host_device = true;
  static constexpr bool key_only = true;
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

// Per-sequence key lengths (right padding): in batch entry b only keys j < lengths[b] are real,
// the rest is padding. Queries are not masked; a query in a padded position still sees the real
// keys.
struct Padding {
  static constexpr bool key_only = true;
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

// Per-sequence first real keys (left padding, as in a batch of prompts of different lengths
// aligned at the end for generation): in batch entry b, keys j < starts[b] are padding. The
// count does not depend on Tk, so the same mask serves every decoding step while the cache grows.
// A causal language model uses And<Causal, LeftPadding>: query i then sees keys
// starts[b] <= j <= i + (Tk − Tq), and a query in a padded position sees none (output 0).
struct LeftPadding {
  static constexpr bool key_only = true;
  std::shared_ptr<const std::vector<index_t>> starts;

  LeftPadding() = default;
  explicit LeftPadding(std::vector<index_t> s)
      : starts(std::make_shared<const std::vector<index_t>>(std::move(s))) {}

  bool allowed(index_t b, index_t, index_t j, index_t, index_t) const {
    return j >= (*starts)[static_cast<std::size_t>(b)];
  }
  TileKind tile(index_t b, index_t, index_t, index_t j0, index_t j1, index_t, index_t) const {
    const index_t start = (*starts)[static_cast<std::size_t>(b)];
    if (j0 >= start) return TileKind::all;
    if (j1 <= start) return TileKind::none;
    return TileKind::partial;
  }
  void validate(index_t batch, index_t, index_t tk) const {
    ATTN_CHECK(starts != nullptr, value_error, "mask::LeftPadding: no starts given");
    ATTN_CHECK(static_cast<index_t>(starts->size()) == batch, shape_error,
               "mask::LeftPadding: ", starts->size(), " starts for a batch of ", batch);
    for (const index_t s : *starts)
      ATTN_CHECK(s >= 0 && s <= tk, value_error, "mask::LeftPadding: start ", s, " outside [0, ",
                 tk, "]");
  }
};

// Any pattern, from a Tensor<std::uint8_t> where m[…, i, j] != 0 means query i may attend to key
// j: [Tq, Tk] (the same for every batch entry) or [B, Tq, Tk] (one per batch entry).
struct Custom {
  std::shared_ptr<const Tensor<std::uint8_t>> allowed_matrix;

  Custom() = default;
  explicit Custom(Tensor<std::uint8_t> m)
      : allowed_matrix(std::make_shared<const Tensor<std::uint8_t>>(std::move(m))) {}

  bool allowed(index_t b, index_t i, index_t j, index_t tq, index_t tk) const {
    const index_t entry = allowed_matrix->shape().rank() == 3 ? b : 0;
    return allowed_matrix->data()[(entry * tq + i) * tk + j] != 0;
  }
  TileKind tile(index_t b, index_t i0, index_t i1, index_t j0, index_t j1, index_t tq,
                index_t tk) const {
    return classify_elementwise(*this, b, i0, i1, j0, j1, tq, tk);
  }
  void validate(index_t batch, index_t tq, index_t tk) const {
    ATTN_CHECK(allowed_matrix != nullptr, value_error, "mask::Custom: no matrix given");
    const Shape& s = allowed_matrix->shape();
    ATTN_CHECK(s == (Shape{tq, tk}) || s == (Shape{batch, tq, tk}), shape_error,
               "mask::Custom: the matrix is ", s, " but attention needs ", Shape{tq, tk}, " or ",
               Shape{batch, tq, tk});
  }
};

// BigBird's block pattern (Zaheer et al. 2020, "Big Bird: Transformers for Longer Sequences"):
// positions are grouped in blocks of `block`; query block a sees key block c when |a − c| <=
// window (sliding), when a or c is one of the first `global` blocks (global tokens), or when c
// is one of the `random` blocks drawn for a from `seed` (the same draw every call, no storage;
// a draw may land on a block the window or the globals already cover). Tq and Tk are blocked
// alike. tile() asks each pair of blocks the tile touches once, not each element.
struct BigBird {
  index_t block = 64;
  index_t window = 1;
  index_t global = 1;
  index_t random = 1;
  std::uint64_t seed = 0;

  index_t key_blocks(index_t tk) const { return (tk + block - 1) / block; }
  // Draw r (0 <= r < random) of query block a: a key block in [0, key_blocks).
  index_t random_block(index_t a, index_t r, index_t key_blocks) const {
    return static_cast<index_t>(
        hash_uniform(seed ^ static_cast<std::uint64_t>(a) * 0x9E3779B97F4A7C15ull,
                     static_cast<std::uint64_t>(r)) *
        static_cast<double>(key_blocks));
  }
  bool block_allowed(index_t a, index_t c, index_t key_blocks) const {
    if ((a - c <= window && c - a <= window) || a < global || c < global) return true;
    for (index_t r = 0; r < random; ++r)
      if (random_block(a, r, key_blocks) == c) return true;
    return false;
  }
  bool allowed(index_t, index_t i, index_t j, index_t, index_t tk) const {
    return block_allowed(i / block, j / block, key_blocks(tk));
  }
  // Exact: every pair of blocks (a, c) with a in [i0/block, (i1−1)/block] and c in
  // [j0/block, (j1−1)/block] has at least one element inside the tile.
  TileKind tile(index_t, index_t i0, index_t i1, index_t j0, index_t j1, index_t,
                index_t tk) const {
    if (i0 >= i1 || j0 >= j1) return TileKind::all;  // no elements: nothing disagrees
    const index_t nb = key_blocks(tk);
    bool any = false, every = true;
    for (index_t a = i0 / block; a <= (i1 - 1) / block; ++a)
      for (index_t c = j0 / block; c <= (j1 - 1) / block; ++c) {
        const bool ok = block_allowed(a, c, nb);
        any = any || ok;
        every = every && ok;
        if (any && !every) return TileKind::partial;
      }
    return every ? TileKind::all : TileKind::none;
  }
  void validate(index_t, index_t, index_t) const {
    ATTN_CHECK(block > 0 && window >= 0 && global >= 0 && random >= 0, value_error,
               "mask::BigBird: block (", block, ") must be > 0 and window (", window, "), global (",
               global, "), random (", random, ") >= 0");
  }
};

// Both masks allow: allowed = A && B. Tile: none if either part's tile is none, all if both are
// all, else partial. A causal language model over a left-padded batch is
// And<Causal, LeftPadding>; a causal window is And<Causal, SlidingWindow>.
// Host and device (host_device) when both parts are; key-only when both parts are.
template <MaskPolicy A, MaskPolicy B>
struct And {
  static constexpr bool host_device = detail::host_device_mask<A> && detail::host_device_mask<B>;
  static constexpr bool key_only = detail::key_only_mask<A> && detail::key_only_mask<B>;
  A first{};
  B second{};

  ATTN_EXEC_CHECK_DISABLE
  ATTN_HOST_DEVICE bool allowed(index_t b, index_t i, index_t j, index_t tq, index_t tk) const {
    const bool x = first.allowed(b, i, j, tq, tk), y = second.allowed(b, i, j, tq, tk);
    return x && y;  // both asked, no branch: the fused kernel's masking loop stays vectorisable
  }
  ATTN_EXEC_CHECK_DISABLE
  ATTN_HOST_DEVICE TileKind tile(index_t b, index_t i0, index_t i1, index_t j0, index_t j1,
                                 index_t tq, index_t tk) const {
    const TileKind x = first.tile(b, i0, i1, j0, j1, tq, tk);
    if (x == TileKind::none) return TileKind::none;
    const TileKind y = second.tile(b, i0, i1, j0, j1, tq, tk);
    if (y == TileKind::none) return TileKind::none;
    return x == TileKind::all && y == TileKind::all ? TileKind::all : TileKind::partial;
  }
  void validate(index_t batch, index_t tq, index_t tk) const {
    first.validate(batch, tq, tk);
    second.validate(batch, tq, tk);
  }
};

// Either mask allows: allowed = A || B. Tile: all if either part's tile is all, none if both
// are none, else partial. Local plus global attention, for example, is
// Or<SlidingWindow, Custom>.
template <MaskPolicy A, MaskPolicy B>
struct Or {
  static constexpr bool host_device = detail::host_device_mask<A> && detail::host_device_mask<B>;
  static constexpr bool key_only = detail::key_only_mask<A> && detail::key_only_mask<B>;
  A first{};
  B second{};

  ATTN_EXEC_CHECK_DISABLE
  ATTN_HOST_DEVICE bool allowed(index_t b, index_t i, index_t j, index_t tq, index_t tk) const {
    const bool x = first.allowed(b, i, j, tq, tk), y = second.allowed(b, i, j, tq, tk);
    return x || y;
  }
  ATTN_EXEC_CHECK_DISABLE
  ATTN_HOST_DEVICE TileKind tile(index_t b, index_t i0, index_t i1, index_t j0, index_t j1,
                                 index_t tq, index_t tk) const {
    const TileKind x = first.tile(b, i0, i1, j0, j1, tq, tk);
    if (x == TileKind::all) return TileKind::all;
    const TileKind y = second.tile(b, i0, i1, j0, j1, tq, tk);
    if (y == TileKind::all) return TileKind::all;
    return x == TileKind::none && y == TileKind::none ? TileKind::none : TileKind::partial;
  }
  void validate(index_t batch, index_t tq, index_t tk) const {
    first.validate(batch, tq, tk);
    second.validate(batch, tq, tk);
  }
};

// mask::And{mask::Causal{}, mask::LeftPadding({2, 0})} deduces the parts' types.
template <class A, class B>
And(A, B) -> And<A, B>;
template <class A, class B>
Or(A, B) -> Or<A, B>;

// The first real position of each row of a left-padded batch when `m` is, or holds in an And, a
// LeftPadding with its starts; null otherwise. A model numbers each row's absolute positions
// from it (nn::GPT's learned or sinusoidal positions), as transformers numbers them from the
// attention mask.
template <class M>
const std::vector<index_t>* left_padding_starts(const M&) {
  return nullptr;
}
inline const std::vector<index_t>* left_padding_starts(const LeftPadding& m) {
  return m.starts.get();
}
template <MaskPolicy A, MaskPolicy B>
const std::vector<index_t>* left_padding_starts(const And<A, B>& m) {
  const std::vector<index_t>* s = left_padding_starts(m.first);
  return s != nullptr ? s : left_padding_starts(m.second);
}

}  // namespace mask

static_assert(MaskPolicy<mask::None>);
static_assert(MaskPolicy<mask::Causal>);
static_assert(MaskPolicy<mask::CausalTopLeft>);
static_assert(MaskPolicy<mask::SlidingWindow>);
static_assert(MaskPolicy<mask::Padding>);
static_assert(MaskPolicy<mask::LeftPadding>);
static_assert(MaskPolicy<mask::Custom>);
static_assert(MaskPolicy<mask::BigBird>);
static_assert(MaskPolicy<mask::And<mask::Causal, mask::LeftPadding>>);
static_assert(MaskPolicy<mask::Or<mask::SlidingWindow, mask::Custom>>);

}  // namespace attn
