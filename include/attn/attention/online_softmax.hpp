// attn/attention/online_softmax.hpp: softmax attention computed tile by tile with a running
// max and sum (Milakov & Gimelshein 2018; FlashAttention, Dao et al. 2022), so the Tq x Tk
// weight matrix is never stored. Backward recomputes each tile's weights from the saved
// log-sum-exp. Whole tiles that the mask rules out are skipped (causal: about half).
// Does not support score kernels other than exp; see materialized.hpp for those.
//
// Shapes: q [B, H, Tq, Dh], k [B, Hk, Tk, Dh], v [B, Hk, Tk, Dv] -> o [B, H, Tq, Dv], where
// Hk divides H (query head h reads key/value head h / (H / Hk): multi- or grouped-query).
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>

#include "../autodiff/autodiff.hpp"
#include "mask.hpp"
#include "score.hpp"

namespace attn {

namespace detail {

// Tile sizes; fixed, so results do not depend on the thread count.
inline constexpr index_t attn_query_tile = 64;
inline constexpr index_t attn_key_tile = 64;

struct AttentionGeometry {
  index_t B = 0, H = 0, Hk = 0, Tq = 0, Tk = 0, Dh = 0, Dv = 0;
  index_t group() const { return H / Hk; }
  index_t q_off(index_t b, index_t h, index_t i) const { return ((b * H + h) * Tq + i) * Dh; }
  index_t o_off(index_t b, index_t h, index_t i) const { return ((b * H + h) * Tq + i) * Dv; }
  index_t k_off(index_t b, index_t hk, index_t j) const { return ((b * Hk + hk) * Tk + j) * Dh; }
  index_t v_off(index_t b, index_t hk, index_t j) const { return ((b * Hk + hk) * Tk + j) * Dv; }
  index_t row(index_t b, index_t h, index_t i) const { return (b * H + h) * Tq + i; }
};

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
  // Multiplies a tile of weights, rows [i0, ...) and columns [j0, ...) of head row base `row0`,
  // by the kept mask / (1 − p).
  template <class M>
  void apply(M& tile, index_t row0, index_t tk, index_t j0) const {
    using T = typename M::Scalar;
    const T keep = p < 1.0 ? static_cast<T>(1.0 / (1.0 - p)) : T{0};
    for (index_t i = 0; i < tile.rows(); ++i)
      for (index_t j = 0; j < tile.cols(); ++j) {
        const auto pos = static_cast<std::uint64_t>((row0 + i) * tk + j0 + j);
        tile(i, j) = hash_uniform(seed, pos) >= p ? tile(i, j) * keep : T{0};
      }
  }
};

namespace detail {
template <class T>
using Col = Eigen::Matrix<T, Eigen::Dynamic, 1>;

inline AttentionGeometry attention_geometry(const Shape& q, const Shape& k, const Shape& v,
                                            const char* op) {
  ATTN_CHECK(q.rank() == 4 && k.rank() == 4 && v.rank() == 4, shape_error, op,
             ": q, k, v must be [B, H, T, D], got ", q, ", ", k, ", ", v);
  AttentionGeometry g{q[0], q[1], k[1], q[2], k[2], q[3], v[3]};
  ATTN_CHECK(k[0] == g.B && v[0] == g.B, shape_error, op, ": batch sizes differ: ", q, ", ", k,
             ", ", v);
  ATTN_CHECK(v[1] == g.Hk && v[2] == g.Tk, shape_error, op, ": k ", k, " and v ", v,
             " differ in heads or length");
  ATTN_CHECK(k[3] == g.Dh, shape_error, op, ": q ", q, " and k ", k, " differ in head width");
  ATTN_CHECK(g.Hk > 0 && g.H % g.Hk == 0, shape_error, op, ": ", g.Hk,
             " key/value heads do not divide ", g.H, " query heads");
  return g;
}

// The checks every attention entry point makes: q, k, v are current Vars of one tape, and their
// shapes fit together (see attention_geometry).
template <class T>
AttentionGeometry checked_geometry(const Var<T>& q, const Var<T>& k, const Var<T>& v,
                                   const char* op) {
  Tape<T>& tape = q.tape();
  tape.check(q, op);
  tape.check(k, op);
  tape.check(v, op);
  return attention_geometry(q.shape(), k.shape(), v.shape(), op);
}

// S = alpha Q Kᵀ + beta_k ‖k‖² for one tile, with masked entries set to −∞. (beta_q ‖q‖² is
// the same for every key of a row and cancels in softmax, so it is left out here and in the
// saved log-sum-exp alike.) Returns false when the mask rules out the whole tile.
template <class T, ScorePolicy Score, MaskPolicy Mask>
bool score_tile(const Score& score, const Mask& mask, const AttentionGeometry& g, const T* q,
                const T* k, index_t b, index_t h, index_t i0, index_t br, index_t j0, index_t bc,
                Mat<T>& s) {
  const TileKind kind = mask.tile(b, i0, i0 + br, j0, j0 + bc, g.Tq, g.Tk);
  if (kind == TileKind::none) return false;
  const index_t hk = h / g.group();
  Eigen::Map<const Mat<T>> Q(q + g.q_off(b, h, i0), br, g.Dh);
  Eigen::Map<const Mat<T>> K(k + g.k_off(b, hk, j0), bc, g.Dh);
  s.resize(br, bc);
  s.noalias() = Q * K.transpose();
  s *= static_cast<T>(score.alpha(g.Dh));
  if constexpr (Score::beta_k != 0) {
    const Col<T> kn = K.rowwise().squaredNorm();
    s.rowwise() += static_cast<T>(Score::beta_k) * kn.transpose();
  }
  if (kind == TileKind::partial) {
    constexpr T ninf = -std::numeric_limits<T>::infinity();
    for (index_t i = 0; i < br; ++i)
      for (index_t j = 0; j < bc; ++j)
        if (!mask.allowed(b, i0 + i, j0 + j, g.Tq, g.Tk)) s(i, j) = ninf;
  }
  return true;
}

// row ← exp(row − shift), with −∞ (masked) entries exactly 0. (Eigen's vectorised exp returns a
// tiny denormal, not 0, for −∞; a fully masked row would otherwise average its values.)
template <class Row, class T>
void masked_exp(Row&& row, T shift) {
  constexpr T ninf = -std::numeric_limits<T>::infinity();
  row = (row.array() == ninf).select(T{0}, (row.array() - shift).exp());
}

// Replaces each score by exp(s − lse_row) (the attention weight); −∞ scores give 0.
template <class T>
void weights_from_lse(Mat<T>& s, const T* lse) {
  for (index_t i = 0; i < s.rows(); ++i) {
    const T l = lse[i];
    if (l == -std::numeric_limits<T>::infinity())
      s.row(i).setZero();
    else
      masked_exp(s.row(i), l);
  }
}

template <class T>
struct AttentionScratch {
  Mat<T> s, p, pm, dp, acc, dq, dk, dv;
  Col<T> m, l, corr;
};

template <class T>
AttentionScratch<T>& attention_scratch() {
  thread_local AttentionScratch<T> scratch;  // grows once per thread, then reused
  return scratch;
}

// Forward: o and the per-row log-sum-exp (−∞ for a row with no allowed key).
template <class T, ScorePolicy Score, MaskPolicy Mask>
void online_softmax_forward(const Score& score, const Mask& mask, const AttentionDropout& dropout,
                            const AttentionGeometry& g, const T* q, const T* k, const T* v, T* o,
                            T* lse) {
  const index_t qtiles = block_count(g.Tq, attn_query_tile);
  const double cost = 4.0 * double(attn_query_tile) * double(g.Tk) * double(g.Dh + g.Dv);
  parallel_for(g.B * g.H * qtiles, cost, [&](index_t task) {
    const index_t qt = task % qtiles, bh = task / qtiles, h = bh % g.H, b = bh / g.H,
                  hk = h / g.group();
    const index_t i0 = qt * attn_query_tile, br = std::min(attn_query_tile, g.Tq - i0);
    AttentionScratch<T>& sc = attention_scratch<T>();
    constexpr T ninf = -std::numeric_limits<T>::infinity();
    sc.m.setConstant(br, ninf);
    sc.l.setZero(br);
    sc.acc.setZero(br, g.Dv);
    for (index_t j0 = 0; j0 < g.Tk; j0 += attn_key_tile) {
      const index_t bc = std::min(attn_key_tile, g.Tk - j0);
      if (!score_tile(score, mask, g, q, k, b, h, i0, br, j0, bc, sc.s)) continue;
      // Online softmax: m' = max(m, rowmax S); rescale the old sum and accumulator by e^{m − m'}.
      sc.corr.resize(br);
      for (index_t i = 0; i < br; ++i) {
        const T m_new = std::max(sc.m(i), sc.s.row(i).maxCoeff());
        const T m_safe = m_new == ninf ? T{0} : m_new;  // a row with nothing allowed yet stays at 0
        sc.corr(i) = std::exp(sc.m(i) - m_safe);
        masked_exp(sc.s.row(i), m_safe);
        sc.l(i) = sc.l(i) * sc.corr(i) + sc.s.row(i).sum();
        sc.m(i) = m_new;
      }
      Eigen::Map<const Mat<T>> V(v + g.v_off(b, hk, j0), bc, g.Dv);
      sc.acc.array().colwise() *= sc.corr.array();
      if (dropout.active())
        dropout.apply(sc.s, g.row(b, h, i0), g.Tk, j0);  // after l: the sum is of undropped weights
      sc.acc.noalias() += sc.s * V;
    }
    Eigen::Map<Mat<T>> O(o + g.o_off(b, h, i0), br, g.Dv);
    for (index_t i = 0; i < br; ++i) {
      if (sc.l(i) == T{0}) {  // no allowed key: output 0, and backward skips the row
        O.row(i).setZero();
        lse[g.row(b, h, i0 + i)] = ninf;
      } else {
        O.row(i) = sc.acc.row(i) / sc.l(i);
        lse[g.row(b, h, i0 + i)] = sc.m(i) + std::log(sc.l(i));
      }
    }
  });
}

// Writes the full weight matrix [B, H, Tq, Tk] (for analysis and demos; O(T²) memory).
template <class T, ScorePolicy Score, MaskPolicy Mask>
void online_softmax_weights(const Score& score, const Mask& mask, const AttentionGeometry& g,
                            const T* q, const T* k, const T* lse, T* w) {
  const index_t qtiles = block_count(g.Tq, attn_query_tile);
  parallel_for(g.B * g.H * qtiles, 2.0 * double(attn_query_tile) * double(g.Tk) * double(g.Dh),
               [&](index_t task) {
                 const index_t qt = task % qtiles, bh = task / qtiles, h = bh % g.H, b = bh / g.H;
                 const index_t i0 = qt * attn_query_tile, br = std::min(attn_query_tile, g.Tq - i0);
                 AttentionScratch<T>& sc = attention_scratch<T>();
                 for (index_t j0 = 0; j0 < g.Tk; j0 += attn_key_tile) {
                   const index_t bc = std::min(attn_key_tile, g.Tk - j0);
                   Eigen::Map<Mat<T>, Eigen::Unaligned, Eigen::OuterStride<>> W(
                       w + g.row(b, h, i0) * g.Tk + j0, br, bc, Eigen::OuterStride<>(g.Tk));
                   if (!score_tile(score, mask, g, q, k, b, h, i0, br, j0, bc, sc.s)) {
                     W.setZero();
                     continue;
                   }
                   weights_from_lse(sc.s, lse + g.row(b, h, i0));
                   W = sc.s;
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
  // self.saved[0]: log-sum-exp per query row [B, H, Tq]; self.saved[1]: D = rowsum(dO ∘ O).

  // With P = exp(S − lse) and D_i = Σ_d dO_id O_id (= Σ_j P_ij dP_ij):
  //   dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP − D),  dQ = alpha dS K,
  //   dK = alpha dSᵀ Q + 2 beta_k colsum(dS) ∘ k.
  // Two passes, each writing disjoint rows: dQ by query tile, then dK and dV by key tile.
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    const T* qv = tape.value(q).data();
    const T* kv = tape.value(k).data();
    const T* vv = tape.value(v).data();
    const T* ov = self.value->data();
    const T* dov = self.grad->data();
    const T* lse = self.saved[0].data();
    self.saved[1].resize(Shape{g.B * g.H * g.Tq});
    T* D = self.saved[1].data();
    parallel_for(g.B * g.H * g.Tq, double(g.Dv) * 2, [&](index_t r) {
      T s = 0;
      for (index_t d = 0; d < g.Dv; ++d) s += dov[r * g.Dv + d] * ov[r * g.Dv + d];
      D[r] = s;
    });
    const T alpha = static_cast<T>(score.alpha(g.Dh));
    const double tile_cost =
        8.0 * double(attn_query_tile) * double(attn_key_tile) * double(g.Dh + g.Dv);
    // dS for one tile into sc.s (P first, then P ∘ (dO Vᵀ − D)); false if the tile is masked out.
    auto ds_tile = [&](AttentionScratch<T>& sc, index_t b, index_t h, index_t i0, index_t br,
                       index_t j0, index_t bc) {
      if (!score_tile(score, *mask, g, qv, kv, b, h, i0, br, j0, bc, sc.s)) return false;
      weights_from_lse(sc.s, lse + g.row(b, h, i0));
      sc.p = sc.s;
      Eigen::Map<const Mat<T>> dO(dov + g.o_off(b, h, i0), br, g.Dv);
      Eigen::Map<const Mat<T>> V(vv + g.v_off(b, h / g.group(), j0), bc, g.Dv);
      sc.dp.resize(br, bc);
      sc.dp.noalias() = dO * V.transpose();
      if (dropout.active()) {  // O = (P ∘ M) V: dV = (P ∘ M)ᵀ dO and dP = M ∘ (dO Vᵀ)
        dropout.apply(sc.dp, g.row(b, h, i0), g.Tk, j0);
        sc.pm = sc.p;
        dropout.apply(sc.pm, g.row(b, h, i0), g.Tk, j0);
      }
      Eigen::Map<const Col<T>> Dr(D + g.row(b, h, i0), br);
      sc.s = (sc.p.array() * (sc.dp.array().colwise() - Dr.array())).matrix();
      return true;
    };
    const index_t qtiles = block_count(g.Tq, attn_query_tile),
                  ktiles = block_count(g.Tk, attn_key_tile);
    if (tape.requires_grad(q)) {
      T* dq = tape.grad(q).data();
      parallel_for(g.B * g.H * qtiles, tile_cost * double(ktiles), [&](index_t task) {
        const index_t qt = task % qtiles, bh = task / qtiles, h = bh % g.H, b = bh / g.H;
        const index_t i0 = qt * attn_query_tile, br = std::min(attn_query_tile, g.Tq - i0);
        AttentionScratch<T>& sc = attention_scratch<T>();
        sc.dq.setZero(br, g.Dh);
        for (index_t j0 = 0; j0 < g.Tk; j0 += attn_key_tile) {
          const index_t bc = std::min(attn_key_tile, g.Tk - j0);
          if (!ds_tile(sc, b, h, i0, br, j0, bc)) continue;
          Eigen::Map<const Mat<T>> K(kv + g.k_off(b, h / g.group(), j0), bc, g.Dh);
          sc.dq.noalias() += sc.s * K;
        }
        Eigen::Map<Mat<T>> dQ(dq + g.q_off(b, h, i0), br, g.Dh);
        dQ += alpha * sc.dq;
      });
    }
    const bool need_k = tape.requires_grad(k), need_v = tape.requires_grad(v);
    if (!need_k && !need_v) return;
    T* dk = need_k ? tape.grad(k).data() : nullptr;
    T* dv = need_v ? tape.grad(v).data() : nullptr;
    parallel_for(g.B * g.Hk * ktiles, tile_cost * double(qtiles * g.group()), [&](index_t task) {
      const index_t kt = task % ktiles, bh = task / ktiles, hk = bh % g.Hk, b = bh / g.Hk;
      const index_t j0 = kt * attn_key_tile, bc = std::min(attn_key_tile, g.Tk - j0);
      AttentionScratch<T>& sc = attention_scratch<T>();
      sc.dk.setZero(bc, g.Dh);
      sc.dv.setZero(bc, g.Dv);
      Col<T> colsum = Col<T>::Zero(bc);
      for (index_t h = hk * g.group(); h < (hk + 1) * g.group(); ++h)
        for (index_t i0 = 0; i0 < g.Tq; i0 += attn_query_tile) {
          const index_t br = std::min(attn_query_tile, g.Tq - i0);
          if (!ds_tile(sc, b, h, i0, br, j0, bc)) continue;
          Eigen::Map<const Mat<T>> dO(dov + g.o_off(b, h, i0), br, g.Dv);
          Eigen::Map<const Mat<T>> Q(qv + g.q_off(b, h, i0), br, g.Dh);
          sc.dv.noalias() += (dropout.active() ? sc.pm : sc.p).transpose() * dO;
          sc.dk.noalias() += sc.s.transpose() * Q;
          if constexpr (Score::beta_k != 0) colsum += sc.s.colwise().sum().transpose();
        }
      if (dk) {
        Eigen::Map<Mat<T>> dK(dk + g.k_off(b, hk, j0), bc, g.Dh);
        dK += alpha * sc.dk;
        if constexpr (Score::beta_k != 0) {
          Eigen::Map<const Mat<T>> K(kv + g.k_off(b, hk, j0), bc, g.Dh);
          dK += (T(2 * Score::beta_k) * colsum).asDiagonal() * K;
        }
      }
      if (dv) Eigen::Map<Mat<T>>(dv + g.v_off(b, hk, j0), bc, g.Dv) += sc.dv;
    });
  }
};

}  // namespace detail

// Softmax attention o_i = Σ_j softmax_j(s(q_i, k_j) | mask) v_j by the online-softmax algorithm.
// When `weights` is given it receives the [B, H, Tq, Tk] weights before dropout (not
// differentiable); `dropout` drops weights (training).
template <ScorePolicy Score, MaskPolicy Mask, class T>
Var<T> online_softmax_attention(const Var<T>& q, const Var<T>& k, const Var<T>& v,
                                const Score& score, const Mask& mask, Tensor<T>* weights = nullptr,
                                const AttentionDropout& dropout = {}) {
  Tape<T>& tape = q.tape();
  const detail::AttentionGeometry g = detail::checked_geometry(q, k, v, "attention");
  mask.validate(g.B, g.Tq, g.Tk);
  auto [o, node] = tape.push(Shape{g.B, g.H, g.Tq, g.Dv}, "attention",
                             q.requires_grad() || k.requires_grad() || v.requires_grad());
  node.saved.resize(2);
  node.saved[0].resize(Shape{g.B * g.H * g.Tq});
  detail::online_softmax_forward(score, mask, dropout, g, q.value().data(), k.value().data(),
                                 v.value().data(), node.value->data(), node.saved[0].data());
  if (weights) {
    weights->resize(Shape{g.B, g.H, g.Tq, g.Tk});
    detail::online_softmax_weights(score, mask, g, q.value().data(), k.value().data(),
                                   node.saved[0].data(), weights->data());
  }
  if (node.requires_grad) {
    const Mask* stored = node.template keep_value<Mask>(mask);
    tape.set_backward(node, detail::OnlineSoftmaxOp<Score, Mask>{q.index(), k.index(), v.index(), g,
                                                                 score, dropout, stored});
  }
  return o;
}

}  // namespace attn
