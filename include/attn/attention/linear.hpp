// attn/attention/linear.hpp: feature-map attention κ(q, k) = φ(q)·φ(k) in O(T F Dv) by
// associativity, o_i = φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / φ(q_i)ᵀ Σ_j φ(k_j) (Katharopoulos et al. 2020),
// with running (prefix) sums for the causal mask. Also the feature maps φ as autodiff ops.
// Does not handle other masks: those go through materialized.hpp with the same φ.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <vector>

#include "kernel.hpp"
#include "online_softmax.hpp"
#include "random_features.hpp"

namespace attn {

namespace detail {

template <class T>
struct LinearScratch {
  Mat<T> kv, dkv;
  Col<T> z, dz, dn;
};

template <class T>
LinearScratch<T>& linear_scratch() {
  thread_local LinearScratch<T> scratch;
  return scratch;
}

struct LinearAttentionOp {
  std::int32_t fq, fk, v;
  AttentionGeometry g;  // Dh here is the feature count F
  bool causal;
  // self.saved[0]: the denominators φ(q_i)·z_i per query row.

  // o_i = n_i / d_i with n_i = KV_iᵀ φq_i, d_i = φq_i·z_i, KV_i = Σ_{j≤p_i} φk_j v_jᵀ,
  // z_i = Σ_{j≤p_i} φk_j (p_i = Tk − 1 without a mask, i + Tk − Tq with the causal one).
  //   dn_i = do_i / d_i,  dd_i = −do_i·o_i / d_i,
  //   dφq_i = KV_i dn_i + z_i dd_i,
  //   dφk_j = G_j v_j + g_j,  dv_j = G_jᵀ φk_j,  with G_j = Σ_{i: p_i≥j} φq_i dn_iᵀ, g_j = Σ φq_i
  //   dd_i.
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    const T* qv = tape.value(fq).data();
    const T* kv = tape.value(fk).data();
    const T* vv = tape.value(v).data();
    const T* ov = self.value->data();
    const T* gov = self.grad->data();
    const T* den = self.saved[0].data();
    T* dq = tape.requires_grad(fq) ? tape.grad(fq).data() : nullptr;
    T* dk = tape.requires_grad(fk) ? tape.grad(fk).data() : nullptr;
    T* dv = tape.requires_grad(v) ? tape.grad(v).data() : nullptr;
    const index_t F = g.Dh, off = causal ? g.Tk - g.Tq : 0;
    parallel_for(g.B * g.Hk, 8.0 * double(g.group()) * double(g.Tq + g.Tk) * double(F * g.Dv),
                 [&](index_t task) {
                   const index_t hk = task % g.Hk, b = task / g.Hk;
                   LinearScratch<T>& sc = linear_scratch<T>();
                   for (index_t h = hk * g.group(); h < (hk + 1) * g.group(); ++h) {
                     auto last_key = [&](index_t i) {
                       return causal ? std::min(g.Tk - 1, i + off) : g.Tk - 1;
                     };
                     // dφq: walk queries in order with running KV and z (the forward sums again).
                     sc.kv.setZero(F, g.Dv);
                     sc.z.setZero(F);
                     index_t next = 0;
                     for (index_t i = 0; i < g.Tq; ++i) {
                       for (; next <= last_key(i); ++next) {
                         Eigen::Map<const Col<T>> phik(kv + g.k_off(b, hk, next), F);
                         Eigen::Map<const Col<T>> vj(vv + g.v_off(b, hk, next), g.Dv);
                         sc.kv.noalias() += phik * vj.transpose();
                         sc.z += phik;
                       }
                       const T d = den[g.row(b, h, i)];
                       if (!dq || d == T{0}) continue;
                       Eigen::Map<const Col<T>> go(gov + g.o_off(b, h, i), g.Dv);
                       Eigen::Map<const Col<T>> o(ov + g.o_off(b, h, i), g.Dv);
                       const T dd = -go.dot(o) / d;
                       Eigen::Map<Col<T>>(dq + g.q_off(b, h, i), F).noalias() +=
                           sc.kv * (go / d) + sc.z * dd;
                     }
                     if (!dk && !dv) continue;
                     // dφk, dv: walk keys backwards, adding each query once every key it sees has
                     // been reached.
                     sc.dkv.setZero(F, g.Dv);
                     sc.dz.setZero(F);
                     index_t qi = g.Tq - 1;
                     for (index_t j = g.Tk - 1; j >= 0; --j) {
                       for (; qi >= 0 && last_key(qi) >= j; --qi) {
                         const T d = den[g.row(b, h, qi)];
                         if (d == T{0}) continue;
                         Eigen::Map<const Col<T>> phiq(qv + g.q_off(b, h, qi), F);
                         Eigen::Map<const Col<T>> go(gov + g.o_off(b, h, qi), g.Dv);
                         Eigen::Map<const Col<T>> o(ov + g.o_off(b, h, qi), g.Dv);
                         sc.dkv.noalias() += phiq * (go / d).transpose();
                         sc.dz += phiq * (-go.dot(o) / d);
                       }
                       Eigen::Map<const Col<T>> phik(kv + g.k_off(b, hk, j), F);
                       Eigen::Map<const Col<T>> vj(vv + g.v_off(b, hk, j), g.Dv);
                       if (dk)
                         Eigen::Map<Col<T>>(dk + g.k_off(b, hk, j), F).noalias() +=
                             sc.dkv * vj + sc.dz;
                       if (dv)
                         Eigen::Map<Col<T>>(dv + g.v_off(b, hk, j), g.Dv).noalias() +=
                             sc.dkv.transpose() * phik;
                     }
                   }
                 });
  }
};

struct RandomFeatureMapOp {
  std::int32_t x, r;
  index_t features;

  // φ_a = exp(r_a·x − ‖x‖²/2 − m) / √F with m held constant (it cancels downstream):
  // dx = Rᵀ(dφ ∘ φ) − x Σ_a dφ_a φ_a.
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    if (!tape.requires_grad(x)) return;
    const Tensor<T>& xv = tape.value(x);
    const index_t d = xv.shape().last(), rows = xv.numel() / d;
    Eigen::Map<const Mat<T>> X(xv.data(), rows, d);
    Eigen::Map<const Mat<T>> Phi(self.value->data(), rows, features);
    Eigen::Map<const Mat<T>> dPhi(self.grad->data(), rows, features);
    Eigen::Map<const Mat<T>> R(tape.value(r).data(), features, d);
    Eigen::Map<Mat<T>> dX(tape.grad(x).data(), rows, d);
    const Mat<T> prod = (dPhi.array() * Phi.array()).matrix();
    dX.noalias() += prod * R;
    dX -= prod.rowwise().sum().asDiagonal() * X;
  }
};

}  // namespace detail

// Linear attention of feature maps φq [B, H, Tq, F], φk [B, Hk, Tk, F] and v [B, Hk, Tk, Dv],
// unmasked or causal (end-aligned, as mask::Causal). A query whose normaliser is 0 outputs 0.
template <class T>
Var<T> linear_attention(const Var<T>& fq, const Var<T>& fk, const Var<T>& v, bool causal) {
  Tape<T>& tape = fq.tape();
  const detail::AttentionGeometry g = detail::checked_geometry(fq, fk, v, "linear_attention");
  auto [o, node] = tape.push(Shape{g.B, g.H, g.Tq, g.Dv}, "linear_attention",
                             fq.requires_grad() || fk.requires_grad() || v.requires_grad());
  node.saved.resize(1);
  node.saved[0].resize(Shape{g.B * g.H * g.Tq});
  T* den = node.saved[0].data();
  const T* qv = fq.value().data();
  const T* kv = fk.value().data();
  const T* vv = v.value().data();
  T* ov = node.value->data();
  const index_t F = g.Dh, off = causal ? g.Tk - g.Tq : 0;
  parallel_for(g.B * g.H, 4.0 * double(g.Tq + g.Tk) * double(F * g.Dv), [&](index_t task) {
    const index_t h = task % g.H, b = task / g.H, hk = h / g.group();
    detail::LinearScratch<T>& sc = detail::linear_scratch<T>();
    sc.kv.setZero(F, g.Dv);
    sc.z.setZero(F);
    index_t next = 0;
    for (index_t i = 0; i < g.Tq; ++i) {
      const index_t last = causal ? std::min(g.Tk - 1, i + off) : g.Tk - 1;
      for (; next <= last; ++next) {
        Eigen::Map<const detail::Col<T>> phik(kv + g.k_off(b, hk, next), F);
        Eigen::Map<const detail::Col<T>> vj(vv + g.v_off(b, hk, next), g.Dv);
        sc.kv.noalias() += phik * vj.transpose();
        sc.z += phik;
      }
      Eigen::Map<const detail::Col<T>> phiq(qv + g.q_off(b, h, i), F);
      Eigen::Map<detail::Col<T>> out(ov + g.o_off(b, h, i), g.Dv);
      const T d = phiq.dot(sc.z);
      den[g.row(b, h, i)] = d;
      if (d == T{0})
        out.setZero();
      else
        out.noalias() = sc.kv.transpose() * phiq / d;
    }
  });
  tape.set_backward(node, detail::LinearAttentionOp{fq.index(), fk.index(), v.index(), g, causal});
  return o;
}

// φ(x) = exp(Rx − ‖x‖²/2 − m)/√F along the last axis, with R = random_feature_matrix [F, d] as
// a Var and m the max of Rx per row (per_row, for queries) or per [T, F] slice (for keys, so that
// every key of a sequence shares one factor).
template <class T>
Var<T> random_feature_map(const Var<T>& x, const Var<T>& r, bool per_row) {
  Tape<T>& tape = x.tape();
  tape.check(x, "random_feature_map");
  tape.check(r, "random_feature_map");
  const index_t d = x.shape().last(), F = r.shape()[0];
  ATTN_CHECK(r.shape().rank() == 2 && r.shape()[1] == d, shape_error, "random_feature_map: R ",
             r.shape(), " does not match x ", x.shape());
  std::array<index_t, 4> dims{};
  for (int i = 0; i < x.shape().rank(); ++i) dims[static_cast<std::size_t>(i)] = x.shape()[i];
  dims[static_cast<std::size_t>(x.shape().rank() - 1)] = F;
  const Shape out(
      std::span<const index_t>(dims.data(), static_cast<std::size_t>(x.shape().rank())));
  auto [phi, node] = tape.push(out, "random_feature_map", x.requires_grad());
  const index_t rows = x.numel() / d;
  Eigen::Map<const detail::Mat<T>> X(x.value().data(), rows, d);
  Eigen::Map<const detail::Mat<T>> R(r.value().data(), F, d);
  Eigen::Map<detail::Mat<T>> P(node.value->data(), rows, F);
  gemm(x.value().data(), false, r.value().data(), true, node.value->data(), rows, F, d);
  const detail::Col<T> half_norm = X.rowwise().squaredNorm() / T{2};
  // Keys share one max per sequence slice (the rows of one [T, F] matrix: one batch entry and
  // head), so that no slice's features underflow because another slice's projections are larger.
  const index_t slice = x.shape().rank() >= 2 ? x.shape()[x.shape().rank() - 2] : rows;
  std::vector<T> slice_max;
  if (!per_row)
    for (index_t s0 = 0; s0 < rows; s0 += slice)
      slice_max.push_back(P.middleRows(s0, slice).maxCoeff());
  const T scale = T(1) / std::sqrt(static_cast<T>(F));
  parallel_for(rows, double(F) * 8, [&](index_t i) {
    const T m = per_row ? P.row(i).maxCoeff() : slice_max[static_cast<std::size_t>(i / slice)];
    P.row(i) = (P.row(i).array() - half_norm(i) - m).exp() * scale;
  });
  tape.set_backward(node, detail::RandomFeatureMapOp{x.index(), r.index(), F});
  return phi;
}

}  // namespace attn
