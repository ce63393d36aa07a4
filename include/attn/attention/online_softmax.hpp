// attn/attention/online_softmax.hpp: softmax attention computed tile by tile with a running
// max and sum (Milakov & Gimelshein 2018; FlashAttention, Dao et al. 2022), so the Tq x Tk
// weight matrix is never stored unless it is small enough to keep for backward. Backward
// recomputes each tile's weights from the saved log-sum-exp (or reads the kept ones), in one
// pass per (batch, key/value head) or two passes, chosen by shape. Whole tiles that the mask
// rules out are skipped (causal: about half), and so are the blocks of a partial tile that it
// rules out (TileBlocks). Tile products run on tile_gemm.hpp's kernels.
// Does not support score kernels other than exp; see materialized.hpp for those.
//
// Shapes: q [B, H, Tq, Dh], k [B, Hk, Tk, Dh], v [B, Hk, Tk, Dv] -> o [B, H, Tq, Dv], where
// Hk divides H (query head h reads key/value head h / (H / Hk): multi- or grouped-query).
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "../autodiff/autodiff.hpp"
#include "geometry.hpp"
#include "mask.hpp"
#include "score.hpp"
#include "tile_gemm.hpp"

namespace attn {

namespace detail {

// Tile sizes; fixed, so results do not depend on the thread count. 128 x 128 float tiles (64 KiB
// of scores) sit in L2; against 64 x 64 they halve the rescaling steps and kernel calls per
// score.
inline constexpr index_t attn_query_tile = 128;
inline constexpr index_t attn_key_tile = 128;

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace detail

// Dropout on the attention weights: each weight is kept with probability 1 − p and scaled by
// 1/(1 − p). The decision for (b, h, i, j) is a hash of (seed, position), so forward and backward
// agree without storing a mask and the result does not depend on the thread count.
struct AttentionDropout {
  double p = 0.0;
  std::uint64_t seed = 0;

  bool active() const { return p > 0.0; }
  // Throws value_error unless p is in [0, 1]; `who` names the operation.
  void check(const char* who) const {
    ATTN_CHECK(p >= 0.0 && p <= 1.0, value_error, who, ": dropout p must be in [0, 1], got ", p);
  }
  DropoutMask mask() const { return DropoutMask(seed, p); }
  // Multiplies a row-major tile of weights, rows [row0, ...) of a head's Tq x tk weights and
  // columns [j0, ...), by the kept mask / (1 − p).
  template <class M>
  void apply(M& tile, index_t row0, index_t tk, index_t j0) const {
    if (tile.cols() == 0) return;
    const DropoutMask m = mask();
    for (index_t i = 0; i < tile.rows(); ++i)
      m.apply(&tile(i, 0), &tile(i, 0), tile.cols(),
              static_cast<std::uint64_t>((row0 + i) * tk + j0));
  }
};

namespace detail {
template <class T>
using Col = Eigen::Matrix<T, Eigen::Dynamic, 1>;

// The checks every attention entry point makes: q, k, v are current Vars of one tape, and their
// shapes fit together (see attention_geometry).
template <class T>
AttentionGeometry checked_geometry(const Var<T>& q, const Var<T>& k, const Var<T>& v,
                                   const char* op, index_t key_length = 0) {
  Tape<T>& tape = q.tape();
  tape.check(q, op);
  tape.check(k, op);
  tape.check(v, op);
  return attention_geometry(q.shape(), k.shape(), v.shape(), op, key_length);
}

}  // namespace detail

// How backward gets the attention weights P and how it walks the tiles. `automatic` decides by
// shape alone (never by thread count, so results do not depend on it):
//   weights: saved by the forward when a gradient is needed and B·H·Tq·Tk <=
//            attn_saved_weights_limit, else recomputed per tile from the saved log-sum-exp;
//   passes:  one pass per (batch, key/value head) when B·Hk >= attn_single_pass_min_tasks, else
//            two passes (dQ by query tile, then dK and dV by key tile: more parallel tasks).
// The forced choices exist for tests and benchmarks; they change rounding, not results.
enum class BackwardWeights { automatic, saved, recomputed };
enum class BackwardPasses { automatic, single, two };
struct AttentionBackward {
  BackwardWeights weights = BackwardWeights::automatic;
  BackwardPasses passes = BackwardPasses::automatic;
};

// Weights are kept for backward up to this many elements B·H·Tq·Tk (16 MiB in float): GPT
// training at block 128 (B = 32, 8 heads) is exactly this size.
inline constexpr index_t attn_saved_weights_limit = index_t{1} << 22;
// The single-pass backward has B·Hk parallel tasks; below this count it would idle threads.
inline constexpr index_t attn_single_pass_min_tasks = 4;

namespace detail {

static_assert(attn_key_tile % packet_size<float> == 0 && attn_key_tile % packet_size<double> == 0,
              "attn: the key tile must be a whole number of packets");

// Operand copies one call lays out before its tiles run (all O(T·d)); kept per calling thread
// and reused, so a steady-state training step does not allocate.
template <class T>
struct AttentionLayout {
  std::vector<T> kt, vt, kpad, vpad, qpad, dopad, key_norms;
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

// Score tiles S = alpha Q Kᵀ + beta_k ‖k‖² + b_h(p_i − p_j) (beta_q ‖q‖² is the same for every
// key of a row and cancels in softmax, so it is left out here and in the saved log-sum-exp
// alike; the position bias b_h only for scores that have one, see score.hpp).
template <class T, ScorePolicy Score, MaskPolicy Mask>
struct ScoreTiles {
  const Score& score;
  const Mask& mask;
  const AttentionGeometry& g;
  const T* q;
  KeyPanels<T> kt;
  const T* key_norms;  // beta_k ‖k_j‖² per (b, hk, j), or null when beta_k = 0
  T alpha;

  // The tile of rows [i0, i0 + br) against keys [j0, j0 + bc) of batch entry b (tile_blocks).
  TileBlocks blocks(index_t b, index_t i0, index_t br, index_t j0, index_t bc) const {
    return tile_blocks(mask, b, i0, br, j0, bc, g.Tq, g.Tk);
  }

  // Rows [i0, i0 + br) of head (b, h) against keys [j0, j0 + bc) (the tile `t` of blocks())
  // into s (rows lds apart), masked entries −∞, each row's maximum into rmax. False, and nothing
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
    if constexpr (HasPositionBias<Score>) {
      const auto position_bias = score.position_bias(h, g.H);
      for (index_t i = 0; i < br; ++i) {
        T* row = s + i * lds;
        const index_t delta0 = g.query_position(i0 + i) - j0;  // p_i − p_j at j = j0
        for (index_t j = 0; j < bc; ++j) row[j] += static_cast<T>(position_bias(delta0 - j));
        rmax[i] = row_max(row, bc);
      }
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
    return true;
  }
};

template <class T, ScorePolicy Score, MaskPolicy Mask>
ScoreTiles<T, Score, Mask> make_score_tiles(const Score& score, const Mask& mask,
                                            const AttentionGeometry& g, const T* q, const T* k,
                                            AttentionLayout<T>& layout) {
  return {score,
          mask,
          g,
          q,
          pack_key_panels(k, g, g.Dh, layout.kt),
          key_norm_bias<Score>(g, k, layout.key_norms),
          static_cast<T>(score.alpha(g.Dh))};
}

// A tile [rows, cols] of a row-major buffer with rows `ld` apart, for AttentionDropout::apply.
template <class T>
using TileMap = Eigen::Map<Mat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

template <class T>
struct AttentionScratch {
  std::vector<T> s, dp, pm, acc, dq, dk, dv, colsum, m, l, rmax;
  std::vector<unsigned char> started;  // per key tile: its dK, dV accumulators hold a product
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

// Forward: o and the per-row log-sum-exp (−∞ for a row with no allowed key), by the online
// softmax over key tiles (Milakov & Gimelshein): m' = max(m, rowmax S), the old sum and
// accumulator rescaled by e^{m − m'}. With `keep` ([B, H, Tq, Tk]) it also leaves the weights P
// there for backward: each tile's e^{S − m} is copied out as it is made, and once the row is
// done multiplied by e^{m − m_final} / l. o and lse are computed the same way either way, so
// the output does not depend on whether gradients are recorded.
template <class T, ScorePolicy Score, MaskPolicy Mask>
void online_softmax_forward(const Score& score, const Mask& mask, const AttentionDropout& dropout,
                            const AttentionGeometry& g, const T* q, const T* k, const T* v, T* o,
                            T* lse, T* keep) {
  AttentionLayout<T>& layout = attention_layout<T>();
  const ScoreTiles<T, Score, Mask> scores = make_score_tiles(score, mask, g, q, k, layout);
  const RowsView<T> V = padded_rows(v, g.B * g.Hk * g.key_rows(), g.Dv, layout.vpad);
  const index_t qtiles = block_count(g.Tq, attn_query_tile),
                ktiles = block_count(g.Tk, attn_key_tile), ldv = packet_round<T>(g.Dv);
  constexpr index_t lds = attn_key_tile;
  constexpr T ninf = -std::numeric_limits<T>::infinity();
  const double cost = 4.0 * double(attn_query_tile) * double(g.Tk) * double(g.Dh + g.Dv);
  parallel_for(g.B * g.H * qtiles, cost, [&](index_t task) {
    const index_t qt = task % qtiles, bh = task / qtiles, h = bh % g.H, b = bh / g.H,
                  hk = h / g.group();
    const index_t i0 = qt * attn_query_tile, br = std::min(attn_query_tile, g.Tq - i0);
    AttentionScratch<T>& sc = attention_scratch<T>();
    sc.s.resize(static_cast<std::size_t>(br * lds));
    sc.rmax.resize(static_cast<std::size_t>(br));
    T* s = sc.s.data();
    T* m = zeroed(sc.m, br);
    T* l = zeroed(sc.l, br);
    T* acc = zeroed(sc.acc, br * ldv);
    std::fill(m, m + br, ninf);
    // With keep: the shift each row's tile was exponentiated with (+∞: nothing allowed there).
    T* shift = keep ? zeroed(sc.colsum, br * ktiles) : nullptr;
    const T* vrows = V.row(g.k_row(b, hk, 0));
    const index_t row0 = g.row(b, h, i0);
    T* p = keep ? keep + row0 * g.Tk : nullptr;  // [br, Tk]
    for (index_t j0 = 0; j0 < g.Tk; j0 += attn_key_tile) {
      const index_t bc = std::min(attn_key_tile, g.Tk - j0);
      const TileBlocks tb = scores.blocks(b, i0, br, j0, bc);
      if (!scores(b, h, i0, br, j0, bc, s, lds, sc.rmax.data(), tb)) {
        if (keep)
          for (index_t i = 0; i < br; ++i) {
            std::fill_n(p + i * g.Tk + j0, bc, T{0});
            shift[i * ktiles + j0 / attn_key_tile] = -ninf;
          }
        continue;
      }
      for (index_t i = 0; i < br; ++i) {
        const T m_new = std::max(m[i], sc.rmax[static_cast<std::size_t>(i)]);
        const T m_safe = m_new == ninf ? T{0} : m_new;  // nothing allowed yet: the row stays 0
        const T corr = std::exp(m[i] - m_safe);
        l[i] = l[i] * corr + exp_row_sum(s + i * lds, bc, m_safe);
        if (corr != T{1}) scale_row(acc + i * ldv, g.Dv, corr);
        m[i] = m_new;
        if (keep) {
          std::copy_n(s + i * lds, bc, p + i * g.Tk + j0);
          shift[i * ktiles + j0 / attn_key_tile] = m_new == ninf ? -ninf : m_safe;
        }
      }
      if (dropout.active()) {  // after l: the sum is of undropped weights
        TileMap<T> tile(s, br, bc, Eigen::OuterStride<>(lds));
        dropout.apply(tile, row0, g.Tk, j0);
      }
      live_weights_product(tb, false, g.Dv, s, lds, index_t{1}, vrows + j0 * V.ld, V.ld, acc, ldv,
                           true);
    }
    T* out = o + g.o_off(b, h, i0);
    for (index_t i = 0; i < br; ++i) {
      T* orow = out + i * g.Dv;
      if (l[i] == T{0}) {  // no allowed key: output 0, and backward skips the row
        std::fill_n(orow, g.Dv, T{0});
        lse[row0 + i] = ninf;
        if (keep) std::fill_n(p + i * g.Tk, g.Tk, T{0});
        continue;
      }
      for (index_t c = 0; c < g.Dv; ++c) orow[c] = acc[i * ldv + c] / l[i];
      lse[row0 + i] = m[i] + std::log(l[i]);
      if (keep)
        for (index_t t = 0; t < ktiles; ++t) {
          const T sh = shift[i * ktiles + t];
          if (sh == -ninf) continue;  // nothing allowed in this tile: already 0
          scale_row(p + i * g.Tk + t * attn_key_tile,
                    std::min(attn_key_tile, g.Tk - t * attn_key_tile), std::exp(sh - m[i]) / l[i]);
        }
    }
  });
}

// Writes the full weight matrix [B, H, Tq, Tk] from the saved log-sum-exp (for analysis and
// demos; O(T²) memory).
template <class T, ScorePolicy Score, MaskPolicy Mask>
void online_softmax_weights(const Score& score, const Mask& mask, const AttentionGeometry& g,
                            const T* q, const T* k, const T* lse, T* w) {
  const ScoreTiles<T, Score, Mask> scores =
      make_score_tiles(score, mask, g, q, k, attention_layout<T>());
  const index_t qtiles = block_count(g.Tq, attn_query_tile);
  constexpr index_t lds = attn_key_tile;
  parallel_for(g.B * g.H * qtiles, 2.0 * double(attn_query_tile) * double(g.Tk) * double(g.Dh),
               [&](index_t task) {
                 const index_t qt = task % qtiles, bh = task / qtiles, h = bh % g.H, b = bh / g.H;
                 const index_t i0 = qt * attn_query_tile, br = std::min(attn_query_tile, g.Tq - i0);
                 AttentionScratch<T>& sc = attention_scratch<T>();
                 sc.s.resize(static_cast<std::size_t>(br * lds));
                 sc.rmax.resize(static_cast<std::size_t>(br));
                 T* s = sc.s.data();
                 const index_t row0 = g.row(b, h, i0);
                 for (index_t j0 = 0; j0 < g.Tk; j0 += attn_key_tile) {
                   const index_t bc = std::min(attn_key_tile, g.Tk - j0);
                   const bool any = scores(b, h, i0, br, j0, bc, s, lds, sc.rmax.data(),
                                           scores.blocks(b, i0, br, j0, bc));
                   for (index_t i = 0; i < br; ++i) {
                     T* out = w + (row0 + i) * g.Tk + j0;
                     if (!any || lse[row0 + i] == -std::numeric_limits<T>::infinity()) {
                       std::fill_n(out, bc, T{0});
                       continue;
                     }
                     exp_row_sum(s + i * lds, bc, lse[row0 + i]);
                     std::copy_n(s + i * lds, bc, out);
                   }
                 }
               });
}

template <ScorePolicy Score, MaskPolicy Mask>
struct OnlineSoftmaxOp {
  std::int32_t q, k, v;
  AttentionGeometry g;
  Score score;
  AttentionDropout dropout;
  const Mask* mask;  // owned by self.keep
  bool saved_weights;
  bool single_pass;
  // self.saved[0]: log-sum-exp per query row [B, H, Tq]; self.saved[1]: D = rowsum(dO ∘ O);
  // self.saved[2]: the weights P [B, H, Tq, Tk] when saved_weights.

  // With P = exp(S − lse) and D_i = Σ_d dO_id O_id (= Σ_j P_ij dP_ij):
  //   dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP − D),  dQ = alpha dS K,
  //   dK = alpha dSᵀ Q + 2 beta_k colsum(dS) ∘ k.
  // Single pass: one task per (b, key/value head) walks every tile of its query heads once,
  // computing P and dS once per tile; it owns the dK, dV rows of its head and the dQ rows of
  // its query heads, so no two tasks write the same row and the sums run in a fixed order.
  // Two passes: dQ by query tile, then dK and dV by key tile (P and dS computed twice).
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    const T* qv = tape.value(q).data();
    const T* kv = tape.value(k).data();
    const T* vv = tape.value(v).data();
    const T* ov = self.value->data();
    const T* dov = self.grad->data();
    const T* lse = self.saved[0].data();
    const T* kept = saved_weights ? self.saved[2].data() : nullptr;
    self.saved[1].resize(Shape{g.B * g.H * g.Tq});
    T* D = self.saved[1].data();
    parallel_for(g.B * g.H * g.Tq, double(g.Dv) * 2, [&](index_t r) {
      T s = 0;
      for (index_t d = 0; d < g.Dv; ++d) s += dov[r * g.Dv + d] * ov[r * g.Dv + d];
      D[r] = s;
    });
    const bool need_q = tape.requires_grad(q), need_k = tape.requires_grad(k),
               need_v = tape.requires_grad(v);
    T* dq = need_q ? tape.grad(q).data() : nullptr;
    T* dk = need_k ? tape.grad(k).data() : nullptr;
    T* dv = need_v ? tape.grad(v).data() : nullptr;
    const T alpha = static_cast<T>(score.alpha(g.Dh));
    constexpr T ninf = -std::numeric_limits<T>::infinity();
    constexpr index_t lds = attn_key_tile;
    const index_t ldk = packet_round<T>(g.Dh), ldv = packet_round<T>(g.Dv);
    const DropoutMask drop = dropout.mask();

    AttentionLayout<T>& layout = attention_layout<T>();
    const ScoreTiles<T, Score, Mask> scores =
        kept ? ScoreTiles<T, Score, Mask>{score, *mask, g, qv, {}, nullptr, alpha}
             : make_score_tiles(score, *mask, g, qv, kv, layout);
    const KeyPanels<T> vt = pack_key_panels(vv, g, g.Dv, layout.vt);
    const RowsView<T> K = need_q ? padded_rows(kv, g.B * g.Hk * g.key_rows(), g.Dh, layout.kpad)
                                 : RowsView<T>{kv, g.Dh};
    const RowsView<T> Q =
        need_k ? padded_rows(qv, g.B * g.H * g.Tq, g.Dh, layout.qpad) : RowsView<T>{qv, g.Dh};
    const RowsView<T> dO =
        need_v ? padded_rows(dov, g.B * g.H * g.Tq, g.Dv, layout.dopad) : RowsView<T>{dov, g.Dv};

    // P (into p, rows ldp apart; p ∘ mask / (1 − p) into pv for dV when dropping) and dS into
    // sc.dp for one tile; false if the mask rules the tile out.
    struct TileGrads {
      const T *p, *pv;
      index_t ldp, ldpv;
      TileBlocks blocks;
    };
    auto ds_tile = [&](AttentionScratch<T>& sc, index_t b, index_t h, index_t i0, index_t br,
                       index_t j0, index_t bc, TileGrads& t) {
      const index_t row0 = g.row(b, h, i0);
      t.blocks = scores.blocks(b, i0, br, j0, bc);
      if (t.blocks.kind == TileKind::none) return false;
      if (kept) {
        t.p = kept + row0 * g.Tk + j0;
        t.ldp = g.Tk;
      } else {
        scores(b, h, i0, br, j0, bc, sc.s.data(), lds, sc.rmax.data(), t.blocks);
        for (index_t i = 0; i < br; ++i) {
          T* row = sc.s.data() + i * lds;
          if (lse[row0 + i] == ninf)
            std::fill_n(row, bc, T{0});
          else
            exp_row_sum(row, bc, lse[row0 + i]);
        }
        t.p = sc.s.data();
        t.ldp = lds;
      }
      T* dp = sc.dp.data();
      live_tile_product(t.blocks, g.Dv, dov + g.o_off(b, h, i0), g.Dv, index_t{1},
                        vt.panel(g, b, h / g.group(), j0), attn_key_tile, dp, lds);
      t.pv = t.p;
      t.ldpv = t.ldp;
      if (dropout.active()) {  // O = (P ∘ M) V: dV = (P ∘ M)ᵀ dO and dP = M ∘ (dO Vᵀ)
        for (index_t i = 0; i < br; ++i)  // dP ∘ M in place, P ∘ M into pm: one mask
          drop.apply(dp + i * lds, dp + i * lds, t.p + i * t.ldp, sc.pm.data() + i * lds, bc,
                     static_cast<std::uint64_t>((row0 + i) * g.Tk + j0));
        t.pv = sc.pm.data();
        t.ldpv = lds;
      }
      for (index_t i = 0; i < br; ++i)
        softmax_grad_row(t.p + i * t.ldp, dp + i * lds, bc, D[row0 + i]);
      return true;
    };
    auto prepare = [&](AttentionScratch<T>& sc) {
      sc.s.resize(static_cast<std::size_t>(attn_query_tile * lds));
      sc.dp.resize(static_cast<std::size_t>(attn_query_tile * lds));
      sc.pm.resize(static_cast<std::size_t>(attn_query_tile * lds));
      sc.rmax.resize(static_cast<std::size_t>(attn_query_tile));
    };
    // dK rows [j0, j0 + bc) of head (b, hk) += alpha dk + 2 beta_k colsum ∘ k; dV rows += dv.
    auto write_kv = [&](index_t b, index_t hk, index_t j0, index_t bc, const T* dk_acc,
                        const T* dv_acc, const T* colsum) {
      if (dk) {
        T* dst = dk + g.k_off(b, hk, j0);
        add_rows(dst, dk_acc, bc, g.Dh, ldk, alpha);
        if constexpr (Score::beta_k != 0) {
          const T* kr = kv + g.k_off(b, hk, j0);
          for (index_t j = 0; j < bc; ++j)
            for (index_t c = 0; c < g.Dh; ++c)
              dst[j * g.Dh + c] += T(2 * Score::beta_k) * colsum[j] * kr[j * g.Dh + c];
        }
      }
      if (dv) add_rows(dv + g.v_off(b, hk, j0), dv_acc, bc, g.Dv, ldv, T{1});
    };
    // The products of one tile's dS (sc.dp) and P into the accumulators (null: not needed);
    // kv_add / q_add false: the accumulators hold nothing yet, so the product is written.
    auto accumulate = [&](AttentionScratch<T>& sc, const TileGrads& t, index_t b, index_t h,
                          index_t i0, index_t br, index_t j0, index_t bc, T* dk_acc, T* dv_acc,
                          T* colsum, T* dq_acc, bool kv_add, bool q_add) {
      const T* ds = sc.dp.data();
      const index_t row0 = g.row(b, h, i0);
      if (dv_acc)  // dV_j += Pᵀ dO_i
        live_weights_product(t.blocks, true, g.Dv, t.pv, index_t{1}, t.ldpv, dO.row(row0), dO.ld,
                             dv_acc, ldv, kv_add);
      if (dk_acc) {  // dK_j += dSᵀ Q_i
        live_weights_product(t.blocks, true, g.Dh, ds, index_t{1}, lds, Q.row(row0), Q.ld, dk_acc,
                             ldk, kv_add);
        if constexpr (Score::beta_k != 0)
          for (index_t i = 0; i < br; ++i)
            for (index_t j = 0; j < bc; ++j) colsum[j] += ds[i * lds + j];
      }
      if (dq_acc)  // dQ_i += dS K_j
        live_weights_product(t.blocks, false, g.Dh, ds, lds, index_t{1},
                             K.row(g.k_row(b, h / g.group(), j0)), K.ld, dq_acc, ldk, q_add);
    };
    const index_t qtiles = block_count(g.Tq, attn_query_tile),
                  ktiles = block_count(g.Tk, attn_key_tile);
    const double tile_cost =
        8.0 * double(attn_query_tile) * double(attn_key_tile) * double(g.Dh + g.Dv);
    const bool kv_grads = dk != nullptr || dv != nullptr;

    if (single_pass) {
      parallel_for(g.B * g.Hk, tile_cost * double(qtiles * ktiles * g.group()), [&](index_t task) {
        const index_t hk = task % g.Hk, b = task / g.Hk;
        AttentionScratch<T>& sc = attention_scratch<T>();
        prepare(sc);
        T* dk_acc = dk ? sized(sc.dk, g.Tk * ldk) : nullptr;
        T* dv_acc = dv ? sized(sc.dv, g.Tk * ldv) : nullptr;
        T* colsum = zeroed(sc.colsum, g.Tk);
        sc.started.assign(static_cast<std::size_t>(ktiles), 0);
        TileGrads t{};
        for (index_t h = hk * g.group(); h < (hk + 1) * g.group(); ++h)
          for (index_t i0 = 0; i0 < g.Tq; i0 += attn_query_tile) {
            const index_t br = std::min(attn_query_tile, g.Tq - i0);
            T* dq_acc = dq ? sized(sc.dq, br * ldk) : nullptr;
            bool q_started = false;
            for (index_t j0 = 0; j0 < g.Tk; j0 += attn_key_tile) {
              const index_t bc = std::min(attn_key_tile, g.Tk - j0);
              if (!ds_tile(sc, b, h, i0, br, j0, bc, t)) continue;
              unsigned char& kv_started = sc.started[static_cast<std::size_t>(j0 / attn_key_tile)];
              accumulate(sc, t, b, h, i0, br, j0, bc, dk_acc ? dk_acc + j0 * ldk : nullptr,
                         dv_acc ? dv_acc + j0 * ldv : nullptr, colsum + j0, dq_acc, kv_started != 0,
                         q_started);
              kv_started = 1;
              q_started = true;
            }
            if (dq && q_started) add_rows(dq + g.q_off(b, h, i0), dq_acc, br, g.Dh, ldk, alpha);
          }
        if (kv_grads)
          for (index_t j0 = 0; j0 < g.Tk; j0 += attn_key_tile)
            if (sc.started[static_cast<std::size_t>(j0 / attn_key_tile)])
              write_kv(b, hk, j0, std::min(attn_key_tile, g.Tk - j0),
                       dk_acc ? dk_acc + j0 * ldk : nullptr, dv_acc ? dv_acc + j0 * ldv : nullptr,
                       colsum + j0);
      });
      return;
    }
    if (dq) {
      parallel_for(g.B * g.H * qtiles, tile_cost * double(ktiles), [&](index_t task) {
        const index_t qt = task % qtiles, bh = task / qtiles, h = bh % g.H, b = bh / g.H;
        const index_t i0 = qt * attn_query_tile, br = std::min(attn_query_tile, g.Tq - i0);
        AttentionScratch<T>& sc = attention_scratch<T>();
        prepare(sc);
        T* dq_acc = sized(sc.dq, br * ldk);
        bool q_started = false;
        TileGrads t{};
        for (index_t j0 = 0; j0 < g.Tk; j0 += attn_key_tile) {
          const index_t bc = std::min(attn_key_tile, g.Tk - j0);
          if (!ds_tile(sc, b, h, i0, br, j0, bc, t)) continue;
          accumulate(sc, t, b, h, i0, br, j0, bc, nullptr, nullptr, nullptr, dq_acc, false,
                     q_started);
          q_started = true;
        }
        if (q_started) add_rows(dq + g.q_off(b, h, i0), dq_acc, br, g.Dh, ldk, alpha);
      });
    }
    if (!kv_grads) return;
    parallel_for(g.B * g.Hk * ktiles, tile_cost * double(qtiles * g.group()), [&](index_t task) {
      const index_t kt = task % ktiles, bh = task / ktiles, hk = bh % g.Hk, b = bh / g.Hk;
      const index_t j0 = kt * attn_key_tile, bc = std::min(attn_key_tile, g.Tk - j0);
      AttentionScratch<T>& sc = attention_scratch<T>();
      prepare(sc);
      T* dk_acc = dk ? sized(sc.dk, bc * ldk) : nullptr;
      T* dv_acc = dv ? sized(sc.dv, bc * ldv) : nullptr;
      T* colsum = zeroed(sc.colsum, bc);
      bool kv_started = false;
      TileGrads t{};
      for (index_t h = hk * g.group(); h < (hk + 1) * g.group(); ++h)
        for (index_t i0 = 0; i0 < g.Tq; i0 += attn_query_tile) {
          const index_t br = std::min(attn_query_tile, g.Tq - i0);
          if (!ds_tile(sc, b, h, i0, br, j0, bc, t)) continue;
          accumulate(sc, t, b, h, i0, br, j0, bc, dk_acc, dv_acc, colsum, nullptr, kv_started,
                     false);
          kv_started = true;
        }
      if (kv_started) write_kv(b, hk, j0, bc, dk_acc, dv_acc, colsum);
    });
  }
};

// The backward choices for one call, resolved by shape (see AttentionBackward).
inline bool save_weights_for_backward(const AttentionBackward& plan, const AttentionGeometry& g) {
  if (plan.weights != BackwardWeights::automatic) return plan.weights == BackwardWeights::saved;
  return g.B * g.H * g.Tq * g.Tk <= attn_saved_weights_limit;
}
inline bool single_pass_backward(const AttentionBackward& plan, const AttentionGeometry& g) {
  if (plan.passes != BackwardPasses::automatic) return plan.passes == BackwardPasses::single;
  return g.B * g.Hk >= attn_single_pass_min_tasks;
}

// What the fused kernels use of a score is alpha(Dh), beta_k and the position bias (beta_q
// cancels under softmax). The scores of the dot family (beta_k = 0, no bias: Dot, ScaledDot and
// the module scores run as one of them) are handed to the kernels as this one type with alpha
// a run-time value, so they share one compiled kernel instead of one each.
struct DotForm {
  static constexpr const char* name = "dot_form";
  static constexpr double beta_q = 0, beta_k = 0;
  double a = 1;
  double alpha(index_t) const { return a; }
  template <class T>
  double operator()(const T* q, const T* k, index_t d) const {
    return a * score::detail::dot(q, k, d);
  }
};

template <ScorePolicy Score>
inline constexpr bool runs_as_dot_form =
    Score::beta_k == 0 && !HasPositionBias<Score> && !std::is_same_v<Score, DotForm>;

}  // namespace detail

// Softmax attention o_i = Σ_j softmax_j(s(q_i, k_j) | mask) v_j by the online-softmax algorithm.
// When `weights` is given it receives the [B, H, Tq, Tk] weights before dropout (not
// differentiable); `dropout` drops weights (training); `plan` picks how backward runs;
// key_length > 0 attends to the first key_length rows of each head of k and v only (a decoding
// cache with spare capacity, read in place; see geometry.hpp).
template <ScorePolicy Score, MaskPolicy Mask, class T>
Var<T> online_softmax_attention(const Var<T>& q, const Var<T>& k, const Var<T>& v,
                                const Score& score, const Mask& mask, Tensor<T>* weights = nullptr,
                                const AttentionDropout& dropout = {},
                                const AttentionBackward& plan = {}, index_t key_length = 0) {
  if constexpr (detail::runs_as_dot_form<Score>) {
    return online_softmax_attention(q, k, v, detail::DotForm{score.alpha(q.shape().last())}, mask,
                                    weights, dropout, plan, key_length);
  } else {
    Tape<T>& tape = q.tape();
    const detail::AttentionGeometry g = detail::checked_geometry(q, k, v, "attention", key_length);
    mask.validate(g.B, g.Tq, g.Tk);
    dropout.check("attention");
    auto [o, node] = tape.push(Shape{g.B, g.H, g.Tq, g.Dv}, "attention",
                               q.requires_grad() || k.requires_grad() || v.requires_grad());
    const bool keep = node.requires_grad && detail::save_weights_for_backward(plan, g);
    node.saved.resize(keep ? 3 : 2);
    node.saved[0].resize(Shape{g.B * g.H * g.Tq});
    if (keep) node.saved[2].resize(Shape{g.B * g.H * g.Tq * g.Tk});
    detail::online_softmax_forward(score, mask, dropout, g, q.value().data(), k.value().data(),
                                   v.value().data(), node.value->data(), node.saved[0].data(),
                                   keep ? node.saved[2].data() : nullptr);
    if (weights) {
      weights->resize(Shape{g.B, g.H, g.Tq, g.Tk});
      if (keep)
        std::copy_n(node.saved[2].data(), weights->numel(), weights->data());
      else
        detail::online_softmax_weights(score, mask, g, q.value().data(), k.value().data(),
                                       node.saved[0].data(), weights->data());
    }
    if (node.requires_grad) {
      const Mask* stored = node.template keep_value<Mask>(mask);
      tape.set_backward(node, detail::OnlineSoftmaxOp<Score, Mask>{
                                  q.index(), k.index(), v.index(), g, score, dropout, stored, keep,
                                  detail::single_pass_backward(plan, g)});
    }
    return o;
  }
}

}  // namespace attn
