// attn/attention/reference.hpp: attention by its definition, in plain loops, for every
// Score x Kernel x Mask combination: the oracle every fast path is tested against.
// Does not record anything on a tape and is O(Tq Tk) in time and memory; use Attention for work.
//
//   o_i = Σ_j w_ij v_j,   w_ij = κ(q_i, k_j) / Σ_l κ(q_i, k_l)   over the keys the mask allows,
//
// with κ = exp(s) (Softmax), s^C (Polynomial<C>) or φ(q)·φ(k) (feature maps), s = the score's
// operator()(q, k, d) plus its position bias b_h(p_i − p_j) if it has one, plus bias[b, h, i, j]
// when a bias tensor [B, H, Tq, Tk] is given (the learned biases, expanded by the caller)
// (through its soft cap if it has one, score::SoftCap), and o_i = 0 when no
// key is allowed or the normaliser is 0. A key the mask hides is left out of every sum, so a NaN
// or infinity there changes nothing; a softmax row whose allowed scores are all −∞ is 0
// (non_finite.hpp states the rule every path follows). Includes the policies and core only, never
// the paths it checks.
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include "geometry.hpp"
#include "kernel.hpp"
#include "mask.hpp"
#include "random_features.hpp"
#include "score.hpp"

namespace attn {

template <class T>
struct ReferenceAttention {
  Tensor<T> out;      // [B, H, Tq, Dv]
  Tensor<T> weights;  // [B, H, Tq, Tk]
};

namespace detail {

// φ of `rows` rows x [rows, d] (already scaled) for a feature-map kernel, in double, by the
// kernel's own definition: value() per coordinate, or its map() by rows. [rows, F]
template <FeatureMapKernel K>
std::vector<double> reference_features(const K& kernel, const std::vector<double>& x, index_t d,
                                       FeatureSide side) {
  if constexpr (ElementwiseFeatureMap<K>) {
    std::vector<double> f;
    for (const double xi : x) f.push_back(kernel.value(xi));
    return f;
  } else {
    const auto rows = static_cast<index_t>(x.size()) / d;
    std::vector<double> f(static_cast<std::size_t>(rows * kernel.feature_count(d)));
    kernel.map(x.data(), rows, d, f.data(), side);
    return f;
  }
}

}  // namespace detail

template <ScorePolicy Score, KernelPolicy Kernel, MaskPolicy Mask, class T>
ReferenceAttention<T> reference_attention(const Tensor<T>& q, const Tensor<T>& k,
                                          const Tensor<T>& v, const Score& score = {},
                                          const Kernel& kernel = {}, const Mask& mask = {},
                                          const Tensor<T>* bias = nullptr) {
  const detail::AttentionGeometry g =
      detail::attention_geometry(q.shape(), k.shape(), v.shape(), "reference_attention");
  mask.validate(g.B, g.Tq, g.Tk);
  ATTN_CHECK(!bias || bias->shape() == Shape({g.B, g.H, g.Tq, g.Tk}), shape_error,
             "reference_attention: the bias must be [B, H, Tq, Tk] = [", g.B, ", ", g.H, ", ", g.Tq,
             ", ", g.Tk, "], got ", bias->shape());
  ReferenceAttention<T> r{Tensor<T>(Shape{g.B, g.H, g.Tq, g.Dv}),
                          Tensor<T>(Shape{g.B, g.H, g.Tq, g.Tk})};
  // The scaled rows [n, Dh] starting at t[off], in double.
  auto rows = [&](const Tensor<T>& t, index_t off, index_t n, double c) {
    std::vector<double> x(static_cast<std::size_t>(n * g.Dh));
    for (index_t e = 0; e < n * g.Dh; ++e)
      x[static_cast<std::size_t>(e)] = c * static_cast<double>(t[off + e]);
    return x;
  };
  for (index_t b = 0; b < g.B; ++b)
    for (index_t h = 0; h < g.H; ++h) {
      const index_t hk = h / g.group();
      [[maybe_unused]] const double c = detail::feature_input_scale<Score>(g.Dh);
      // Feature maps: φ of every key [Tk, F] and of every query [Tq, F] of this head, one call
      // each (a query row's features depend on that row alone).
      std::vector<double> fk, fq;
      if constexpr (Kernel::feature_map) {
        fk = detail::reference_features(kernel, rows(k, g.k_off(b, hk, 0), g.Tk, c), g.Dh,
                                        FeatureSide::key);
        fq = detail::reference_features(kernel, rows(q, g.q_off(b, h, 0), g.Tq, c), g.Dh,
                                        FeatureSide::query);
      }
      for (index_t i = 0; i < g.Tq; ++i) {
        std::vector<double> kappa(static_cast<std::size_t>(g.Tk), 0.0);
        std::vector<bool> ok(static_cast<std::size_t>(g.Tk));
        for (index_t j = 0; j < g.Tk; ++j)
          ok[static_cast<std::size_t>(j)] = mask.allowed(b, i, j, g.Tq, g.Tk);
        if constexpr (Kernel::feature_map) {
          const std::size_t F = fq.size() / static_cast<std::size_t>(g.Tq);
          const double* fi = fq.data() + static_cast<std::size_t>(i) * F;
          for (index_t j = 0; j < g.Tk; ++j) {
            if (!ok[static_cast<std::size_t>(j)]) continue;
            double s = 0;
            for (std::size_t a = 0; a < F; ++a)
              s += fi[a] * fk[static_cast<std::size_t>(j) * F + a];
            kappa[static_cast<std::size_t>(j)] = s;
          }
        } else {
          std::vector<double> s(static_cast<std::size_t>(g.Tk), 0.0);
          double smax = -std::numeric_limits<double>::infinity();
          const auto position_bias = head_position_bias(score, h, g.H);
          for (index_t j = 0; j < g.Tk; ++j) {
            s[static_cast<std::size_t>(j)] = soft_capped(
                score, score(q.data() + g.q_off(b, h, i), k.data() + g.k_off(b, hk, j), g.Dh) +
                           position_bias(g.query_position(i) - j) +
                           (bias ? static_cast<double>((*bias)(b, h, i, j)) : 0.0));
            if (ok[static_cast<std::size_t>(j)])  // NaN stays: std::max(NaN, x) is NaN
              smax = std::isnan(s[static_cast<std::size_t>(j)])
                         ? s[static_cast<std::size_t>(j)]
                         : std::max(smax, s[static_cast<std::size_t>(j)]);
          }
          for (index_t j = 0; j < g.Tk; ++j) {
            if (!ok[static_cast<std::size_t>(j)]) continue;
            if (std::is_same_v<Kernel, kernel::Softmax> &&
                smax == -std::numeric_limits<double>::infinity())
              continue;  // every allowed score −∞: a row of zeros, as with no allowed key
            // exp(s − max): the same weights as exp(s) after normalising, without overflow.
            if constexpr (std::is_same_v<Kernel, kernel::Softmax>)
              kappa[static_cast<std::size_t>(j)] = std::exp(s[static_cast<std::size_t>(j)] - smax);
            else
              kappa[static_cast<std::size_t>(j)] = kernel.value(s[static_cast<std::size_t>(j)]);
          }
        }
        double z = 0;
        for (const double kv : kappa) z += kv;
        for (index_t j = 0; j < g.Tk; ++j) {
          const double w = z != 0 ? kappa[static_cast<std::size_t>(j)] / z : 0.0;
          r.weights(b, h, i, j) = static_cast<T>(w);
          if (!ok[static_cast<std::size_t>(j)]) continue;  // hidden: not even 0 times its value
          for (index_t d = 0; d < g.Dv; ++d)
            r.out(b, h, i, d) += static_cast<T>(w * static_cast<double>(v[g.v_off(b, hk, j) + d]));
        }
      }
    }
  return r;
}

}  // namespace attn
