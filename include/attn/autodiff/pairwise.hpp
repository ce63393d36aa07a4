// attn/autodiff/pairwise.hpp: the additive (Bahdanau / MLP) attention score of every query-key
// pair, s_ij = Σ_d w_d tanh(a_id + c_jd), as one op with a hand-written backward.
// Does not store the [B, H, Tq, Tk, Da] tanh values: backward recomputes them, so memory is the
// output's O(B·H·Tq·Tk) while time is O(B·H·Tq·Tk·Da) tanh evaluations in each direction.
#pragma once

#include <Eigen/Core>
#include <cmath>

#include "masked_softmax.hpp"

namespace attn {

namespace detail {

template <class T>
using PairArray = Eigen::Array<T, Eigen::Dynamic, 1>;
template <class T>
using PairMap = Eigen::Map<PairArray<T>>;
template <class T>
using PairConstMap = Eigen::Map<const PairArray<T>>;

// One row of tanh values per thread, reused across calls (backward allocates nothing).
template <class T>
PairArray<T>& pairwise_scratch() {
  thread_local PairArray<T> scratch;
  return scratch;
}

struct PairwiseGeometry {
  index_t B = 0, H = 0, Hk = 0, Tq = 0, Tk = 0,
          Da = 0;  // query head h pairs with key head h / (H / Hk)
};

template <class Allowed>
struct AdditiveScoresOp {
  std::int32_t a, c, w;
  PairwiseGeometry g;
  const Allowed* allowed;  // kept alive by the node (Node::keep_value)

  // s_ij = Σ_d w_d t_ijd with t_ijd = tanh(a_id + c_jd), for allowed pairs (others are 0):
  //   dw_d += Σ_ij ds_ij t_ijd,
  //   da_id += Σ_j ds_ij w_d (1 − t_ijd²),   dc_jd += Σ_i ds_ij w_d (1 − t_ijd²).
  // One task per (b, key head) owns dc[b, hk] and da[b, h] of the query heads h that share it;
  // each (b, h) adds its share of dw to a partial sum that is added over b in order afterwards,
  // so the result does not depend on the thread count.
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    const T* av = tape.value(a).data();
    const T* cv = tape.value(c).data();
    const T* wv = tape.value(w).data();
    const T* gs = self.grad->data();
    T* da = tape.requires_grad(a) ? tape.grad(a).data() : nullptr;
    T* dc = tape.requires_grad(c) ? tape.grad(c).data() : nullptr;
    const bool need_w = tape.requires_grad(w);
    // dw's partial sums live in the node's saved buffer, reused by the next step (no allocation).
    if (need_w) {
      self.saved.resize(1);
      self.saved[0].resize(Shape{g.B * g.H, g.Da});
      self.saved[0].zero();
    }
    T* partial = need_w ? self.saved[0].data() : nullptr;
    const index_t group = g.H / g.Hk;
    const double cost = 12.0 * double(group) * double(g.Tq) * double(g.Tk) * double(g.Da);
    parallel_for(g.B * g.Hk, cost, [&](index_t key_task) {
      const index_t b = key_task / g.Hk, hk = key_task % g.Hk;
      const T* C = cv + key_task * g.Tk * g.Da;  // [Tk, Da]
      for (index_t h = hk * group; h < (hk + 1) * group; ++h) {
        const index_t task = b * g.H + h;
        const T* A = av + task * g.Tq * g.Da;  // [Tq, Da]
        const PairConstMap<T> W(wv + h * g.Da, g.Da);
        const T* G = gs + task * g.Tq * g.Tk;  // [Tq, Tk]
        PairArray<T>& t = pairwise_scratch<T>();
        for (index_t i = 0; i < g.Tq; ++i)
          for (index_t j = 0; j < g.Tk; ++j) {
            const T gij = G[i * g.Tk + j];
            if (gij == T{0} || !allowed->allowed(b, i, j, g.Tq, g.Tk)) continue;
            t = (PairConstMap<T>(A + i * g.Da, g.Da) + PairConstMap<T>(C + j * g.Da, g.Da)).tanh();
            if (partial) PairMap<T>(partial + task * g.Da, g.Da) += gij * t;
            t = gij * W * (T{1} - t.square());  // ds_ij w (1 − t²), the pre-activation's gradient
            if (da) PairMap<T>(da + (task * g.Tq + i) * g.Da, g.Da) += t;
            if (dc) PairMap<T>(dc + (key_task * g.Tk + j) * g.Da, g.Da) += t;
          }
      }
    });
    if (!need_w) return;
    T* dw = tape.grad(w).data();
    for (index_t h = 0; h < g.H; ++h)
      for (index_t b = 0; b < g.B; ++b)
        for (index_t d = 0; d < g.Da; ++d) dw[h * g.Da + d] += partial[(b * g.H + h) * g.Da + d];
  }
};

}  // namespace detail

// Additive scores of all pairs: a [B, H, Tq, Da] (query side, W₁ᵃ q + b₁ per head), c [B, Hk, Tk,
// Da] (key side, W₁ᵇ k per key head; Hk divides H), w [H, Da] (one score vector per head) give
//     s[b, h, i, j] = Σ_d w[h, d] tanh(a[b, h, i, d] + c[b, h / (H / Hk), j, d])   -> [B, H, Tq,
//     Tk].
// Pairs the predicate rules out (a mask policy, e.g. mask::Causal: about half the pairs) are not
// computed and hold 0; pass the same mask to masked_softmax, which ignores them.
template <class T, detail::PairPredicate Allowed = detail::AllPairs>
Var<T> additive_scores(const Var<T>& a, const Var<T>& c, const Var<T>& w,
                       const Allowed& allowed = {}) {
  Tape<T>& tape = a.tape();
  tape.check(a, "additive_scores");
  tape.check(c, "additive_scores");
  tape.check(w, "additive_scores");
  const Shape &sa = a.shape(), &sc = c.shape(), &sw = w.shape();
  ATTN_CHECK(sa.rank() == 4 && sc.rank() == 4 && sw.rank() == 2, shape_error,
             "additive_scores: a must be [B, H, Tq, Da], c [B, Hk, Tk, Da] and w [H, Da], got ", sa,
             ", ", sc, ", ", sw);
  const detail::PairwiseGeometry g{sa[0], sa[1], sc[1], sa[2], sc[2], sa[3]};
  ATTN_CHECK(
      sc[0] == g.B && g.Hk > 0 && g.H % g.Hk == 0 && sc[3] == g.Da && sw[0] == g.H && sw[1] == g.Da,
      shape_error, "additive_scores: shapes do not fit together: a ", sa, ", c ", sc, ", w ", sw);
  detail::validate_pairs(allowed, g.B, g.Tq, g.Tk);
  auto [s, node] = tape.push(Shape{g.B, g.H, g.Tq, g.Tk}, "additive_scores",
                             a.requires_grad() || c.requires_grad() || w.requires_grad());
  const T* av = a.value().data();
  const T* cv = c.value().data();
  const T* wv = w.value().data();
  T* out = node.value->data();
  // One task per query row (b, h, i): its Tk scores.
  parallel_for(g.B * g.H * g.Tq, 6.0 * double(g.Tk) * double(g.Da), [&](index_t r) {
    const index_t i = r % g.Tq, bh = r / g.Tq, b = bh / g.H, h = bh % g.H;
    const detail::PairConstMap<T> A(av + r * g.Da, g.Da);           // a[b, h, i, :]
    const T* C = cv + (b * g.Hk + h / (g.H / g.Hk)) * g.Tk * g.Da;  // c[b, h / (H / Hk), :, :]
    const detail::PairConstMap<T> W(wv + h * g.Da, g.Da);           // w[h, :]
    for (index_t j = 0; j < g.Tk; ++j)
      out[r * g.Tk + j] = allowed.allowed(b, i, j, g.Tq, g.Tk)
                              ? (W * (A + detail::PairConstMap<T>(C + j * g.Da, g.Da)).tanh()).sum()
                              : T{0};
  });
  if (node.requires_grad) {
    const Allowed* stored = node.template keep_value<Allowed>(allowed);
    tape.set_backward(
        node, detail::AdditiveScoresOp<Allowed>{a.index(), c.index(), w.index(), g, stored});
  }
  return s;
}

}  // namespace attn
