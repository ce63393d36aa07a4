// attn/attention/linear.hpp: feature-map attention κ(q, k) = φ(q)·φ(k) in O(T F Dv) by
// associativity, o_i = φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / φ(q_i)ᵀ Σ_j φ(k_j) (Katharopoulos et al. 2020),
// with running (prefix) sums for the causal mask; which masks it can run (LinearMask); and any
// feature map φ of kernel.hpp as one autodiff op. Does not handle other masks: those go through
// materialized.hpp with the same φ.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "kernel.hpp"
#include "kernel_common.hpp"
#include "mask.hpp"
#include "random_features.hpp"
#include "score.hpp"

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

// φ = map(x) row by row (kernel.hpp's two forms): dx += J_φ(x)ᵀ dφ, which for an elementwise
// map is dx_i += dφ_i φ'(x_i).
template <FeatureMapKernel K>
struct FeatureMapOp {
  std::int32_t x;
  const K* kernel;  // owned by self.keep

  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    if (!tape.requires_grad(x)) return;
    const Tensor<T>& xv = tape.value(x);
    const T* phi = self.value->data();
    const T* dphi = self.grad->data();
    if constexpr (ElementwiseFeatureMap<K>) {
      const auto dx = tape.grad_write(x);
      const index_t n = xv.numel(), chunk = 4096;
      parallel_for(block_count(n, chunk), double(chunk) * 4, [&](index_t c) {
        for (index_t e = c * chunk; e < std::min(n, (c + 1) * chunk); ++e) {
          const T g = dphi[e] * kernel->derivative(xv[e], phi[e]);
          dx.data[e] = dx.accumulate ? dx.data[e] + g : g;
        }
      });
    } else {
      const index_t d = xv.shape().last();
      kernel->map_backward(xv.data(), phi, dphi, xv.numel() / d, d, tape.grad(x).data());
    }
  }
};

// How a mask runs on the linear path: `ok` when it can, `causal` for prefix sums (mask::Causal,
// end-aligned), `drop_keys` when some keys are left out of every sum (key-only masks, see
// mask.hpp). And<A, B> runs when both parts do.
template <MaskPolicy M>
struct LinearMask {
  static constexpr bool ok = key_only_mask<M>;
  static constexpr bool causal = false;
  static constexpr bool drop_keys = ok && !std::is_same_v<M, mask::None>;
  static bool keep(const M& m, index_t b, index_t j, index_t tq, index_t tk) {
    return m.allowed(b, 0, j, tq, tk);
  }
};
template <>
struct LinearMask<mask::Causal> {
  static constexpr bool ok = true, causal = true, drop_keys = false;
  static bool keep(const mask::Causal&, index_t, index_t, index_t, index_t) { return true; }
};
template <MaskPolicy A, MaskPolicy B>
struct LinearMask<mask::And<A, B>> {
  static constexpr bool ok = LinearMask<A>::ok && LinearMask<B>::ok;
  static constexpr bool causal = LinearMask<A>::causal || LinearMask<B>::causal;
  static constexpr bool drop_keys = LinearMask<A>::drop_keys || LinearMask<B>::drop_keys;
  static bool keep(const mask::And<A, B>& m, index_t b, index_t j, index_t tq, index_t tk) {
    return LinearMask<A>::keep(m.first, b, j, tq, tk) &&
           LinearMask<B>::keep(m.second, b, j, tq, tk);
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

// φ(x) along the last axis of x [..., d] -> [..., F] for any feature-map kernel (F = d for an
// elementwise map, kernel.feature_count(d) for a map by rows), as one tape node.
template <FeatureMapKernel K, class T>
Var<T> feature_map(const K& kernel, const Var<T>& x, FeatureSide side) {
  Tape<T>& tape = x.tape();
  tape.check(x, "feature_map");
  ATTN_CHECK(x.shape().rank() >= 1 && x.shape().last() > 0, shape_error, "feature_map (", K::name,
             "): x ", x.shape(), " has no coordinates to map");
  const index_t d = x.shape().last(), rows = x.numel() / d;
  index_t F = d;
  if constexpr (!ElementwiseFeatureMap<K>) F = kernel.feature_count(d);
  std::array<index_t, 4> dims{};
  for (int i = 0; i < x.shape().rank(); ++i) dims[static_cast<std::size_t>(i)] = x.shape()[i];
  dims[static_cast<std::size_t>(x.shape().rank() - 1)] = F;
  const Shape out(
      std::span<const index_t>(dims.data(), static_cast<std::size_t>(x.shape().rank())));
  auto [phi, node] = tape.push(out, K::name, x.requires_grad());
  const T* xv = x.value().data();
  T* pv = node.value->data();
  if constexpr (ElementwiseFeatureMap<K>) {
    const index_t n = x.numel(), chunk = 4096;
    parallel_for(block_count(n, chunk), double(chunk) * 4, [&](index_t c) {
      for (index_t e = c * chunk; e < std::min(n, (c + 1) * chunk); ++e)
        pv[e] = kernel.value(xv[e]);
    });
  } else {
    kernel.map(xv, rows, d, pv, side);
  }
  if (node.requires_grad)
    tape.set_backward(node,
                      detail::FeatureMapOp<K>{x.index(), node.template keep_value<K>(kernel)});
  return phi;
}

}  // namespace attn
