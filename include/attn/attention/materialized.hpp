// attn/attention/materialized.hpp: attention that forms each head's Tq x Tk weight matrix,
// for kernels without an online form (Polynomial<C>, feature maps under arbitrary masks) and as
// the plain-GEMM path the fused kernel is measured against. Does not tile: memory is O(T²) per
// head in flight (one head per thread at a time).
//
// S = alpha A Bᵀ + beta_a ‖a_i‖² + beta_b ‖b_j‖² [+ b_h(p_i − p_j)] [+ a learned bias]
// [→ c tanh(S / c)],  K = κ(S) on allowed entries (0 elsewhere), W = K / rowsum(K) (a row summing
// to 0 gives W = 0),  O = W V. The position bias b_h is a score's (score.hpp: ALiBi), added per
// element; the learned bias the call's (learned_bias.hpp), with its gradient; the soft cap c a
// score's (score::SoftCap). NaN and infinity follow non_finite.hpp's rule: key and value rows
// hidden from every query are zeros, and a head whose values are not all finite takes W V over
// the allowed entries only.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernel_common.hpp"
#include "learned_bias.hpp"
#include "mask.hpp"
#include "non_finite.hpp"
#include "score.hpp"

namespace attn {

namespace detail {

// κ(s) = s, for φ(q)·φ(k) scores of feature-map kernels.
struct IdentityKernel {
  static constexpr bool shift_invariant = false;
  template <class T>
  T value(T s) const {
    return s;
  }
  template <class T>
  T derivative(T, T) const {
    return T{1};
  }
};

struct MaterializedForm {
  double alpha = 1, beta_a = 0, beta_b = 0;
  double soft_cap = 0;  // > 0: S → soft_cap · tanh(S / soft_cap) after the bias (score::SoftCap)
};

// Where the per-pair position bias of a form comes from: nowhere (NoScoreBias) or a score policy
// that has one (ScoreBias<S>); head(h, H) gives head h's callable of the distance.
struct NoScoreBias {
  static constexpr bool active = false;
  NoPositionBias head(index_t, index_t) const { return {}; }
};
template <ScorePolicy S>
struct ScoreBias {
  static constexpr bool active = HasPositionBias<S>;
  S score;
  auto head(index_t h, index_t heads) const { return head_position_bias(score, h, heads); }
};

template <class T>
struct MaterializedScratch {
  Mat<T> s, k, w, wd, dw;
  Col<T> z, rows, cols;
};

template <class T>
MaterializedScratch<T>& materialized_scratch() {
  thread_local MaterializedScratch<T> scratch;
  return scratch;
}

// Scores, kernel values and weights of head (b, h) into sc.s, sc.k, sc.w; sc.z the row sums.
template <class T, class Kappa, MaskPolicy Mask, class Bias>
void materialize_head(const MaterializedForm& form, const Kappa& kappa, const Mask& mask,
                      const Bias& bias, const BiasTables<T>* learned, const AttentionGeometry& g,
                      const T* a, const T* bk, index_t b, index_t h, MaterializedScratch<T>& sc) {
  const index_t hk = h / g.group();
  Eigen::Map<const Mat<T>> A(a + g.q_off(b, h, 0), g.Tq, g.Dh);
  Eigen::Map<const Mat<T>> Bm(bk + g.k_off(b, hk, 0), g.Tk, g.Dh);
  sc.s.resize(g.Tq, g.Tk);
  // The products go through attn's gemm (compiled once in attn::compiled), not Eigen's operator*,
  // which would compile Eigen's GEMM kernels again for every kernel and mask.
  gemm_serial(A.data(), false, Bm.data(), true, sc.s.data(), g.Tq, g.Tk, g.Dh);
  sc.s *= static_cast<T>(form.alpha);
  if (form.beta_a != 0) sc.s.colwise() += static_cast<T>(form.beta_a) * A.rowwise().squaredNorm();
  if (form.beta_b != 0)
    sc.s.rowwise() += static_cast<T>(form.beta_b) * Bm.rowwise().squaredNorm().transpose();
  if constexpr (Bias::active) {
    const auto position_bias = bias.head(h, g.H);
    for (index_t i = 0; i < g.Tq; ++i)
      for (index_t j = 0; j < g.Tk; ++j)
        sc.s(i, j) += static_cast<T>(position_bias(g.query_position(i) - j));
  }
  if (learned) learned->add(g, b, h, 0, g.Tq, 0, g.Tk, sc.s.data(), g.Tk);
  if (form.soft_cap > 0) {
    const T c = static_cast<T>(form.soft_cap);
    sc.s = c * (sc.s.array() / c).tanh();
  }
  sc.k.resize(g.Tq, g.Tk);
  sc.z.resize(g.Tq);
  for (index_t i = 0; i < g.Tq; ++i) {
    T shift = 0;
    if constexpr (Kappa::shift_invariant) {  // subtract the row max: κ(s − m) ∝ κ(s), no overflow
      shift = -std::numeric_limits<T>::infinity();
      for (index_t j = 0; j < g.Tk; ++j)
        if (mask.allowed(b, i, j, g.Tq, g.Tk)) shift = std::max(shift, sc.s(i, j));
      if (shift == -std::numeric_limits<T>::infinity()) shift = 0;
    }
    T z = 0;
    for (index_t j = 0; j < g.Tk; ++j) {
      const T kv = mask.allowed(b, i, j, g.Tq, g.Tk) ? kappa.value(sc.s(i, j) - shift) : T{0};
      sc.k(i, j) = kv;
      z += kv;
    }
    sc.z(i) = z;
  }
  sc.w = sc.k;
  for (index_t i = 0; i < g.Tq; ++i) {
    if (sc.z(i) != T{0})
      sc.w.row(i) /= sc.z(i);
    else
      sc.w.row(i).setZero();
  }
}

template <class Kappa, MaskPolicy Mask, class Bias>
struct MaterializedOp {
  std::int32_t a, bk, v;
  AttentionGeometry g;
  MaterializedForm form;
  Kappa kappa;
  AttentionDropout dropout;
  const Mask* mask;
  Bias bias;
  std::int32_t learned = -1;  // a learned bias's parameters (learned_bias.hpp), or −1
  LearnedBiasForm learned_form;

  // O = W V, W = K / z:  dV = Wᵀ dO,  dW = dO Vᵀ,  dK_ij = (dW_ij − Σ_l dW_il W_il) / z_i,
  // dS = dK ∘ κ'(S),  dA = (alpha dS) B + 2 beta_a rowsum(dS) ∘ a,
  // dB = (alpha dS)ᵀ A + 2 beta_b colsum(dS) ∘ b.
  // Heads sharing a key/value head (grouped query) are summed in head order on one thread; a
  // learned bias's gradient comes from dS, per (b, h) (learned_bias.hpp).
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    BiasTables<T> tables;
    std::vector<double> sums;
    std::vector<T> dense_grad;
    const bool bias_grad = learned >= 0 && tape.requires_grad(learned);
    if (learned >= 0) {
      tables = bias_tables(learned_form, tape.value(learned), g, "attention");
      if (bias_grad && tables.positional())
        sums.assign(static_cast<std::size_t>(g.B * g.H * tables.slots), 0.0);
      else if (bias_grad)
        dense_grad.assign(static_cast<std::size_t>(g.B * g.H * g.Tq * g.Tk), T{0});
    }
    const BiasTables<T>* tab = learned >= 0 ? &tables : nullptr;
    const T* av = tape.value(a).data();
    const NonFiniteInputs<T> nf =
        non_finite_inputs(*mask, g, av, tape.value(bk).data(), tape.value(v).data(), tab);
    const T* bv = nf.k;
    const T* vv = nf.v;
    const T* dov = self.grad->data();
    T* da = tape.requires_grad(a) ? tape.grad(a).data() : nullptr;
    T* db = tape.requires_grad(bk) ? tape.grad(bk).data() : nullptr;
    T* dv = tape.requires_grad(v) ? tape.grad(v).data() : nullptr;
    const double cost = 8.0 * double(g.Tq) * double(g.Tk) * double(g.Dh + g.Dv) * double(g.group());
    parallel_for(g.B * g.Hk, cost, [&](index_t task) {
      const index_t hk = task % g.Hk, b = task / g.Hk;
      MaterializedScratch<T>& sc = materialized_scratch<T>();
      for (index_t h = hk * g.group(); h < (hk + 1) * g.group(); ++h) {
        materialize_head(form, kappa, *mask, bias, tab, g, av, bv, b, h, sc);
        Eigen::Map<const Mat<T>> dO(dov + g.o_off(b, h, 0), g.Tq, g.Dv);
        Eigen::Map<const Mat<T>> V(vv + g.v_off(b, hk, 0), g.Tk, g.Dv);
        // With dropout, O = (W ∘ M) V: dV = (W ∘ M)ᵀ dO and dW = M ∘ (dO Vᵀ).
        if (dropout.active()) {
          sc.wd = sc.w;
          dropout.apply(sc.wd, g.row(b, h, 0), g.Tk, 0);
        }
        if (dv)
          gemm_serial((dropout.active() ? sc.wd : sc.w).data(), true, dO.data(), false,
                      dv + g.v_off(b, hk, 0), g.Tk, g.Dv, g.Tq, true);
        if (!da && !db && !bias_grad) continue;
        sc.dw.resize(g.Tq, g.Tk);
        gemm_serial(dO.data(), false, V.data(), true, sc.dw.data(), g.Tq, g.Tk, g.Dv);
        if (dropout.active()) dropout.apply(sc.dw, g.row(b, h, 0), g.Tk, 0);
        for (index_t i = 0; i < g.Tq; ++i) {
          if (sc.z(i) == T{0}) {
            sc.dw.row(i).setZero();
            continue;
          }
          const T dot = sc.dw.row(i).dot(sc.w.row(i));
          for (index_t j = 0; j < g.Tk; ++j) {
            const T dk = (sc.dw(i, j) - dot) / sc.z(i);
            T ds = dk * kappa.derivative(sc.s(i, j), sc.k(i, j));
            if (form.soft_cap > 0) {  // through the cap: 1 − tanh² = 1 − (s / c)²
              const T u = sc.s(i, j) / static_cast<T>(form.soft_cap);
              ds *= T{1} - u * u;
            }
            sc.dw(i, j) = mask->allowed(b, i, j, g.Tq, g.Tk) ? ds : T{0};
          }
        }
        // sc.dw now holds dS; the learned bias's gradient, its row and column sums, then alpha dS.
        if (bias_grad)
          tables.gradient(g, b, h, 0, g.Tq, 0, g.Tk, sc.dw.data(), g.Tk,
                          sums.empty() ? nullptr : sums.data() + (b * g.H + h) * tables.slots,
                          dense_grad.empty() ? nullptr : dense_grad.data());
        Eigen::Map<const Mat<T>> A(av + g.q_off(b, h, 0), g.Tq, g.Dh);
        Eigen::Map<const Mat<T>> Bm(bv + g.k_off(b, hk, 0), g.Tk, g.Dh);
        if (da && form.beta_a != 0)
          sc.rows = static_cast<T>(2 * form.beta_a) * sc.dw.rowwise().sum();
        if (db && form.beta_b != 0)
          sc.cols = static_cast<T>(2 * form.beta_b) * sc.dw.colwise().sum().transpose();
        if (form.alpha != 1) sc.dw *= static_cast<T>(form.alpha);
        if (da) {
          T* dA = da + g.q_off(b, h, 0);
          gemm_serial(sc.dw.data(), false, Bm.data(), false, dA, g.Tq, g.Dh, g.Tk, true);
          if (form.beta_a != 0) Eigen::Map<Mat<T>>(dA, g.Tq, g.Dh) += sc.rows.asDiagonal() * A;
        }
        if (db) {
          T* dB = db + g.k_off(b, hk, 0);
          gemm_serial(sc.dw.data(), true, A.data(), false, dB, g.Tk, g.Dh, g.Tq, true);
          if (form.beta_b != 0) Eigen::Map<Mat<T>>(dB, g.Tk, g.Dh) += sc.cols.asDiagonal() * Bm;
        }
      }
    });
    if (bias_grad)
      add_bias_gradient(tables, g, 1, sums, dense_grad.data(), tape.grad(learned).data());
  }
};

}  // namespace detail

// O = normalise(κ(S) on the allowed entries) V with S = alpha A Bᵀ + beta_a ‖a‖² + beta_b ‖b‖²
// (+ the position bias of `bias`, + the learned bias `learned`); `weights`, when given, receives
// W [B, H, Tq, Tk]; key_length > 0 attends to the first key_length rows of each head of bk and v
// (see geometry.hpp).
template <class Kappa, MaskPolicy Mask, class T, class Bias = detail::NoScoreBias>
Var<T> materialized_attention(const Var<T>& a, const Var<T>& bk, const Var<T>& v,
                              const detail::MaterializedForm& form, const Kappa& kappa,
                              const Mask& mask, Tensor<T>* weights = nullptr,
                              const AttentionDropout& dropout = {}, const Bias& bias = {},
                              index_t key_length = 0, const LearnedBias<T>* learned = nullptr) {
  Tape<T>& tape = a.tape();
  const detail::AttentionGeometry g = detail::checked_geometry(a, bk, v, "attention", key_length);
  mask.validate(g.B, g.Tq, g.Tk);
  dropout.check("attention");
  if (form.soft_cap != 0) detail::check_soft_cap(form.soft_cap, "attention");
  detail::BiasTables<T> tables;
  if (learned) {
    tape.check(learned->values, "attention");
    tables = detail::bias_tables(learned->form, learned->values.value(), g, "attention");
  }
  const detail::BiasTables<T>* tab = learned ? &tables : nullptr;
  auto [o, node] = tape.push(Shape{g.B, g.H, g.Tq, g.Dv}, "attention",
                             a.requires_grad() || bk.requires_grad() || v.requires_grad() ||
                                 (learned && learned->values.requires_grad()));
  if (weights) weights->resize(Shape{g.B, g.H, g.Tq, g.Tk});
  const T* av = a.value().data();
  const detail::NonFiniteInputs<T> nf =
      detail::non_finite_inputs(mask, g, av, bk.value().data(), v.value().data(), tab);
  const T* bv = nf.k;
  const T* vv = nf.v;
  T* ov = node.value->data();
  parallel_for(
      g.B * g.H, 4.0 * double(g.Tq) * double(g.Tk) * double(g.Dh + g.Dv), [&](index_t task) {
        const index_t h = task % g.H, b = task / g.H;
        detail::MaterializedScratch<T>& sc = detail::materialized_scratch<T>();
        detail::materialize_head(form, kappa, mask, bias, tab, g, av, bv, b, h, sc);
        Eigen::Map<const detail::Mat<T>> V(vv + g.v_off(b, h / g.group(), 0), g.Tk, g.Dv);
        if (dropout.active()) {
          sc.wd = sc.w;
          dropout.apply(sc.wd, g.row(b, h, 0), g.Tk, 0);
        }
        const detail::Mat<T>& w = dropout.active() ? sc.wd : sc.w;
        if (nf.values_not_finite(b, h / g.group(), g)) {  // masked keys left out, not times 0
          T* o = ov + g.o_off(b, h, 0);
          std::fill_n(o, g.Tq * g.Dv, T{0});
          for (index_t i = 0; i < g.Tq; ++i)
            for (index_t j = 0; j < g.Tk; ++j)
              if (mask.allowed(b, i, j, g.Tq, g.Tk))
                for (index_t c = 0; c < g.Dv; ++c) o[i * g.Dv + c] += w(i, j) * V(j, c);
        } else {
          gemm_serial(w.data(), false, V.data(), false, ov + g.o_off(b, h, 0), g.Tq, g.Dv, g.Tk);
        }
        if (weights)
          Eigen::Map<detail::Mat<T>>(weights->data() + (b * g.H + h) * g.Tq * g.Tk, g.Tq, g.Tk) =
              sc.w;
      });
  if (node.requires_grad) {
    const Mask* stored = node.template keep_value<Mask>(mask);
    tape.set_backward(node, detail::MaterializedOp<Kappa, Mask, Bias>{
                                a.index(), bk.index(), v.index(), g, form, kappa, dropout, stored,
                                bias, learned ? learned->values.index() : std::int32_t{-1},
                                learned ? learned->form : LearnedBiasForm{}});
  }
  return o;
}

}  // namespace attn
