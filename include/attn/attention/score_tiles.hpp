// attn/attention/score_tiles.hpp: the score tiles of the fused kernel: which 32 x 32 blocks of a
// tile the mask leaves live (TileBlocks), the tile products restricted to them, and ScoreTiles,
// which makes a tile of S = alpha Q Kᵀ + beta_k ‖k‖² + position bias, masked, with its row
// maxima. A causal diagonal tile computes 10 of its 16 blocks.
// Does not exponentiate or accumulate: fused_forward.hpp and fused_backward.hpp do.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "geometry.hpp"
#include "learned_bias.hpp"
#include "mask.hpp"
#include "score.hpp"
#include "tile_gemm.hpp"
#include "tile_layout.hpp"

namespace attn {

namespace detail {

// Which blocks of `edge` x `edge` elements of one tile the mask leaves some element in (live),
// so that the products of a partial tile (a causal diagonal, the edge of a window) skip the
// rest: in a dead block the weights P and dS are exactly 0, so leaving its terms out of P V,
// dS K, Pᵀ dO and dSᵀ Q changes no sum, and its scores and dP are not needed (the scores are
// masked to −∞, dP is multiplied by P = 0). A causal diagonal tile computes 10 of its 16 blocks.
struct TileBlocks {
  static constexpr index_t edge = 32;
  static constexpr index_t row_blocks = attn_query_tile / edge, col_blocks = attn_key_tile / edge;
  TileKind kind = TileKind::none;
  index_t br = 0, bc = 0;  // the tile's rows and columns
  bool live[row_blocks][col_blocks] = {};

  // Columns [lo, hi) of the tile from the first to the last live block of row block r (lo = hi:
  // none live); the whole row when the tile is all allowed.
  std::pair<index_t, index_t> columns(index_t r) const { return span(r, false); }
  // Rows [lo, hi) of the tile from the first to the last live block of column block c.
  std::pair<index_t, index_t> rows(index_t c) const { return span(c, true); }

 private:
  std::pair<index_t, index_t> span(index_t x, bool of_column) const {
    const index_t len = of_column ? br : bc;
    if (kind == TileKind::all) return {0, len};
    index_t lo = 0, hi = 0;
    for (index_t y = 0; y * edge < len; ++y)
      if (of_column ? live[y][x] : live[x][y]) {
        if (lo == hi) lo = y * edge;
        hi = std::min(len, (y + 1) * edge);
      }
    return {lo, hi};
  }
};

static_assert(attn_query_tile % TileBlocks::edge == 0 && attn_key_tile % TileBlocks::edge == 0 &&
                  TileBlocks::edge % packet_size<float> == 0 &&
                  TileBlocks::edge % packet_size<double> == 0,
              "attn: tile blocks must divide the tiles and be whole packets");

// The tile rows [i0, i0 + br) x columns [j0, j0 + bc) of batch entry b: its kind, and for a
// partial tile which blocks are live (the mask asked once per block).
template <MaskPolicy Mask>
TileBlocks tile_blocks(const Mask& mask, index_t b, index_t i0, index_t br, index_t j0, index_t bc,
                       index_t tq, index_t tk) {
  TileBlocks t;
  t.kind = mask.tile(b, i0, i0 + br, j0, j0 + bc, tq, tk);
  t.br = br;
  t.bc = bc;
  if (t.kind == TileKind::partial)
    for (index_t r = 0; r * TileBlocks::edge < br; ++r)
      for (index_t c = 0; c * TileBlocks::edge < bc; ++c) {
        const index_t r0 = i0 + r * TileBlocks::edge, c0 = j0 + c * TileBlocks::edge;
        t.live[r][c] =
            mask.tile(b, r0, std::min(i0 + br, r0 + TileBlocks::edge), c0,
                      std::min(j0 + bc, c0 + TileBlocks::edge), tq, tk) != TileKind::none;
      }
  return t;
}

// C [br, bc] = A [br, k] B [k, bc] as tile_gemm (rows of C ldc apart), computed in the live
// columns of each row block only; the rest of C's row is set to 0 (scores there are masked, dP
// is multiplied by zero weights). A tile that is all allowed is one product (one call site for
// tile_gemm, which is inlined: compile time). Not inlined itself: one copy per element type, not
// one per call site of every score and mask (8 % more compile time for the fused kernels when it
// was).
template <class T>
EIGEN_DONT_INLINE void live_tile_product(const TileBlocks& t, index_t k, const T* a, index_t ars,
                                         index_t acs, const T* b, index_t ldb, T* c, index_t ldc) {
  const bool whole = t.kind == TileKind::all;
  const index_t step = whole ? t.br : TileBlocks::edge;
  for (index_t r0 = 0; r0 < t.br; r0 += step) {
    const index_t mr = std::min(step, t.br - r0);
    const auto [lo, hi] = t.columns(r0 / TileBlocks::edge);
    if (!whole)
      for (index_t i = r0; i < r0 + mr; ++i) {
        std::fill(c + i * ldc, c + i * ldc + lo, T{0});
        std::fill(c + i * ldc + hi, c + i * ldc + t.bc, T{0});
      }
    if (lo < hi)
      tile_gemm(mr, hi - lo, k, a + r0 * ars, ars, acs, b + lo, ldb, c + r0 * ldc + lo, ldc, false);
  }
}

// C [m, n] (+)= A [m, k] B [k, n] as tile_gemm, where A is a tile's weights (P or dS: m = br,
// k = bc) or their transpose (key_side: m = bc, k = br), zero outside the live blocks: each
// block of rows of C sums over the span of its live blocks only, and one with none is cleared
// unless accumulating. A tile that is all allowed is one product. Not inlined (see above).
template <class T>
EIGEN_DONT_INLINE void live_weights_product(const TileBlocks& t, bool key_side, index_t n,
                                            const T* a, index_t ars, index_t acs, const T* b,
                                            index_t ldb, T* c, index_t ldc, bool accumulate) {
  const index_t m = key_side ? t.bc : t.br;
  const index_t step = t.kind == TileKind::all ? m : TileBlocks::edge;
  for (index_t r0 = 0; r0 < m; r0 += step) {
    const index_t mr = std::min(step, m - r0);
    const auto [lo, hi] =
        key_side ? t.rows(r0 / TileBlocks::edge) : t.columns(r0 / TileBlocks::edge);
    if (lo < hi)
      tile_gemm(mr, n, hi - lo, a + r0 * ars + lo * acs, ars, acs, b + lo * ldb, ldb, c + r0 * ldc,
                ldc, accumulate);
    else if (!accumulate)
      for (index_t i = r0; i < r0 + mr; ++i) std::fill_n(c + i * ldc, packet_round<T>(n), T{0});
  }
}

// Score tiles S = alpha Q Kᵀ + beta_k ‖k‖² + b_h(p_i − p_j) + a learned bias (beta_q ‖q‖² is the
// same for every key of a row and cancels in softmax, so it is left out here and in the saved
// log-sum-exp alike; the position bias b_h only for scores that have one, see score.hpp; the
// learned bias only when the call has one, learned_bias.hpp), through the score's soft cap when it
// has one.
template <class T, ScorePolicy Score, MaskPolicy Mask>
struct ScoreTiles {
  const Score& score;
  const Mask& mask;
  const AttentionGeometry& g;
  const T* q;
  KeyPanels<T> kt;
  const T* key_norms;  // beta_k ‖k_j‖² per (b, hk, j), or null when beta_k = 0
  T alpha;
  const BiasTables<T>* learned = nullptr;  // the call's learned bias, or null
  bool careful = false;  // some input is not finite: the row maxima propagate NaN (non_finite.hpp)
  // The score's position bias b_h(δ) for every head and every distance δ = p_i − p_j of the call,
  // [H, Tq + Tk − 1] from δ = 1 − Tq (position_bias_table); empty when the score has none, and
  // where this object makes no scores (a backward with the weights kept, which never calls it).
  std::vector<T> position_table = {};

  // The tile of rows [i0, i0 + br) against keys [j0, j0 + bc) of batch entry b (tile_blocks).
  TileBlocks blocks(index_t b, index_t i0, index_t br, index_t j0, index_t bc) const {
    return tile_blocks(mask, b, i0, br, j0, bc, g.Tq, g.Tk);
  }

  // Rows [i0, i0 + br) of head (b, h) against keys [j0, j0 + bc) (the tile `t` of blocks())
  // into s (rows lds apart), masked entries −∞, each row's maximum into rmax (NaN when careful
  // and an allowed score is NaN). False, and nothing
  // written, when the mask rules out the whole tile.
  bool operator()(index_t b, index_t h, index_t i0, index_t br, index_t j0, index_t bc, T* s,
                  index_t lds, T* rmax, const TileBlocks& t) const {
    const TileKind kind = t.kind;
    if (kind == TileKind::none) return false;
    const index_t hk = h / g.group();
    live_tile_product(t, g.Dh, q + g.q_off(b, h, i0), g.Dh, index_t{1}, kt.panel(g, b, hk, j0),
                      attn_key_tile, s, lds);
    const T* bias = key_norms ? key_norms + (b * g.Hk + hk) * g.Tk + j0 : nullptr;
    for (index_t i = 0; i < br; ++i) rmax[i] = scale_row_max(s + i * lds, bc, alpha, bias);
    if constexpr (HasPositionBias<Score>) {  // the table's values, read backwards: this vectorises
      const index_t span = g.Tq + g.Tk - 1;
      for (index_t i = 0; i < br; ++i) {
        T* row = s + i * lds;
        const index_t delta0 = g.query_position(i0 + i) - j0;  // p_i − p_j at j = j0
        const T* t = position_table.data() + h * span + (delta0 + g.Tq - 1);
        for (index_t j = 0; j < bc; ++j) row[j] += t[-j];
        rmax[i] = row_max(row, bc);
      }
    }
    if (learned) {
      learned->add(g, b, h, i0, br, j0, bc, s, lds);
      for (index_t i = 0; i < br; ++i) rmax[i] = row_max(s + i * lds, bc);
    }
    if constexpr (HasSoftCap<Score>)  // after the bias, before the mask
      for (index_t i = 0; i < br; ++i) {
        T* row = s + i * lds;
        for (index_t j = 0; j < bc; ++j) row[j] = soft_capped(score, row[j]);
        rmax[i] = row_max(row, bc);
      }
    if (kind == TileKind::partial) {
      constexpr T ninf = -std::numeric_limits<T>::infinity();
      for (index_t i = 0; i < br; ++i) {
        T* row = s + i * lds;
        for (index_t j = 0; j < bc; ++j)  // branch-free, so simple masks vectorise
          row[j] = mask.allowed(b, i0 + i, j0 + j, g.Tq, g.Tk) ? row[j] : ninf;
        rmax[i] = row_max(row, bc);
      }
    }
    if (careful)
      for (index_t i = 0; i < br; ++i) rmax[i] = row_max<T, true>(s + i * lds, bc);
    return true;
  }
};

// Score's position bias b_h(δ), rounded to T, of every head h < H and distance
// δ = p_i − p_j ∈ [1 − Tq, Tk − 1] (query i sits at position i + Tk − Tq, key j at j), at
// [h, δ + Tq − 1]; empty for a score without one. A tile then adds a slice of it instead of
// evaluating the score's formula (in double) per entry, which cost the ALiBi kernels about a
// sixth of their tile products' time (T = 1024, 8 heads; a thirtieth with the table).
template <class T, ScorePolicy Score>
std::vector<T> position_bias_table(const Score& score, const AttentionGeometry& g) {
  std::vector<T> table;
  if constexpr (HasPositionBias<Score>) {
    const index_t span = g.Tq + g.Tk - 1;
    table.resize(static_cast<std::size_t>(g.H * span));
    for (index_t h = 0; h < g.H; ++h) {
      const auto bias = score.position_bias(h, g.H);
      for (index_t d = 0; d < span; ++d)
        table[static_cast<std::size_t>(h * span + d)] = static_cast<T>(bias(d - (g.Tq - 1)));
    }
  }
  return table;
}

template <class T, ScorePolicy Score, MaskPolicy Mask>
ScoreTiles<T, Score, Mask> make_score_tiles(const Score& score, const Mask& mask,
                                            const AttentionGeometry& g, const T* q, const T* k,
                                            AttentionLayout<T>& layout,
                                            const BiasTables<T>* learned = nullptr,
                                            bool careful = false) {
  return {score,
          mask,
          g,
          q,
          pack_key_panels(k, g, g.Dh, layout.kt),
          key_norm_bias<Score>(g, k, layout.key_norms),
          static_cast<T>(score.alpha(g.Dh)),
          learned,
          careful,
          position_bias_table<T>(score, g)};
}

}  // namespace detail

}  // namespace attn
