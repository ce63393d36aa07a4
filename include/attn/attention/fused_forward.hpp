// attn/attention/fused_forward.hpp: the fused kernel's forward pass: the online softmax over key
// tiles (Milakov & Gimelshein 2018; FlashAttention, Dao et al. 2022), giving o and each row's
// log-sum-exp, and the weights kept for backward when they are small; and the whole weight
// matrix from the saved log-sum-exp, for analysis.
// Does not record on a tape (online_softmax.hpp does) nor run backward (fused_backward.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "../core/parallel.hpp"
#include "kernel_common.hpp"
#include "non_finite.hpp"
#include "online_softmax_merge.hpp"
#include "score_tiles.hpp"
#include "tile_layout.hpp"

namespace attn {

namespace detail {

// Forward: o and the per-row log-sum-exp (−∞ for a row with no allowed key), by the online
// softmax over key tiles (Milakov & Gimelshein): m' = max(m, rowmax S), the old sum and
// accumulator rescaled by e^{m − m'}, by the merge the CUDA block programs share
// (online_softmax_merge.hpp). With `keep` ([B, H, Tq, Tk]) it also leaves the weights P
// there for backward: each tile's e^{S − m} is copied out as it is made, and once the row is
// done multiplied by e^{m − m_final} / l. o and lse are computed the same way either way, so
// the output does not depend on whether gradients are recorded. NaN and infinity follow
// non_finite.hpp's rule: a row with a NaN or +∞ among its allowed scores is NaN (output, lse and
// kept weights), and for a head whose values are not all finite the masked entries of a partial
// tile are left out of P V one by one instead of multiplied by 0.
template <class T, ScorePolicy Score, MaskPolicy Mask>
void online_softmax_forward(const Score& score, const Mask& mask, const AttentionDropout& dropout,
                            const AttentionGeometry& g, const T* q, const T* k, const T* v, T* o,
                            T* lse, T* keep, const BiasTables<T>* learned = nullptr) {
  AttentionLayout<T>& layout = attention_layout<T>();
  const NonFiniteInputs<T> nf = non_finite_inputs(mask, g, q, k, v, learned);
  const ScoreTiles<T, Score, Mask> scores =
      make_score_tiles(score, mask, g, q, nf.k, layout, learned, nf.careful);
  const RowsView<T> V = padded_rows(nf.v, g.B * g.Hk * g.key_rows(), g.Dv, layout.vpad);
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
    sc.bad.assign(static_cast<std::size_t>(br), 0);
    const bool values_bad = nf.values_not_finite(b, hk, g);
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
        if (nf.careful && poisoned(sc.rmax[static_cast<std::size_t>(i)])) sc.bad[i] = 1;
        if (sc.bad[i]) continue;  // NaN at the end; its P V row is not used
        // The tile's part of the row, exponentiated relative to the new running max m' (so the
        // tile's weights need no rescaling), merged into the row's state so far.
        const T m_new = std::max(m[i], sc.rmax[static_cast<std::size_t>(i)]);
        const T m_safe = m_new == ninf ? T{0} : m_new;  // nothing allowed yet: the row stays 0
        const SoftmaxPartial<T> tile{m_new, exp_row_sum(s + i * lds, bc, m_safe)};
        const SoftmaxMerged<T> row = merge(SoftmaxPartial<T>{m[i], l[i]}, tile);
        l[i] = row.state.sum;
        if (row.scale_a != T{1}) scale_row(acc + i * ldv, g.Dv, row.scale_a);
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
      if (values_bad && tb.kind == TileKind::partial) {  // masked keys left out, not times 0
        for (index_t i = 0; i < br; ++i)
          for (index_t j = 0; j < bc; ++j)
            if (mask.allowed(b, i0 + i, j0 + j, g.Tq, g.Tk))
              for (index_t c = 0; c < g.Dv; ++c)
                acc[i * ldv + c] += s[i * lds + j] * vrows[(j0 + j) * V.ld + c];
      } else {
        live_weights_product(tb, false, g.Dv, s, lds, index_t{1}, vrows + j0 * V.ld, V.ld, acc, ldv,
                             true);
      }
    }
    T* out = o + g.o_off(b, h, i0);
    for (index_t i = 0; i < br; ++i) {
      T* orow = out + i * g.Dv;
      if (sc.bad[i]) {  // a NaN or +∞ among its allowed scores
        constexpr T nan = std::numeric_limits<T>::quiet_NaN();
        std::fill_n(orow, g.Dv, nan);
        lse[row0 + i] = nan;
        if (keep) std::fill_n(p + i * g.Tk, g.Tk, nan);
        continue;
      }
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
                            const T* q, const T* k, const T* lse, T* w,
                            const BiasTables<T>* learned = nullptr) {
  const NonFiniteInputs<T> nf =
      non_finite_inputs(mask, g, q, k, static_cast<const T*>(nullptr), learned);
  const ScoreTiles<T, Score, Mask> scores =
      make_score_tiles(score, mask, g, q, nf.k, attention_layout<T>(), learned, nf.careful);
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
                     if (std::isnan(lse[row0 + i])) {  // a poisoned row (non_finite.hpp)
                       std::fill_n(out, bc, std::numeric_limits<T>::quiet_NaN());
                       continue;
                     }
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

}  // namespace detail

}  // namespace attn
