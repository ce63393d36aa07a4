// attn/attention/reference.hpp: attention by its definition, in plain loops, for every
// Score x Kernel x Mask combination: the oracle every fast path is tested against.
// Does not record anything on a tape and is O(Tq Tk) in time and memory; use Attention for work.
//
//   o_i = Σ_j w_ij v_j,   w_ij = κ(q_i, k_j) / Σ_l κ(q_i, k_l)   over the keys the mask allows,
//
// with κ = exp(s) (Softmax), s^C (Polynomial<C>) or φ(q)·φ(k) (feature maps), s = the score's
// operator()(q, k, d) plus its position bias b_h(p_i − p_j) if it has one, and o_i = 0 when no
// key is allowed or the normaliser is 0. Includes the policies and core only, never the paths it
// checks.
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

// Feature maps read q and k scaled so that φ(q)·φ(k) approximates κ of the score: by d^{-1/4}
// each under ScaledDot (together 1/√d), unscaled under Dot.
template <ScorePolicy Score>
double feature_input_scale(index_t d) {
  if constexpr (std::is_same_v<Score, score::ScaledDot>)
    return std::pow(static_cast<double>(d), -0.25);
  else
    return 1.0;
}

// φ(x) for the feature-map kernels, in double. For RandomFeatures, `shift` is the max
// subtracted inside the exponential (it cancels in the normalisation).
template <class K>
std::vector<double> feature_map(const K& kernel, const std::vector<double>& x,
                                const Tensor<double>& r, double shift) {
  std::vector<double> f;
  if constexpr (std::is_same_v<K, kernel::EluPlusOne>) {
    for (const double xi : x) f.push_back(xi > 0 ? xi + 1 : std::exp(xi));
  } else if constexpr (std::is_same_v<K, kernel::Relu>) {
    for (const double xi : x) f.push_back(xi > 0 ? xi : 0);
  } else {
    double n2 = 0;
    for (const double xi : x) n2 += xi * xi;
    const auto F = kernel.features;
    for (index_t a = 0; a < F; ++a) {
      double p = 0;
      for (std::size_t j = 0; j < x.size(); ++j) p += r(a, static_cast<index_t>(j)) * x[j];
      f.push_back(std::exp(p - n2 / 2 - shift) / std::sqrt(static_cast<double>(F)));
    }
  }
  return f;
}

}  // namespace detail

template <ScorePolicy Score, KernelPolicy Kernel, MaskPolicy Mask, class T>
ReferenceAttention<T> reference_attention(const Tensor<T>& q, const Tensor<T>& k,
                                          const Tensor<T>& v, const Score& score = {},
                                          const Kernel& kernel = {}, const Mask& mask = {}) {
  const detail::AttentionGeometry g =
      detail::attention_geometry(q.shape(), k.shape(), v.shape(), "reference_attention");
  mask.validate(g.B, g.Tq, g.Tk);
  ReferenceAttention<T> r{Tensor<T>(Shape{g.B, g.H, g.Tq, g.Dv}),
                          Tensor<T>(Shape{g.B, g.H, g.Tq, g.Tk})};
  Tensor<double> rf;
  if constexpr (std::is_same_v<Kernel, kernel::RandomFeatures>)
    rf = random_feature_matrix<double>(kernel.features, g.Dh, kernel.seed);
  auto vec = [&](const Tensor<T>& t, index_t off) {
    std::vector<double> x(static_cast<std::size_t>(g.Dh));
    for (index_t d = 0; d < g.Dh; ++d)
      x[static_cast<std::size_t>(d)] = static_cast<double>(t[off + d]);
    return x;
  };
  for (index_t b = 0; b < g.B; ++b)
    for (index_t h = 0; h < g.H; ++h) {
      const index_t hk = h / g.group();
      for (index_t i = 0; i < g.Tq; ++i) {
        std::vector<double> kappa(static_cast<std::size_t>(g.Tk), 0.0);
        std::vector<bool> ok(static_cast<std::size_t>(g.Tk));
        for (index_t j = 0; j < g.Tk; ++j)
          ok[static_cast<std::size_t>(j)] = mask.allowed(b, i, j, g.Tq, g.Tk);
        if constexpr (Kernel::feature_map) {
          const double c = detail::feature_input_scale<Score>(g.Dh);
          auto scaled = [&](std::vector<double> x) {
            for (double& xi : x) xi *= c;
            return x;
          };
          // RandomFeatures stabiliser: the max of R x over this query, and over all keys.
          double qshift = 0, kshift = 0;
          if constexpr (std::is_same_v<Kernel, kernel::RandomFeatures>) {
            auto maxproj = [&](const std::vector<double>& x) {
              double m = -std::numeric_limits<double>::infinity();
              for (index_t a = 0; a < kernel.features; ++a) {
                double p = 0;
                for (index_t d = 0; d < g.Dh; ++d) p += rf(a, d) * x[static_cast<std::size_t>(d)];
                m = std::max(m, p);
              }
              return m;
            };
            qshift = maxproj(scaled(vec(q, g.q_off(b, h, i))));
            kshift = -std::numeric_limits<double>::infinity();
            for (index_t j = 0; j < g.Tk; ++j)
              kshift = std::max(kshift, maxproj(scaled(vec(k, g.k_off(b, hk, j)))));
          }
          const auto fq = detail::feature_map(kernel, scaled(vec(q, g.q_off(b, h, i))), rf, qshift);
          for (index_t j = 0; j < g.Tk; ++j) {
            if (!ok[static_cast<std::size_t>(j)]) continue;
            const auto fk =
                detail::feature_map(kernel, scaled(vec(k, g.k_off(b, hk, j))), rf, kshift);
            double s = 0;
            for (std::size_t a = 0; a < fq.size(); ++a) s += fq[a] * fk[a];
            kappa[static_cast<std::size_t>(j)] = s;
          }
        } else {
          std::vector<double> s(static_cast<std::size_t>(g.Tk), 0.0);
          double smax = -std::numeric_limits<double>::infinity();
          const auto position_bias = head_position_bias(score, h, g.H);
          for (index_t j = 0; j < g.Tk; ++j) {
            s[static_cast<std::size_t>(j)] =
                score(q.data() + g.q_off(b, h, i), k.data() + g.k_off(b, hk, j), g.Dh) +
                position_bias(g.query_position(i) - j);
            if (ok[static_cast<std::size_t>(j)])
              smax = std::max(smax, s[static_cast<std::size_t>(j)]);
          }
          for (index_t j = 0; j < g.Tk; ++j) {
            if (!ok[static_cast<std::size_t>(j)]) continue;
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
          for (index_t d = 0; d < g.Dv; ++d)
            r.out(b, h, i, d) += static_cast<T>(w * static_cast<double>(v[g.v_off(b, hk, j) + d]));
        }
      }
    }
  return r;
}

}  // namespace attn
