// attn/attention/fused_backward.hpp: the fused kernel's backward pass and how it is planned.
// Backward recomputes each tile's weights from the saved log-sum-exp (or reads the kept ones) and
// makes dV = Pᵀ dO, dS = P ∘ (dO Vᵀ − D), dQ and dK from them, in one pass per (batch, key/value
// head) or two passes (dQ by query tile, then dK and dV by key tile), chosen by shape only, so
// that the sums run in an order that does not depend on the thread count.
// Does not run the forward (fused_forward.hpp) nor choose the score's form (online_softmax.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "../autodiff/autodiff.hpp"
#include "../core/parallel.hpp"
#include "kernel_common.hpp"
#include "non_finite.hpp"
#include "partials.hpp"
#include "score_tiles.hpp"
#include "tile_layout.hpp"

namespace attn {

// How backward gets the attention weights P and how it walks the tiles. `automatic` decides by
// shape alone (never by thread count, so results do not depend on it):
//   weights: saved by the forward when a gradient is needed and B·H·Tq·Tk <=
//            attn_saved_weights_limit, else recomputed per tile from the saved log-sum-exp;
//   passes:  one pass per (batch, key/value head) when B·Hk >= attn_single_pass_min_tasks; for
//            grouped-query heads with fewer, one pass per (batch, query head) when B·H reaches
//            that count and the heads' separate dK and dV sums, B·H·Tk·(Dh + Dv + 1) values, fit
//            in attn_saved_weights_limit (they are added over the group in head order after);
//            else two passes (dQ by query tile, then dK and dV by key tile: more parallel tasks,
//            but P and dS made twice).
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
// The single-pass backward has B·Hk (or B·H) parallel tasks; below this count it would idle
// threads.
inline constexpr index_t attn_single_pass_min_tasks = 4;

namespace detail {

// One tile of backward's work: rows [i0, i0 + br) of query head (b, h) against keys
// [j0, j0 + bc) of batch entry b.
struct BackwardTile {
  index_t b, h, i0, br, j0, bc;
};

// What pass 2 leaves of one tile for pass 3: the weights P (p, rows ldp apart: the kept ones or
// the scratch's), the weights dV is made with (pv: P, or P ∘ M / (1 − p) when dropping) and the
// live blocks; dS itself is in the scratch's dp, rows attn_key_tile apart.
template <class T>
struct TileWeights {
  const T *p = nullptr, *pv = nullptr;
  index_t ldp = 0, ldpv = 0;
  TileBlocks blocks;
};

// Where one task sums a tile's products (null: not needed): dK, dV and the column sums of dS for
// the tile's keys, dQ for its queries. kv_add / q_add false: nothing is there yet, so the product
// is written instead of added.
template <class T>
struct TileSums {
  T *dk = nullptr, *dv = nullptr, *colsum = nullptr, *dq = nullptr;
  bool kv_add = false, q_add = false;
};

// The fused backward as named passes, over the operands of one call:
//   pass 1  row_terms     D_i = Σ_d dO_id O_id, once per query row;
//   pass 2  tile_weights  one tile's P (recomputed from the log-sum-exp, or the kept one) and
//                         dS = P ∘ (dO Vᵀ − D), with dropout's mask where it is active;
//   pass 3  accumulate    dV += Pᵀ dO, dK += dSᵀ Q, dQ += dS K into a task's own sums;
//   pass 4  write_kv, write_q  the sums, scaled by alpha (and dK's 2 beta_k colsum ∘ k), into the
//                         gradients.
// The walks choose which tiles one task sees: by_key_head (one task per (b, key/value head),
// every tile of its query heads once, P and dS made once per tile), by_query_head (the same with
// one task per (b, query head), its dK and dV apart, then added over the group in head order), or
// by_query_tile then by_key_tile (dQ, then dK and dV: P and dS made twice). A task owns the
// gradient rows it writes, so no two tasks write the same row and every sum runs in a fixed
// order. by_key_head and the two-pass walks add the same products in the same order (equal bits);
// by_query_head adds each head's sum instead.
template <class T, ScorePolicy Score, MaskPolicy Mask>
class FusedBackward {
 public:
  struct Operands {
    const T *q, *k, *v, *o, *dout, *lse, *kept;  // kept: the saved weights, or null
    const T* dlse;                               // the log-sum-exp's gradient, or null
    T *dq, *dk, *dv, *D;                         // null gradients are not needed; D [B·H·Tq]
    // A learned bias (or null) and where its gradient goes (null: not needed): the position
    // biases' per-task sums [B, H, Q, slots] (Q = 1 for the single-pass walk, the query tiles
    // for the two-pass one), a dense bias's dS [B, H, Tq, Tk].
    const BiasTables<T>* bias = nullptr;
    double* bias_sums = nullptr;
    T* dense_grad = nullptr;
  };

  FusedBackward(const AttentionGeometry& g, const Score& score, const Mask& mask,
                const AttentionDropout& dropout, const Operands& x)
      : g_(g),
        x_(x),
        dropout_(dropout),
        drop_(dropout.mask()),
        alpha_(static_cast<T>(score.alpha(g.Dh))),
        ldk_(packet_round<T>(g.Dh)),
        ldv_(packet_round<T>(g.Dv)),
        layout_(attention_layout<T>()),
        scores_(x.kept ? ScoreTiles<T, Score, Mask>{score, mask, g, x.q, {}, nullptr, alpha_}
                       : make_score_tiles(score, mask, g, x.q, x.k, layout_, x.bias)),
        vt_(pack_key_panels(x.v, g, g.Dv, layout_.vt)),
        K_(x.dq ? padded_rows(x.k, g.B * g.Hk * g.key_rows(), g.Dh, layout_.kpad)
                : RowsView<T>{x.k, g.Dh}),
        Q_(x.dk ? padded_rows(x.q, g.B * g.H * g.Tq, g.Dh, layout_.qpad) : RowsView<T>{x.q, g.Dh}),
        dO_(x.dv ? padded_rows(x.dout, g.B * g.H * g.Tq, g.Dv, layout_.dopad)
                 : RowsView<T>{x.dout, g.Dv}) {}

  // Pass 1: D = rowsum(dO ∘ O) − dlse (d lse_i / d s_ij = P_ij, so a gradient of the
  // log-sum-exp joins dS = P ∘ (dP − D) through D).
  void row_terms() const {
    parallel_for(g_.B * g_.H * g_.Tq, double(g_.Dv) * 2, [&](index_t r) {
      T s = 0;
      for (index_t d = 0; d < g_.Dv; ++d) s += x_.dout[r * g_.Dv + d] * x_.o[r * g_.Dv + d];
      x_.D[r] = x_.dlse ? s - x_.dlse[r] : s;
    });
  }

  // The walk of the single-pass backward: one task per (b, key/value head).
  void by_key_head() const {
    const index_t qtiles = block_count(g_.Tq, attn_query_tile), ktiles = key_tiles();
    parallel_for(
        g_.B * g_.Hk, tile_cost() * double(qtiles * ktiles * g_.group()), [&](index_t task) {
          const index_t hk = task % g_.Hk, b = task / g_.Hk;
          AttentionScratch<T>& sc = scratch();
          T* dk = x_.dk ? sized(sc.dk, g_.Tk * ldk_) : nullptr;
          T* dv = x_.dv ? sized(sc.dv, g_.Tk * ldv_) : nullptr;
          T* colsum = zeroed(sc.colsum, g_.Tk);
          sc.started.assign(static_cast<std::size_t>(ktiles), 0);
          for (index_t h = hk * g_.group(); h < (hk + 1) * g_.group(); ++h)
            head_tiles(sc, b, h, {dk, dv, colsum, nullptr}, sc.started.data());
          for (index_t j0 = 0; j0 < g_.Tk; j0 += attn_key_tile)
            if (sc.started[tile_index(j0)])
              write_kv(b, hk, j0, std::min(attn_key_tile, g_.Tk - j0),
                       dk ? dk + j0 * ldk_ : nullptr, dv ? dv + j0 * ldv_ : nullptr, colsum + j0);
        });
  }

  // The single-pass walk for grouped-query heads when B·Hk is below the task count: one task per
  // (b, query head), every tile of it once, its dK, dV and dS column sums kept apart per head;
  // then one task per (b, key/value head, key tile) adds them over the group in head order.
  void by_query_head() const {
    const index_t qtiles = block_count(g_.Tq, attn_query_tile), ktiles = key_tiles();
    const index_t heads = g_.B * g_.H;
    // Per (b, h): dK [Tk, ldk], dV [Tk, ldv], the column sums [Tk] and which key tiles it reached.
    const index_t per_head = g_.Tk * ((x_.dk ? ldk_ : 0) + (x_.dv ? ldv_ : 0) + 1);
    // Kept between calls (no fresh pages to fault in each step); every value is written before
    // it is read: the column sums zeroed per head, dK and dV by their first tile.
    std::vector<T>& sums = layout_.head_sums;
    if (sums.size() < static_cast<std::size_t>(heads * per_head))
      sums.resize(static_cast<std::size_t>(heads * per_head));
    std::vector<unsigned char> started(static_cast<std::size_t>(heads * ktiles), 0);
    auto head_sums = [&](index_t bh) {
      T* base = sums.data() + bh * per_head;
      T* dk = x_.dk ? base : nullptr;
      T* dv = x_.dv ? base + (x_.dk ? g_.Tk * ldk_ : 0) : nullptr;
      return TileSums<T>{dk, dv, base + per_head - g_.Tk, nullptr};
    };
    parallel_for(heads, tile_cost() * double(qtiles * ktiles), [&](index_t bh) {
      const index_t h = bh % g_.H, b = bh / g_.H;
      AttentionScratch<T>& sc = scratch();
      const TileSums<T> mine = head_sums(bh);
      std::fill_n(mine.colsum, g_.Tk, T{0});
      head_tiles(sc, b, h, mine, started.data() + bh * ktiles);
    });
    if (!x_.dk && !x_.dv) return;
    parallel_for(g_.B * g_.Hk * ktiles, double(g_.group()) * double(attn_key_tile) * 64.0,
                 [&](index_t task) {
                   const index_t kt = task % ktiles, bhk = task / ktiles, hk = bhk % g_.Hk,
                                 b = bhk / g_.Hk, j0 = kt * attn_key_tile;
                   for (index_t h = hk * g_.group(); h < (hk + 1) * g_.group(); ++h) {
                     const index_t bh = b * g_.H + h;
                     if (!started[static_cast<std::size_t>(bh * ktiles + kt)]) continue;
                     const TileSums<T> s = head_sums(bh);
                     write_kv(b, hk, j0, std::min(attn_key_tile, g_.Tk - j0),
                              s.dk ? s.dk + j0 * ldk_ : nullptr, s.dv ? s.dv + j0 * ldv_ : nullptr,
                              s.colsum + j0);
                   }
                 });
  }

  // The first walk of the two-pass backward: dQ (and a learned bias's gradient), one task per
  // query tile.
  void by_query_tile() const {
    if (!x_.dq && !bias_gradient_needed()) return;
    const index_t qtiles = block_count(g_.Tq, attn_query_tile);
    parallel_for(g_.B * g_.H * qtiles, tile_cost() * double(key_tiles()), [&](index_t task) {
      const index_t qt = task % qtiles, bh = task / qtiles, h = bh % g_.H, b = bh / g_.H;
      const index_t i0 = qt * attn_query_tile, br = std::min(attn_query_tile, g_.Tq - i0);
      AttentionScratch<T>& sc = scratch();
      T* dq = x_.dq ? sized(sc.dq, br * ldk_) : nullptr;
      bool q_started = false;
      TileWeights<T> w;
      for (index_t j0 = 0; j0 < g_.Tk; j0 += attn_key_tile) {
        const BackwardTile t{b, h, i0, br, j0, std::min(attn_key_tile, g_.Tk - j0)};
        if (!tile_weights(sc, t, w)) continue;
        bias_gradient(sc, t, qt, qtiles);
        if (!dq) continue;
        accumulate(sc, t, w, {nullptr, nullptr, nullptr, dq, false, q_started});
        q_started = true;
      }
      if (q_started) write_q(b, h, i0, br, dq);
    });
  }

  // The second walk of the two-pass backward: dK and dV, one task per key tile.
  void by_key_tile() const {
    if (!x_.dk && !x_.dv) return;
    const index_t ktiles = key_tiles();
    parallel_for(
        g_.B * g_.Hk * ktiles,
        tile_cost() * double(block_count(g_.Tq, attn_query_tile) * g_.group()), [&](index_t task) {
          const index_t kt = task % ktiles, bh = task / ktiles, hk = bh % g_.Hk, b = bh / g_.Hk;
          const index_t j0 = kt * attn_key_tile, bc = std::min(attn_key_tile, g_.Tk - j0);
          AttentionScratch<T>& sc = scratch();
          T* dk = x_.dk ? sized(sc.dk, bc * ldk_) : nullptr;
          T* dv = x_.dv ? sized(sc.dv, bc * ldv_) : nullptr;
          T* colsum = zeroed(sc.colsum, bc);
          bool kv_started = false;
          TileWeights<T> w;
          for (index_t h = hk * g_.group(); h < (hk + 1) * g_.group(); ++h)
            for (index_t i0 = 0; i0 < g_.Tq; i0 += attn_query_tile) {
              const BackwardTile t{b, h, i0, std::min(attn_query_tile, g_.Tq - i0), j0, bc};
              if (!tile_weights(sc, t, w)) continue;
              accumulate(sc, t, w, {dk, dv, colsum, nullptr, kv_started, false});
              kv_started = true;
            }
          if (kv_started) write_kv(b, hk, j0, bc, dk, dv, colsum);
        });
  }

 private:
  static constexpr index_t lds = attn_key_tile;

  // The single-pass walks' work on query head (b, h): every tile once, query tile by query tile;
  // dQ written per query tile, dK, dV and the column sums added into `sums` (rows of all Tk keys;
  // sums.dq unused), `started` [key tiles] marking the key tiles that hold something.
  void head_tiles(AttentionScratch<T>& sc, index_t b, index_t h, const TileSums<T>& sums,
                  unsigned char* started) const {
    TileWeights<T> w;
    for (index_t i0 = 0; i0 < g_.Tq; i0 += attn_query_tile) {
      const index_t br = std::min(attn_query_tile, g_.Tq - i0);
      T* dq = x_.dq ? sized(sc.dq, br * ldk_) : nullptr;
      bool q_started = false;
      for (index_t j0 = 0; j0 < g_.Tk; j0 += attn_key_tile) {
        const BackwardTile t{b, h, i0, br, j0, std::min(attn_key_tile, g_.Tk - j0)};
        if (!tile_weights(sc, t, w)) continue;
        bias_gradient(sc, t, 0, 1);
        unsigned char& kv_started = started[tile_index(j0)];
        accumulate(
            sc, t, w,
            {sums.dk ? sums.dk + j0 * ldk_ : nullptr, sums.dv ? sums.dv + j0 * ldv_ : nullptr,
             sums.colsum + j0, dq, kv_started != 0, q_started});
        kv_started = 1;
        q_started = true;
      }
      if (q_started) write_q(b, h, i0, br, dq);
    }
  }

  index_t key_tiles() const { return block_count(g_.Tk, attn_key_tile); }
  static std::size_t tile_index(index_t j0) { return static_cast<std::size_t>(j0 / attn_key_tile); }
  double tile_cost() const {
    return 8.0 * double(attn_query_tile) * double(attn_key_tile) * double(g_.Dh + g_.Dv);
  }

  // This thread's scratch, sized for one tile.
  static AttentionScratch<T>& scratch() {
    AttentionScratch<T>& sc = attention_scratch<T>();
    sc.s.resize(static_cast<std::size_t>(attn_query_tile * lds));
    sc.dp.resize(static_cast<std::size_t>(attn_query_tile * lds));
    sc.pm.resize(static_cast<std::size_t>(attn_query_tile * lds));
    sc.rmax.resize(static_cast<std::size_t>(attn_query_tile));
    return sc;
  }

  // Pass 2: P into w and dS into sc.dp for tile t; false if the mask rules the tile out.
  bool tile_weights(AttentionScratch<T>& sc, const BackwardTile& t, TileWeights<T>& w) const {
    constexpr T ninf = -std::numeric_limits<T>::infinity();
    const index_t row0 = g_.row(t.b, t.h, t.i0);
    w.blocks = scores_.blocks(t.b, t.i0, t.br, t.j0, t.bc);
    if (w.blocks.kind == TileKind::none) return false;
    if (x_.kept) {
      w.p = x_.kept + row0 * g_.Tk + t.j0;
      w.ldp = g_.Tk;
    } else {
      scores_(t.b, t.h, t.i0, t.br, t.j0, t.bc, sc.s.data(), lds, sc.rmax.data(), w.blocks);
      for (index_t i = 0; i < t.br; ++i) {
        T* row = sc.s.data() + i * lds;
        if (x_.lse[row0 + i] == ninf)
          std::fill_n(row, t.bc, T{0});
        else
          exp_row_sum(row, t.bc, x_.lse[row0 + i]);
      }
      w.p = sc.s.data();
      w.ldp = lds;
    }
    T* dp = sc.dp.data();  // dP = dO Vᵀ
    live_tile_product(w.blocks, g_.Dv, x_.dout + g_.o_off(t.b, t.h, t.i0), g_.Dv, index_t{1},
                      vt_.panel(g_, t.b, t.h / g_.group(), t.j0), attn_key_tile, dp, lds);
    w.pv = w.p;
    w.ldpv = w.ldp;
    if (dropout_.active()) {  // O = (P ∘ M) V: dV = (P ∘ M)ᵀ dO and dP = M ∘ (dO Vᵀ)
      for (index_t i = 0; i < t.br; ++i)  // dP ∘ M in place, P ∘ M into pm: one mask
        drop_.apply(dp + i * lds, dp + i * lds, w.p + i * w.ldp, sc.pm.data() + i * lds, t.bc,
                    static_cast<std::uint64_t>((row0 + i) * g_.Tk + t.j0));
      w.pv = sc.pm.data();
      w.ldpv = lds;
    }
    for (index_t i = 0; i < t.br; ++i)
      softmax_grad_row(w.p + i * w.ldp, dp + i * lds, t.bc, x_.D[row0 + i]);
    if constexpr (HasSoftCap<Score>) soft_cap_grad(t, w, dp);
    return true;
  }

  // Pass 2, soft-capped scores: dS of the raw score = dS of the capped one ∘ (1 − (s / c)²),
  // s = c tanh(raw / c) the capped score, rebuilt as lse + log P (the kept weights have no
  // scores beside them); where P = 0, dS is 0 already.
  void soft_cap_grad(const BackwardTile& t, const TileWeights<T>& w, T* ds) const {
    const T c = static_cast<T>(scores_.score.cap);
    const index_t row0 = g_.row(t.b, t.h, t.i0);
    for (index_t i = 0; i < t.br; ++i)
      for (index_t j = 0; j < t.bc; ++j) {
        const T p = w.p[i * w.ldp + j];
        if (p > T{0}) {
          const T s = (x_.lse[row0 + i] + std::log(p)) / c;
          ds[i * lds + j] *= T{1} - s * s;
        }
      }
  }

  bool bias_gradient_needed() const { return x_.bias_sums || x_.dense_grad; }

  // Pass 3, a learned bias: tile t's dS (sc.dp) into its gradient, the position biases' sums of
  // task (t.b, t.h, q) of Q per head.
  void bias_gradient(const AttentionScratch<T>& sc, const BackwardTile& t, index_t q,
                     index_t Q) const {
    if (!bias_gradient_needed()) return;
    double* sums =
        x_.bias_sums ? x_.bias_sums + ((t.b * g_.H + t.h) * Q + q) * x_.bias->slots : nullptr;
    x_.bias->gradient(g_, t.b, t.h, t.i0, t.br, t.j0, t.bc, sc.dp.data(), lds, sums, x_.dense_grad);
  }

  // Pass 3: the products of tile t's dS (sc.dp) and P into the sums.
  void accumulate(const AttentionScratch<T>& sc, const BackwardTile& t, const TileWeights<T>& w,
                  const TileSums<T>& sum) const {
    const T* ds = sc.dp.data();
    const index_t row0 = g_.row(t.b, t.h, t.i0);
    if (sum.dv)  // dV_j += Pᵀ dO_i
      live_weights_product(w.blocks, true, g_.Dv, w.pv, index_t{1}, w.ldpv, dO_.row(row0), dO_.ld,
                           sum.dv, ldv_, sum.kv_add);
    if (sum.dk) {  // dK_j += dSᵀ Q_i
      live_weights_product(w.blocks, true, g_.Dh, ds, index_t{1}, lds, Q_.row(row0), Q_.ld, sum.dk,
                           ldk_, sum.kv_add);
      if constexpr (Score::beta_k != 0)
        for (index_t i = 0; i < t.br; ++i)
          for (index_t j = 0; j < t.bc; ++j) sum.colsum[j] += ds[i * lds + j];
    }
    if (sum.dq)  // dQ_i += dS K_j
      live_weights_product(w.blocks, false, g_.Dh, ds, lds, index_t{1},
                           K_.row(g_.k_row(t.b, t.h / g_.group(), t.j0)), K_.ld, sum.dq, ldk_,
                           sum.q_add);
  }

  // Pass 4: dQ rows [i0, i0 + br) of head (b, h) += alpha dq.
  void write_q(index_t b, index_t h, index_t i0, index_t br, const T* dq) const {
    if (x_.dq) add_rows(x_.dq + g_.q_off(b, h, i0), dq, br, g_.Dh, ldk_, alpha_);
  }

  // Pass 4: dK rows [j0, j0 + bc) of head (b, hk) += alpha dk + 2 beta_k colsum ∘ k; dV rows
  // += dv.
  void write_kv(index_t b, index_t hk, index_t j0, index_t bc, const T* dk, const T* dv,
                const T* colsum) const {
    if (x_.dk) {
      T* dst = x_.dk + g_.k_off(b, hk, j0);
      add_rows(dst, dk, bc, g_.Dh, ldk_, alpha_);
      if constexpr (Score::beta_k != 0) {
        const T* kr = x_.k + g_.k_off(b, hk, j0);
        for (index_t j = 0; j < bc; ++j)
          for (index_t c = 0; c < g_.Dh; ++c)
            dst[j * g_.Dh + c] += T(2 * Score::beta_k) * colsum[j] * kr[j * g_.Dh + c];
      }
    }
    if (x_.dv) add_rows(x_.dv + g_.v_off(b, hk, j0), dv, bc, g_.Dv, ldv_, T{1});
  }

  const AttentionGeometry& g_;
  Operands x_;
  const AttentionDropout& dropout_;
  DropoutMask drop_;
  T alpha_;
  index_t ldk_, ldv_;
  AttentionLayout<T>& layout_;
  ScoreTiles<T, Score, Mask> scores_;
  KeyPanels<T> vt_;
  RowsView<T> K_, Q_, dO_;
};

// The walk of FusedBackward a call takes: by key/value head from B·Hk = 4 tasks; with fewer,
// grouped-query heads walk by query head when there are B·H = 4 tasks and their per-head sums of
// dK, dV and the column sums, B·H·Tk·(Dh + Dv + 1) values, fit: within the weights' limit, or at
// any size when Tk <= Tq, where they hold no more values than q, dO and the log-sum-exp the call
// already has (B·H·Tq·(Dh + Dv + 1)), so self-attention of any length; otherwise two passes. A
// plan asking for one pass gets by_query_head where B·Hk is short and those sums fit, by_key_head
// else.
enum class BackwardWalk { by_key_head, by_query_head, two_passes };
inline BackwardWalk backward_walk(const AttentionBackward& plan, const AttentionGeometry& g) {
  using enum BackwardWalk;
  if (plan.passes == BackwardPasses::two) return two_passes;
  const bool enough_kv_tasks = g.B * g.Hk >= attn_single_pass_min_tasks;
  const bool head_sums_fit =
      g.group() > 1 && !enough_kv_tasks &&
      (g.Tk <= g.Tq || g.B * g.H * g.Tk * (g.Dh + g.Dv + 1) <= attn_saved_weights_limit);
  if (plan.passes == BackwardPasses::single) return head_sums_fit ? by_query_head : by_key_head;
  if (enough_kv_tasks) return by_key_head;
  return head_sums_fit && g.B * g.H >= attn_single_pass_min_tasks ? by_query_head : two_passes;
}

template <ScorePolicy Score, MaskPolicy Mask>
struct OnlineSoftmaxOp {
  std::int32_t q, k, v;
  AttentionGeometry g;
  Score score;
  AttentionDropout dropout;
  const Mask* mask;  // owned by self.keep
  bool saved_weights;
  BackwardWalk walk;
  bool partial;            // the log-sum-exp is an output too (partials.hpp)
  std::int32_t bias = -1;  // a learned bias's parameters (learned_bias.hpp), or −1
  LearnedBiasForm bias_form;
  // self.saved[0]: log-sum-exp per query row [B, H, Tq]; self.saved[1]: D = rowsum(dO ∘ O);
  // self.saved[2]: the weights P [B, H, Tq, Tk] when saved_weights; self.saved[3]: the
  // log-sum-exp's gradient, when partial and it was used.

  // With P = exp(S − lse) and D_i = Σ_d dO_id O_id (= Σ_j P_ij dP_ij):
  //   dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP − D),  dQ = alpha dS K,
  //   dK = alpha dSᵀ Q + 2 beta_k colsum(dS) ∘ k  (dS through the soft cap's derivative when
  //   the score has one), and a learned bias's gradient from dS (learned_bias.hpp),
  // (with a gradient of the log-sum-exp, D_i − dlse_i in D_i's place) by the passes of
  // FusedBackward in the walk chosen for the call (backward_walk).
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    self.saved[1].resize(Shape{g.B * g.H * g.Tq});
    auto grad_of = [&](std::int32_t i) {
      return tape.requires_grad(i) ? tape.grad(i).data() : nullptr;
    };
    typename FusedBackward<T, Score, Mask>::Operands x{
        tape.value(q).data(),
        tape.value(k).data(),
        tape.value(v).data(),
        self.value->data(),
        self.grad->data(),
        self.saved[0].data(),
        saved_weights ? self.saved[2].data() : nullptr,
        partial ? take_second_gradient(self, 3) : nullptr,
        grad_of(q),
        grad_of(k),
        grad_of(v),
        self.saved[1].data()};
    // A learned bias: its tables again, and room for its gradient (the per-task sums, or dS).
    BiasTables<T> tables;
    std::vector<double> sums;
    std::vector<T> dense_grad;
    const index_t Q = walk != BackwardWalk::two_passes ? 1 : block_count(g.Tq, attn_query_tile);
    if (bias >= 0) {
      tables = bias_tables(bias_form, tape.value(bias), g, "attention");
      x.bias = &tables;
      if (tape.requires_grad(bias)) {
        if (tables.positional()) {
          sums.assign(static_cast<std::size_t>(g.B * g.H * Q * tables.slots), 0.0);
          x.bias_sums = sums.data();
        } else {
          dense_grad.assign(static_cast<std::size_t>(g.B * g.H * g.Tq * g.Tk), T{0});
          x.dense_grad = dense_grad.data();
        }
      }
    }
    // Key and value rows hidden from every query are zeros here as in the forward
    // (non_finite.hpp), so a NaN in a padded position reaches no gradient.
    const NonFiniteInputs<T> nf = non_finite_inputs(*mask, g, x.q, x.k, x.v, x.bias);
    x.k = nf.k;
    x.v = nf.v;
    const FusedBackward<T, Score, Mask> passes(g, score, *mask, dropout, x);
    passes.row_terms();
    switch (walk) {
      case BackwardWalk::by_key_head:
        passes.by_key_head();
        break;
      case BackwardWalk::by_query_head:
        passes.by_query_head();
        break;
      case BackwardWalk::two_passes:
        passes.by_query_tile();
        passes.by_key_tile();
        break;
    }
    if (x.bias_sums || x.dense_grad)
      add_bias_gradient(tables, g, Q, sums, dense_grad.data(), tape.grad(bias).data());
    if constexpr (Score::beta_q != 0)  // the log-sum-exp's beta_q ‖q‖²
      if (x.dlse && x.dq)
        for (index_t r = 0; r < g.B * g.H * g.Tq; ++r)
          if (x.lse[r] != -std::numeric_limits<T>::infinity())
            for (index_t c = 0; c < g.Dh; ++c)
              x.dq[r * g.Dh + c] += T(2 * Score::beta_q) * x.dlse[r] * x.q[r * g.Dh + c];
  }
};

// The backward choices for one call, resolved by shape (see AttentionBackward).
inline bool save_weights_for_backward(const AttentionBackward& plan, const AttentionGeometry& g) {
  if (plan.weights != BackwardWeights::automatic) return plan.weights == BackwardWeights::saved;
  return g.B * g.H * g.Tq * g.Tk <= attn_saved_weights_limit;
}

}  // namespace detail

}  // namespace attn
