// attn/attention/fused_backward.hpp: the fused kernel's backward pass and how it is planned.
// Backward recomputes each tile's weights from the saved log-sum-exp (or reads the kept ones) and
// makes dV = Pᵀ dO, dS = P ∘ (dO Vᵀ − D), dQ and dK from them, in one pass per (batch, key/value
// head) or two passes (dQ by query tile, then dK and dV by key tile), chosen by shape only, so
// that the sums run in an order that does not depend on the thread count.
// Does not run the forward (fused_forward.hpp) nor choose the score's form (online_softmax.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "../autodiff/autodiff.hpp"
#include "../core/parallel.hpp"
#include "kernel_common.hpp"
#include "score_tiles.hpp"
#include "tile_layout.hpp"

namespace attn {

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

}  // namespace detail

}  // namespace attn
