// attn/attention/flash_block.hpp: the block programs of the fused (FlashAttention-style)
// softmax attention kernels: what one thread block does for one query tile (forward, dQ) or one
// key tile (dK, dV), written once as ATTN_HOST_DEVICE templates over a Block (thread index,
// thread count, barrier). The CUDA kernels (attn/cuda/flash_attention.cuh) run them with
// threadIdx and __syncthreads; flash_host.hpp runs the very same code on the CPU, one block at a
// time, so the tile loop is tested against the reference without a GPU.
// Does not launch anything, allocate, or check shapes (the entry points do); softmax kernel only
// (κ = e^s), masks that are DeviceMaskPolicy, no dropout.
//
// Forward, for the query tile Q_I (rows I) of head (b, h), over key tiles J (Milakov &
// Gimelshein 2018; Dao et al. 2022):
//     S = alpha Q_I K_Jᵀ + beta_k ‖k_j‖²  (masked: −∞)        [Br, Bc]
//     tile state (m_J, l_J), P = e^{S − m_J}; merge with the running state (online_softmax_merge):
//     acc ← e^{m − m'} acc + e^{m_J − m'} P V_J,               [Br, Dv]
// then O_I = acc / l and lse_I = m + log l. The T×T matrix never exists; tiles that the mask
// rules out entirely are skipped (causal: about half of them).
// Backward, with P = e^{S − lse} rebuilt per tile and D_i = Σ_d dO_id O_id (= Σ_j P_ij dP_ij):
//     dP = dO Vᵀ,  dS = P ∘ (dP − D),  dQ = alpha dS K,
//     dV = Pᵀ dO,  dK = alpha dSᵀ Q + 2 beta_k colsum(dS) ∘ k,
// in two programs that write disjoint outputs (no atomics, deterministic): dQ by query tile, then
// dK and dV by key tile (looping over the query heads that share the key head).
// The beta_q ‖q‖² term of a score is the same for every key of a row and cancels in softmax (and
// its gradient, 2 beta_q q Σ_j dS_ij, is 0), so it is left out, as in score_tiles.hpp.
// Sinks (attention_sink in partials.hpp): head h's logit σ_h joins every row's denominator and
// brings no value. The forward merges the state (σ_h − beta_q ‖q_i‖², 1) into each row after the
// last tile (the shift keeps the comparison with the scores that lack the ‖q‖² term), so out and
// lse are those of the sunk softmax and the backward's P, D and dS above stay as they are. The
// sink's weight p_i = e^{σ_h − beta_q ‖q_i‖² − lse_i} adds dσ_h = −Σ_i p_i D_i (the dQ program
// writes each row's term, the caller sums them per head in a fixed order) and, for a score with a
// ‖q‖² term, dq_i += 2 beta_q q_i p_i D_i (then Σ_j dS_ij = p_i D_i is no longer 0).
#pragma once

#include <cmath>
#include <concepts>
#include <type_traits>

#include "../core/bf16.hpp"
#include "../core/host_device.hpp"
#include "../core/shape.hpp"
#include "geometry.hpp"
#include "mask.hpp"
#include "online_softmax_merge.hpp"
#include "score.hpp"

namespace attn {

// A mask the CUDA kernels can take: per-element and per-tile answers callable on the device, and
// trivially copyable so it travels by value as a kernel argument (see mask.hpp).
template <class M>
concept DeviceMaskPolicy = MaskPolicy<M> && std::is_trivially_copyable_v<M> && requires {
  requires M::host_device;
};

// Element types of q, k, v, o and their gradients in the CUDA kernels; arithmetic is in float.
template <class T>
concept FlashElement = std::same_as<T, float> || std::same_as<T, bf16>;

// The arithmetic of the block programs: float for float and bf16 elements (as on the GPU), and
// double for double elements, which only the host emulation takes (finite-difference tests).
template <class T>
using flash_accumulator = std::conditional_t<std::is_same_v<T, double>, double, float>;

namespace flash {

// Tile sizes and threads per block, the same on the GPU and in the host emulation.
inline constexpr int query_tile = 64;  // Br: query rows per block (forward, dQ)
inline constexpr int key_tile = 32;    // Bc: keys per block (dK, dV) and per inner step
inline constexpr int block_threads = 128;
inline constexpr int micro = 4;  // each thread computes micro x micro outputs of a tile product

ATTN_HOST_DEVICE inline index_t ceil_div(index_t n, index_t d) {
  return (n + d - 1) / d;
}
ATTN_HOST_DEVICE inline int min_int(index_t a, index_t b) {
  return static_cast<int>(a < b ? a : b);
}

// The call's sizes and offsets (geometry.hpp, the same struct as the CPU paths'), with the tile
// counts of these programs.
struct Geometry : detail::AttentionGeometry {
  ATTN_HOST_DEVICE index_t query_tiles() const { return ceil_div(Tq, query_tile); }
  ATTN_HOST_DEVICE index_t key_tiles() const { return ceil_div(Tk, key_tile); }
  // Blocks of each program: one per (b, h, query tile), and one per (b, hk, key tile).
  ATTN_HOST_DEVICE index_t forward_blocks() const { return B * H * query_tiles(); }
  ATTN_HOST_DEVICE index_t key_blocks() const { return B * Hk * key_tiles(); }
};

template <class T, class Mask>
struct ForwardArgs {
  const T* q = nullptr;                 // [B, H, Tq, Dh]
  const T* k = nullptr;                 // [B, Hk, Tk, Dh]
  const T* v = nullptr;                 // [B, Hk, Tk, Dv]
  T* o = nullptr;                       // [B, H, Tq, Dv]
  flash_accumulator<T>* lse = nullptr;  // [B, H, Tq]: log Σ_j e^{s_ij} (−∞: no allowed key)
  Geometry g;
  flash_accumulator<T> alpha = 1;  // the score's alpha(Dh)
  Mask mask;
  flash_accumulator<T> soft_cap = 0;  // the score's cap (score::SoftCap), unused for the others
  const flash_accumulator<T>* sinks = nullptr;  // [H]: each head's sink logit σ_h, or no sinks
};

template <class T, class Mask>
struct BackwardArgs {
  const T *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  const T* dout = nullptr;                        // [B, H, Tq, Dv]
  const flash_accumulator<T>* lse = nullptr;      // from the forward
  flash_accumulator<T>* delta = nullptr;          // [B, H, Tq]: D_i, written by dQ, read by dK/dV
  T *dq = nullptr, *dk = nullptr, *dv = nullptr;  // overwritten
  Geometry g;
  flash_accumulator<T> alpha = 1;
  Mask mask;
  flash_accumulator<T> soft_cap = 0;            // as ForwardArgs
  const flash_accumulator<T>* sinks = nullptr;  // as ForwardArgs (the forward's sinks)
  flash_accumulator<T>* sink_terms = nullptr;   // [B, H, Tq] with sinks: −p_i D_i, written by dQ
};

// C(m, n) = Σ_{k<K} A(m, k) B(k, n) for m < M, n < N, over tiles in shared memory addressed by
// strides: A(m, k) = a[m·a_m + k·a_k], B(k, n) = b[k·b_k + n·b_n]. emit(m, n, c) receives each
// result exactly once. Each thread takes micro x micro outputs, rows m0 + r·Mg and columns
// n0 + s·Ng (Mg = ⌈M/micro⌉), so the threads of a warp read neighbouring rows, which padded
// strides put in different banks, and every loaded value is used micro times.
template <class Block, class Acc, class Emit>
ATTN_HOST_DEVICE void tile_product(const Block& blk, int M, int N, int K, const Acc* a, int a_m,
                                   int a_k, const Acc* b, int b_k, int b_n, Emit&& emit) {
  const int Mg = (M + micro - 1) / micro, Ng = (N + micro - 1) / micro;
  for (int item = blk.thread(); item < Mg * Ng; item += blk.size()) {
    const int m0 = item / Ng, n0 = item % Ng;
    int ra[micro], cb[micro];  // offsets of the rows of A and the columns of B (clamped in range)
    for (int r = 0; r < micro; ++r) {
      const int m = m0 + r * Mg, n = n0 + r * Ng;
      ra[r] = (m < M ? m : M - 1) * a_m;
      cb[r] = (n < N ? n : N - 1) * b_n;
    }
    Acc c[micro][micro] = {};
    for (int k = 0; k < K; ++k) {
      Acc av[micro], bv[micro];
      for (int r = 0; r < micro; ++r) av[r] = a[ra[r] + k * a_k];
      for (int s = 0; s < micro; ++s) bv[s] = b[k * b_k + cb[s]];
      for (int r = 0; r < micro; ++r)
        for (int s = 0; s < micro; ++s) c[r][s] += av[r] * bv[s];
    }
    for (int r = 0; r < micro; ++r)
      for (int s = 0; s < micro; ++s) {
        const int m = m0 + r * Mg, n = n0 + s * Ng;
        if (m < M && n < N) emit(m, n, c[r][s]);
      }
  }
}

// dst[r·ld + c] = src[r·D + c] for the first `rows` rows of a [rows_max, D] tile, 0 in the rows
// past `rows` (past the end of the sequence), so no garbage meets a multiplication by 0.
template <class Block, class Acc, class T>
ATTN_HOST_DEVICE void load_tile(const Block& blk, Acc* dst, int ld, const T* src, int rows,
                                int rows_max, int D) {
  for (int e = blk.thread(); e < rows_max * D; e += blk.size()) {
    const int r = e / D, c = e % D;
    dst[r * ld + c] = r < rows ? element_cast<Acc>(src[static_cast<index_t>(e)]) : Acc(0);
  }
}

// Shared-memory layouts, as offsets in accumulator elements; strides of D-wide tiles are D + 1 and
// of score tiles Bc + 1 (odd, so rows read together by a warp fall in different banks).
struct Layout {
  int ldq, ldv, lds;
  int total = 0;
  ATTN_HOST_DEVICE explicit Layout(const Geometry& g)
      : ldq(static_cast<int>(g.Dh) + 1), ldv(static_cast<int>(g.Dv) + 1), lds(key_tile + 1) {}
  ATTN_HOST_DEVICE int take(int n) {
    const int at = total;
    total += n;
    return at;
  }
};

struct ForwardLayout : Layout {
  int q, k, v, s, acc, row_max, row_sum, scale_a, scale_b, key_norms;
  ATTN_HOST_DEVICE explicit ForwardLayout(const Geometry& g) : Layout(g) {
    q = take(query_tile * ldq);
    k = take(key_tile * ldq);
    v = take(key_tile * ldv);
    s = take(query_tile * lds);
    acc = take(query_tile * static_cast<int>(g.Dv));
    row_max = take(query_tile);
    row_sum = take(query_tile);
    scale_a = take(query_tile);
    scale_b = take(query_tile);
    key_norms = take(key_tile);
  }
};

struct BackwardLayout : Layout {
  int q, dout, k, v, s, dp, acc_q, acc_k, acc_v, lse, delta, key_norms, colsum, sink_term;
  ATTN_HOST_DEVICE explicit BackwardLayout(const Geometry& g) : Layout(g) {
    q = take(query_tile * ldq);
    dout = take(query_tile * ldv);
    k = take(key_tile * ldq);
    v = take(key_tile * ldv);
    s = take(query_tile * lds);
    dp = take(query_tile * lds);
    // The dQ program accumulates [Br, Dh], the dK/dV program [Bc, Dh] and [Bc, Dv]: one region.
    const int dh = static_cast<int>(g.Dh), dv = static_cast<int>(g.Dv);
    acc_q = acc_k =
        take(query_tile * dh > key_tile * (dh + dv) ? query_tile * dh : key_tile * (dh + dv));
    acc_v = acc_k + key_tile * dh;
    lse = take(query_tile);
    delta = take(query_tile);
    key_norms = take(key_tile);
    colsum = take(key_tile);
    sink_term = take(query_tile);
  }
};

// Shared memory (accumulator elements) each program needs for head widths Dh, Dv.
ATTN_HOST_DEVICE inline int forward_smem_size(const Geometry& g) {
  return ForwardLayout(g).total;
}
ATTN_HOST_DEVICE inline int backward_smem_size(const Geometry& g) {
  return BackwardLayout(g).total;
}

// ‖k_j‖² of the loaded key tile, when the score needs it (NegSqEuclidean).
template <ScorePolicy Score, class Block, class Acc>
ATTN_HOST_DEVICE void load_key_norms(const Block& blk, const Acc* k, int ld, int D,
                                     Acc* key_norms) {
  if constexpr (Score::beta_k != 0) {
    for (int j = blk.thread(); j < key_tile; j += blk.size())
      key_norms[j] = squared_norm<Acc>(k + j * ld, D);
    blk.sync();
  }
}

// cap · tanh(x / cap) for a soft-capped score (score::SoftCap), x for the others.
template <ScorePolicy Score, class Acc>
ATTN_HOST_DEVICE Acc capped(Acc x, Acc cap) {
  if constexpr (HasSoftCap<Score>)
    return cap * std::tanh(x / cap);
  else
    return x;
}

// A sink's logit against the scores of a row whose ‖q‖² term is left out: σ − beta_q ‖q_i‖².
template <ScorePolicy Score, class Acc>
ATTN_HOST_DEVICE Acc sink_logit(Acc sigma, const Acc* q_row, int D) {
  if constexpr (Score::beta_q != 0)
    return sigma - static_cast<Acc>(Score::beta_q) * squared_norm<Acc>(q_row, D);
  else
    return sigma;
}

// S = alpha Q Kᵀ + beta_k ‖k‖² (through the soft cap of a capped score) for a [Br, Bc] tile at
// (i0, j0), −∞ where the key is not allowed, past the end of either sequence (rows >= br,
// columns >= bc), or everywhere in a skipped tile.
template <ScorePolicy Score, class Mask, class Block, class Acc>
ATTN_HOST_DEVICE void score_tile(const Block& blk, const Geometry& g, const Mask& mask, Acc alpha,
                                 Acc cap, TileKind kind, index_t b, index_t i0, int br, index_t j0,
                                 int bc, const Acc* q, const Acc* k, int ld, const Acc* key_norms,
                                 Acc* s, int lds) {
  static_assert(!HasPositionBias<Score>,
                "attn: the CUDA block programs add no position bias yet (score::Alibi runs on the "
                "CPU paths)");
  const int D = static_cast<int>(g.Dh);
  tile_product(blk, query_tile, key_tile, D, q, ld, 1, k, 1, ld, [&](int i, int j, Acc qk) {
    const bool ok =
        i < br && j < bc && (kind == TileKind::all || mask.allowed(b, i0 + i, j0 + j, g.Tq, g.Tk));
    const Acc norm = Score::beta_k != 0 ? key_norms[j] : Acc(0);
    // qq = 0: the beta_q term cancels (see the top of this file).
    s[i * lds + j] = ok ? capped<Score>(score_from_parts<Score>(alpha, qk, Acc(0), norm), cap)
                        : negative_infinity<Acc>();
  });
}

// The query tile a forward or dQ block owns: block = (b·H + h)·query_tiles + qt.
struct QueryTile {
  index_t b, h, hk, i0;
  int rows;  // br: the rows inside the sequence (fewer than query_tile in the last tile)
};
ATTN_HOST_DEVICE inline QueryTile query_tile_of(const Geometry& g, index_t block) {
  const index_t qt = block % g.query_tiles(), bh = block / g.query_tiles(), h = bh % g.H;
  return {bh / g.H, h, h / g.group(), qt * query_tile, min_int(query_tile, g.Tq - qt * query_tile)};
}

// Loads key tile j0 (bc keys) of key head (b, hk) into k and v (strides ldk, ldv), then, after a
// barrier, ‖k_j‖² into key_norms when the score needs it.
template <ScorePolicy Score, class Block, class Acc, class T>
ATTN_HOST_DEVICE void load_keys(const Block& blk, const Geometry& g, const T* k_src, const T* v_src,
                                index_t b, index_t hk, index_t j0, int bc, Acc* k, int ldk, Acc* v,
                                int ldv, Acc* key_norms) {
  load_tile(blk, k, ldk, k_src + g.k_off(b, hk, j0), bc, key_tile, static_cast<int>(g.Dh));
  load_tile(blk, v, ldv, v_src + g.v_off(b, hk, j0), bc, key_tile, static_cast<int>(g.Dv));
  blk.sync();
  load_key_norms<Score>(blk, k, ldk, static_cast<int>(g.Dh), key_norms);
}

// One block of the forward: query tile `block % query_tiles` of head `block / query_tiles`.
template <ScorePolicy Score, class T, DeviceMaskPolicy Mask, class Block, class Acc>
ATTN_HOST_DEVICE void forward_block(const Block& blk, Acc* smem, const ForwardArgs<T, Mask>& a,
                                    index_t block) {
  static_assert(std::is_same_v<Acc, flash_accumulator<T>>,
                "attn: a block program's shared memory holds flash_accumulator<T>");
  const Geometry& g = a.g;
  const ForwardLayout L(g);
  const int Dh = static_cast<int>(g.Dh), Dv = static_cast<int>(g.Dv);
  const QueryTile t = query_tile_of(g, block);
  const index_t b = t.b, h = t.h, i0 = t.i0;
  const int br = t.rows;
  Acc *q = smem + L.q, *k = smem + L.k, *v = smem + L.v, *s = smem + L.s, *acc = smem + L.acc;
  Acc *row_max = smem + L.row_max, *row_sum = smem + L.row_sum;
  Acc *scale_a = smem + L.scale_a, *scale_b = smem + L.scale_b, *key_norms = smem + L.key_norms;

  load_tile(blk, q, L.ldq, a.q + g.q_off(b, h, i0), br, query_tile, Dh);
  for (int e = blk.thread(); e < query_tile * Dv; e += blk.size()) acc[e] = 0;
  for (int i = blk.thread(); i < query_tile; i += blk.size()) {
    row_max[i] = negative_infinity<Acc>();
    row_sum[i] = 0;
  }
  blk.sync();
  for (index_t j0 = 0; j0 < g.Tk; j0 += key_tile) {
    const int bc = min_int(key_tile, g.Tk - j0);
    // The same answer in every thread, so the whole block skips together.
    const TileKind kind = a.mask.tile(b, i0, i0 + br, j0, j0 + bc, g.Tq, g.Tk);
    if (kind == TileKind::none) continue;
    load_keys<Score>(blk, g, a.k, a.v, b, t.hk, j0, bc, k, L.ldq, v, L.ldv, key_norms);
    score_tile<Score>(blk, g, a.mask, a.alpha, a.soft_cap, kind, b, i0, br, j0, bc, q, k, L.ldq,
                      key_norms, s, L.lds);
    blk.sync();
    // Per row: the tile's state (P = e^{S − m_J} written over S) merged into the running one.
    for (int i = blk.thread(); i < query_tile; i += blk.size()) {
      const SoftmaxPartial<Acc> tile = softmax_partial(s + i * L.lds, key_tile, s + i * L.lds);
      const SoftmaxMerged<Acc> m = merge(SoftmaxPartial<Acc>{row_max[i], row_sum[i]}, tile);
      row_max[i] = m.state.max;
      row_sum[i] = m.state.sum;
      scale_a[i] = m.scale_a;
      scale_b[i] = m.scale_b;
    }
    blk.sync();
    // acc ← e^{m − m'} acc + e^{m_J − m'} P V
    tile_product(blk, query_tile, Dv, key_tile, s, L.lds, 1, v, L.ldv, 1,
                 [&](int i, int d, Acc pv) {
                   Acc& o = acc[i * Dv + d];
                   o = scale_a[i] * o + scale_b[i] * pv;
                 });
    blk.sync();  // k, v, s and the scales are overwritten by the next tile
  }
  if (a.sinks != nullptr) {  // the sink's part: no value, state (σ_h − beta_q ‖q_i‖², 1)
    for (int i = blk.thread(); i < query_tile; i += blk.size()) {
      const SoftmaxMerged<Acc> m =
          merge(SoftmaxPartial<Acc>{row_max[i], row_sum[i]},
                SoftmaxPartial<Acc>{sink_logit<Score>(a.sinks[h], q + i * L.ldq, Dh), Acc(1)});
      row_max[i] = m.state.max;
      row_sum[i] = m.state.sum;
      scale_a[i] = m.scale_a;
    }
    blk.sync();
  }
  for (int e = blk.thread(); e < br * Dv; e += blk.size()) {
    const int i = e / Dv;
    // A row with no allowed key (and no sink) has l = 0 and gets o = 0 (never 0/0).
    const Acc x = a.sinks != nullptr ? scale_a[i] * acc[e] : acc[e];
    const Acc o = row_sum[i] == Acc(0) ? Acc(0) : x / row_sum[i];
    a.o[g.o_off(b, h, i0) + e] = element_cast<T>(o);
  }
  for (int i = blk.thread(); i < br; i += blk.size())
    a.lse[g.row(b, h, i0 + i)] = log_sum_exp(SoftmaxPartial<Acc>{row_max[i], row_sum[i]});
}

// dS = P ∘ (dP − D) for one [Br, Bc] tile: S (with −∞) in s, dP in dp; leaves P in s and dS in
// dp. P = e^{S − lse} is the forward's weight, rebuilt from the saved log-sum-exp. For a capped
// score dS is of the score before the cap: times 1 − (s / cap)², s the capped score.
template <ScorePolicy Score, class Mask, class Block, class Acc>
ATTN_HOST_DEVICE void gradient_tile(const Block& blk, const Geometry& g, const Mask& mask,
                                    Acc alpha, Acc cap, TileKind kind, index_t b, index_t i0,
                                    int br, index_t j0, int bc, const BackwardLayout& L,
                                    Acc* smem) {
  Acc *q = smem + L.q, *dout = smem + L.dout, *k = smem + L.k, *v = smem + L.v;
  Acc *s = smem + L.s, *dp = smem + L.dp, *lse = smem + L.lse, *delta = smem + L.delta;
  score_tile<Score>(blk, g, mask, alpha, cap, kind, b, i0, br, j0, bc, q, k, L.ldq,
                    smem + L.key_norms, s, L.lds);
  // dP = dO Vᵀ
  tile_product(blk, query_tile, key_tile, static_cast<int>(g.Dv), dout, L.ldv, 1, v, 1, L.ldv,
               [&](int i, int j, Acc x) { dp[i * L.lds + j] = x; });
  blk.sync();
  for (int e = blk.thread(); e < query_tile * key_tile; e += blk.size()) {
    const int i = e / key_tile, at = i * L.lds + e % key_tile;
    const Acc score = s[at], p = softmax_weight(score, lse[i]);
    s[at] = p;
    Acc ds = p * (dp[at] - delta[i]);
    if constexpr (HasSoftCap<Score>)
      if (p > Acc(0)) ds *= Acc(1) - (score / cap) * (score / cap);
    dp[at] = ds;
  }
  blk.sync();
}

// One block of dQ (and D): query tile `block % query_tiles` of head `block / query_tiles`.
template <ScorePolicy Score, class T, DeviceMaskPolicy Mask, class Block, class Acc>
ATTN_HOST_DEVICE void backward_dq_block(const Block& blk, Acc* smem, const BackwardArgs<T, Mask>& a,
                                        index_t block) {
  static_assert(std::is_same_v<Acc, flash_accumulator<T>>,
                "attn: a block program's shared memory holds flash_accumulator<T>");
  const Geometry& g = a.g;
  const BackwardLayout L(g);
  const int Dh = static_cast<int>(g.Dh), Dv = static_cast<int>(g.Dv);
  const QueryTile t = query_tile_of(g, block);
  const index_t b = t.b, h = t.h, i0 = t.i0;
  const int br = t.rows;
  Acc *dout = smem + L.dout, *acc = smem + L.acc_q, *lse = smem + L.lse, *delta = smem + L.delta;
  Acc* sink_term = smem + L.sink_term;

  load_tile(blk, smem + L.q, L.ldq, a.q + g.q_off(b, h, i0), br, query_tile, Dh);
  load_tile(blk, dout, L.ldv, a.dout + g.o_off(b, h, i0), br, query_tile, Dv);
  for (int e = blk.thread(); e < query_tile * Dh; e += blk.size()) acc[e] = 0;
  blk.sync();
  for (int i = blk.thread(); i < query_tile; i += blk.size()) {
    // D_i = Σ_d dO_id O_id; rows past the end get lse = −∞ (all their scores are −∞ too).
    Acc d = 0;
    if (i < br) {
      const T* o = a.o + g.o_off(b, h, i0 + i);
      for (int c = 0; c < Dv; ++c) d += dout[i * L.ldv + c] * element_cast<Acc>(o[c]);
      a.delta[g.row(b, h, i0 + i)] = d;
    }
    delta[i] = d;
    lse[i] = i < br ? a.lse[g.row(b, h, i0 + i)] : negative_infinity<Acc>();
    if (a.sinks != nullptr) {  // −p_i D_i, the row's share of dσ_h
      const Acc t =
          i < br
              ? -softmax_weight(sink_logit<Score>(a.sinks[h], smem + L.q + i * L.ldq, Dh), lse[i]) *
                    d
              : Acc(0);
      sink_term[i] = t;
      if (i < br) a.sink_terms[g.row(b, h, i0 + i)] = t;
    }
  }
  for (index_t j0 = 0; j0 < g.Tk; j0 += key_tile) {
    const int bc = min_int(key_tile, g.Tk - j0);
    const TileKind kind = a.mask.tile(b, i0, i0 + br, j0, j0 + bc, g.Tq, g.Tk);
    if (kind == TileKind::none) continue;
    load_keys<Score>(blk, g, a.k, a.v, b, t.hk, j0, bc, smem + L.k, L.ldq, smem + L.v, L.ldv,
                     smem + L.key_norms);
    gradient_tile<Score>(blk, g, a.mask, a.alpha, a.soft_cap, kind, b, i0, br, j0, bc, L, smem);
    // dQ += dS K   (alpha is applied once at the end)
    tile_product(blk, query_tile, Dh, key_tile, smem + L.dp, L.lds, 1, smem + L.k, L.ldq, 1,
                 [&](int i, int d, Acc x) { acc[i * Dh + d] += x; });
    blk.sync();
  }
  blk.sync();  // the D/lse loop and the last dQ update are read below by other threads
  for (int e = blk.thread(); e < br * Dh; e += blk.size()) {
    Acc x = a.alpha * acc[e];
    if constexpr (Score::beta_q != 0)  // with a sink, Σ_j dS_ij = p_i D_i = −sink_term_i
      if (a.sinks != nullptr)
        x -= Acc(2) * static_cast<Acc>(Score::beta_q) * sink_term[e / Dh] *
             smem[L.q + (e / Dh) * L.ldq + e % Dh];
    a.dq[g.q_off(b, h, i0) + e] = element_cast<T>(x);
  }
}

// One block of dK and dV: key tile `block % key_tiles` of key head `block / key_tiles`, summing
// over every query tile of every query head that reads it. Needs D from backward_dq_block.
template <ScorePolicy Score, class T, DeviceMaskPolicy Mask, class Block, class Acc>
ATTN_HOST_DEVICE void backward_dkv_block(const Block& blk, Acc* smem,
                                         const BackwardArgs<T, Mask>& a, index_t block) {
  static_assert(std::is_same_v<Acc, flash_accumulator<T>>,
                "attn: a block program's shared memory holds flash_accumulator<T>");
  const Geometry& g = a.g;
  const BackwardLayout L(g);
  const int Dh = static_cast<int>(g.Dh), Dv = static_cast<int>(g.Dv);
  const index_t kt = block % g.key_tiles(), bhk = block / g.key_tiles();
  const index_t hk = bhk % g.Hk, b = bhk / g.Hk;
  const index_t j0 = kt * key_tile;
  const int bc = min_int(key_tile, g.Tk - j0);
  Acc *k = smem + L.k, *acc_k = smem + L.acc_k, *acc_v = smem + L.acc_v;
  Acc *lse = smem + L.lse, *delta = smem + L.delta, *colsum = smem + L.colsum;

  for (int e = blk.thread(); e < key_tile * Dh; e += blk.size()) acc_k[e] = 0;
  for (int e = blk.thread(); e < key_tile * Dv; e += blk.size()) acc_v[e] = 0;
  for (int j = blk.thread(); j < key_tile; j += blk.size()) colsum[j] = 0;
  load_keys<Score>(blk, g, a.k, a.v, b, hk, j0, bc, k, L.ldq, smem + L.v, L.ldv,
                   smem + L.key_norms);
  for (index_t h = hk * g.group(); h < (hk + 1) * g.group(); ++h)
    for (index_t i0 = 0; i0 < g.Tq; i0 += query_tile) {
      const int br = min_int(query_tile, g.Tq - i0);
      const TileKind kind = a.mask.tile(b, i0, i0 + br, j0, j0 + bc, g.Tq, g.Tk);
      if (kind == TileKind::none) continue;
      load_tile(blk, smem + L.q, L.ldq, a.q + g.q_off(b, h, i0), br, query_tile, Dh);
      load_tile(blk, smem + L.dout, L.ldv, a.dout + g.o_off(b, h, i0), br, query_tile, Dv);
      for (int i = blk.thread(); i < query_tile; i += blk.size()) {
        lse[i] = i < br ? a.lse[g.row(b, h, i0 + i)] : negative_infinity<Acc>();
        delta[i] = i < br ? a.delta[g.row(b, h, i0 + i)] : Acc(0);
      }
      blk.sync();
      gradient_tile<Score>(blk, g, a.mask, a.alpha, a.soft_cap, kind, b, i0, br, j0, bc, L, smem);
      // dV += Pᵀ dO and dK += dSᵀ Q (alpha once at the end); A(m = j, k = i) reads a column.
      tile_product(blk, key_tile, Dv, query_tile, smem + L.s, 1, L.lds, smem + L.dout, L.ldv, 1,
                   [&](int j, int d, Acc x) { acc_v[j * Dv + d] += x; });
      tile_product(blk, key_tile, Dh, query_tile, smem + L.dp, 1, L.lds, smem + L.q, L.ldq, 1,
                   [&](int j, int d, Acc x) { acc_k[j * Dh + d] += x; });
      if constexpr (Score::beta_k != 0)
        for (int j = blk.thread(); j < key_tile; j += blk.size())
          for (int i = 0; i < query_tile; ++i) colsum[j] += smem[L.dp + i * L.lds + j];
      blk.sync();
    }
  // dK = alpha dSᵀQ + 2 beta_k colsum(dS) ∘ k  (∂‖k_j‖²/∂k_j = 2 k_j)
  for (int e = blk.thread(); e < bc * Dh; e += blk.size()) {
    const int j = e / Dh;
    Acc x = a.alpha * acc_k[e];
    if constexpr (Score::beta_k != 0)
      x += Acc(2) * static_cast<Acc>(Score::beta_k) * colsum[j] * k[j * L.ldq + e % Dh];
    a.dk[g.k_off(b, hk, j0) + e] = element_cast<T>(x);
  }
  for (int e = blk.thread(); e < bc * Dv; e += blk.size())
    a.dv[g.v_off(b, hk, j0) + e] = element_cast<T>(acc_v[e]);
}

}  // namespace flash
}  // namespace attn
