// attn/attention/tile_layout.hpp: how the fused kernel lays out its operands and scratch: the
// fixed tile sizes, the per-thread copies one call makes of K, V, Q and dO (padded rows, key
// panels transposed tile by tile), the ‖k‖² term of a quadratic score, and the per-thread
// scratch of the tile loops (score, weight and gradient tiles, running max and sum).
// Does not compute scores or weights: score_tiles.hpp, fused_forward.hpp, fused_backward.hpp.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <vector>

#include "../core/parallel.hpp"
#include "geometry.hpp"
#include "kernel_common.hpp"
#include "score.hpp"
#include "tile_gemm.hpp"

namespace attn {

namespace detail {

// Tile sizes; fixed, so results do not depend on the thread count. 128 x 128 float tiles (64 KiB
// of scores) sit in L2; against 64 x 64 they halve the rescaling steps and kernel calls per
// score.
inline constexpr index_t attn_query_tile = 128;
inline constexpr index_t attn_key_tile = 128;

static_assert(attn_key_tile % packet_size<float> == 0 && attn_key_tile % packet_size<double> == 0,
              "attn: the key tile must be a whole number of packets");

// Operand copies one call lays out before its tiles run (all O(T·d)); kept per calling thread
// and reused, so a steady-state training step does not allocate.
template <class T>
struct AttentionLayout {
  std::vector<T> kt, vt, kpad, vpad, qpad, dopad, key_norms;
  std::vector<T> head_sums;  // the backward's per-query-head dK, dV sums (fused_backward.hpp)
};

template <class T>
AttentionLayout<T>& attention_layout() {
  thread_local AttentionLayout<T> layout;
  return layout;
}

// Rows [n, d] as a B operand of tile_gemm: the source itself when d is whole packets, else a
// copy with rows packet_round(d) apart and zero padding.
template <class T>
struct RowsView {
  const T* data;
  index_t ld;
  const T* row(index_t r) const { return data + r * ld; }
};

template <class T>
RowsView<T> padded_rows(const T* src, index_t n, index_t d, std::vector<T>& buf) {
  const index_t ld = packet_round<T>(d);
  if (ld == d) return {src, d};
  buf.assign(static_cast<std::size_t>(n * ld), T{0});
  for (index_t r = 0; r < n; ++r) std::copy_n(src + r * d, d, buf.data() + r * ld);
  return {buf.data(), ld};
}

// Key-side rows [B, Hk, Tk, d] transposed tile by tile: panel (b, hk, j0) is [d, attn_key_tile]
// with element (c, jj) = src[b, hk, j0 + jj, c] and zeros past Tk. The B operand of Q Kᵀ and
// dO Vᵀ, laid out once per call instead of once per tile product.
template <class T>
struct KeyPanels {
  const T* data = nullptr;
  index_t d = 0, tiles = 0;
  const T* panel(const AttentionGeometry& g, index_t b, index_t hk, index_t j0) const {
    return data + ((b * g.Hk + hk) * tiles + j0 / attn_key_tile) * d * attn_key_tile;
  }
};

template <class T>
KeyPanels<T> pack_key_panels(const T* src, const AttentionGeometry& g, index_t d,
                             std::vector<T>& buf) {
  const index_t tiles = block_count(g.Tk, attn_key_tile);
  buf.resize(static_cast<std::size_t>(g.B * g.Hk * tiles * d * attn_key_tile));
  parallel_for(g.B * g.Hk * tiles, 2.0 * double(d * attn_key_tile), [&](index_t t) {
    const index_t bh = t / tiles, j0 = (t % tiles) * attn_key_tile;
    const index_t bc = std::min(attn_key_tile, g.Tk - j0);
    const T* s = src + (bh * g.key_rows() + j0) * d;
    T* p = buf.data() + t * d * attn_key_tile;
    for (index_t jj = 0; jj < bc; ++jj)  // rows of src read in order; d lines written stay in L1
      for (index_t c = 0; c < d; ++c) p[c * attn_key_tile + jj] = s[jj * d + c];
    for (index_t c = 0; c < d; ++c)
      std::fill(p + c * attn_key_tile + bc, p + (c + 1) * attn_key_tile, T{0});
  });
  return {buf.data(), d, tiles};
}

// The ‖k‖² term of a quadratic score, beta_k ‖k_j‖² for every key row (b, hk, j) in order
// [B·Hk·Tk]; null when beta_k = 0 (the CUDA blocks take ‖k_j‖² from the same squared_norm, per
// tile: load_key_norms).
template <ScorePolicy Score, class T>
const T* key_norm_bias(const AttentionGeometry& g, const T* k, std::vector<T>& buf) {
  if constexpr (Score::beta_k == 0) {
    return nullptr;
  } else {
    buf.resize(static_cast<std::size_t>(g.B * g.Hk * g.Tk));
    for (index_t bh = 0; bh < g.B * g.Hk; ++bh)
      for (index_t j = 0; j < g.Tk; ++j) {
        const T n = squared_norm<T>(k + g.k_off(bh / g.Hk, bh % g.Hk, j), g.Dh);
        buf[static_cast<std::size_t>(bh * g.Tk + j)] = static_cast<T>(Score::beta_k) * n;
      }
    return buf.data();
  }
}

// A tile [rows, cols] of a row-major buffer with rows `ld` apart, for AttentionDropout::apply.
template <class T>
using TileMap = Eigen::Map<Mat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

template <class T>
struct AttentionScratch {
  std::vector<T> s, dp, pm, acc, dq, dk, dv, colsum, m, l, rmax;
  std::vector<unsigned char> started;  // per key tile: its dK, dV accumulators hold a product
  std::vector<unsigned char> bad;      // forward, per row: a NaN or +∞ among its allowed scores
};

template <class T>
AttentionScratch<T>& attention_scratch() {
  thread_local AttentionScratch<T> scratch;  // grows once per thread, then reused
  return scratch;
}

template <class T>
T* zeroed(std::vector<T>& buf, index_t n) {
  buf.assign(static_cast<std::size_t>(n), T{0});
  return buf.data();
}

// An accumulator the first product writes rather than adds to (nothing to clear).
template <class T>
T* sized(std::vector<T>& buf, index_t n) {
  buf.resize(static_cast<std::size_t>(n));
  return buf.data();
}

// dst[r, 0:cols) += scale · src[r, 0:cols) for `rows` rows (dst rows `cols` apart, src `lds`).
template <class T>
void add_rows(T* dst, const T* src, index_t rows, index_t cols, index_t lds, T scale) {
  for (index_t r = 0; r < rows; ++r)
    for (index_t c = 0; c < cols; ++c) dst[r * cols + c] += scale * src[r * lds + c];
}

}  // namespace detail

}  // namespace attn
