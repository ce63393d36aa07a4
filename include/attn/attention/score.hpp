// attn/attention/score.hpp: the score functions s(q, k) the attention operator computes itself:
// quadratic forms of q and k, plus an optional bias that depends on the two positions (ALiBi).
// Does not hold parameters or transform q and k: scores that do (Bilinear, Rotary, Cosine,
// Additive, Synthesizer) are in module_scores.hpp, and MultiHeadAttention applies them.
//
// A score policy (ScorePolicy) is the quadratic form
//     s(q, k) = alpha(d) q·k + beta_q ‖q‖² + beta_k ‖k‖²  [+ b_h(p_i − p_j)],
// which covers the dot-product family and lets every path compute all T² scores with one GEMM
// plus two vectors of norms. It provides alpha(d), beta_q, beta_k and a name, and the reference
// path evaluates it literally through operator()(q, k, d).
//
// Optionally it also provides `position_bias(h, H)`, which returns a small callable b(δ) of the
// distance δ = p_i − p_j between the query's and the key's positions (query i of Tq sits at
// position i + Tk − Tq, key j at j: AttentionGeometry::query_position). The fused kernel adds
// b(δ) to each score inside its tile loop, so no T×T bias tensor ever exists; b has no
// parameters (its gradient is not computed). Both are ATTN_HOST_DEVICE, for the CUDA blocks.
#pragma once

#include <cmath>
#include <concepts>
#include <type_traits>

#include "../core/host_device.hpp"
#include "../core/shape.hpp"

namespace attn {

template <class S>
concept ScorePolicy = std::copy_constructible<S> &&
    requires(const S& s, const double* q, index_t d) {
  { s.alpha(d) } -> std::convertible_to<double>;
  { S::beta_q } -> std::convertible_to<double>;
  { S::beta_k } -> std::convertible_to<double>;
  { s(q, q, d) } -> std::convertible_to<double>;
  { S::name } -> std::convertible_to<const char*>;
};

// A score with a position bias (see above); b(δ) is added to the score of every allowed pair.
template <class S>
concept HasPositionBias = requires(const S& s, index_t h) {
  { s.position_bias(h, h)(h) } -> std::convertible_to<double>;
};

// A score with a soft cap (score::SoftCap): every path maps its score, the position bias
// included, through soft_capped() before masking.
template <class S>
concept HasSoftCap = requires(const S& s) {
  { s.cap } -> std::convertible_to<double>;
};

// x → cap · tanh(x / cap) for a score with a soft cap, x itself for the others.
template <class S, class T>
ATTN_HOST_DEVICE T soft_capped(const S& s, T x) {
  if constexpr (HasSoftCap<S>)
    return static_cast<T>(s.cap) * std::tanh(x / static_cast<T>(s.cap));
  else
    return x;
}

namespace score {

namespace detail {
template <class T>
ATTN_HOST_DEVICE double dot(const T* a, const T* b, index_t d) {
  double s = 0;
  for (index_t i = 0; i < d; ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return s;
}
}  // namespace detail

// s = q·k (Luong's "dot").
struct Dot {
  static constexpr const char* name = "dot";
  static constexpr double beta_q = 0, beta_k = 0;
  ATTN_HOST_DEVICE double alpha(index_t) const { return 1.0; }
  template <class T>
  ATTN_HOST_DEVICE double operator()(const T* q, const T* k, index_t d) const {
    return detail::dot(q, k, d);
  }
};

// s = q·k / √d (Vaswani et al.): keeps the score variance near 1 for unit-variance q and k,
// so softmax does not saturate as d grows. The default.
struct ScaledDot {
  static constexpr const char* name = "scaled_dot";
  static constexpr double beta_q = 0, beta_k = 0;
  ATTN_HOST_DEVICE double alpha(index_t d) const { return 1.0 / std::sqrt(static_cast<double>(d)); }
  template <class T>
  ATTN_HOST_DEVICE double operator()(const T* q, const T* k, index_t d) const {
    return detail::dot(q, k, d) * alpha(d);
  }
};

// s = −‖q − k‖² = 2 q·k − ‖q‖² − ‖k‖² (the Stolen Attention study's fix: a key inside the convex
// hull of the others can still win the softmax). Computed with a GEMM, never a pairwise loop;
// under softmax the −‖q‖² term is the same for every key of a row and cancels, which the fused
// path uses.
struct NegSqEuclidean {
  static constexpr const char* name = "neg_sq_euclidean";
  static constexpr double beta_q = -1, beta_k = -1;
  ATTN_HOST_DEVICE double alpha(index_t) const { return 2.0; }
  template <class T>
  ATTN_HOST_DEVICE double operator()(const T* q, const T* k, index_t d) const {
    double s = 0;
    for (index_t i = 0; i < d; ++i) {
      const double diff = static_cast<double>(q[i]) - static_cast<double>(k[i]);
      s += diff * diff;
    }
    return -s;
  }
};

// ALiBi (Press, Smith and Lewis, "Train Short, Test Long: Attention with Linear Biases Enables
// Input Length Extrapolation"): no position is added to the input; instead head h of H adds
//     b_h(δ) = −m_h · |δ|,   δ = p_i − p_j,
// to the scaled dot product q·k/√d. Under a causal mask δ ≥ 0 and this is the paper's
// −m_h (i − j); under other masks it is the symmetric variant (a key as far in the future costs
// as much as one as far in the past); alpha, beta and the literal q·k/√d are ScaledDot's. The
// slopes are the paper's geometric sequence: for H a power of two m_h = 2^{−8(h+1)/H} (h = 0 … H −
// 1; 8 heads: 1/2, 1/4, …, 1/256); otherwise the H' = 2^⌊log₂ H⌋ slopes of H' heads, then every
// other slope of 2H' heads (the odd powers 2^{−4(2c+1)/H'}), c = 0 … H − H' − 1, as the paper's
// reference code extends them.
struct Alibi : ScaledDot {
  static constexpr const char* name = "alibi";

  // m_h, the slope of head h of `heads`.
  ATTN_HOST_DEVICE static double slope(index_t h, index_t heads) {
    index_t base = 1;  // H' = 2^⌊log₂ H⌋
    while (base * 2 <= heads) base *= 2;
    if (h < base) return std::exp2(-8.0 * static_cast<double>(h + 1) / static_cast<double>(base));
    return std::exp2(-4.0 * static_cast<double>(2 * (h - base) + 1) / static_cast<double>(base));
  }
  struct Bias {
    double slope;
    ATTN_HOST_DEVICE double operator()(index_t distance) const {
      return -slope * static_cast<double>(distance < 0 ? -distance : distance);
    }
  };
  ATTN_HOST_DEVICE Bias position_bias(index_t h, index_t heads) const { return {slope(h, heads)}; }
};

// Logit soft-capping (Gemma Team, "Gemma 2: Improving Open Language Models at a Practical Size"):
// the score of S, its position bias included, becomes cap · tanh(s / cap) before masking, so no
// logit leaves (−cap, cap) and its gradient fades smoothly near the cap instead of the softmax
// saturating. cap > 0 (Gemma 2 uses 50 on its attention logits). operator()(q, k, d) stays S's,
// uncapped: every path applies the cap after adding the bias (attn::soft_capped). S's beta_q must
// be 0: the fused kernels leave beta_q ‖q‖² out of the scores, which the cap would not let cancel.
template <ScorePolicy S>
struct SoftCap : S {
  static_assert(S::beta_q == 0,
                "attn: soft-capping needs a score without a beta_q ‖q‖² term (the fused kernels "
                "leave it out, and under the cap it no longer cancels)");
  static constexpr const char* name = "soft_cap";
  double cap = 50.0;
};

}  // namespace score

// The position bias of score S for head h of `heads` as a callable of the distance p_i − p_j;
// 0 for scores without one.
struct NoPositionBias {
  ATTN_HOST_DEVICE double operator()(index_t) const { return 0.0; }
};
template <ScorePolicy S>
ATTN_HOST_DEVICE auto head_position_bias(const S& s, index_t h, index_t heads) {
  if constexpr (HasPositionBias<S>)
    return s.position_bias(h, heads);
  else
    return NoPositionBias{};
}

// ‖x‖² accumulated in A: the ‖k‖² of NegSqEuclidean-like scores, computed by this one function
// in the CPU fused kernel (online_softmax.hpp) and the CUDA block programs (flash_block.hpp).
template <class A, class T>
ATTN_HOST_DEVICE A squared_norm(const T* x, index_t d) {
  A n = 0;
  for (index_t i = 0; i < d; ++i) n += static_cast<A>(x[i]) * static_cast<A>(x[i]);
  return n;
}

// One score from its parts, s = alpha q·k + beta_q ‖q‖² + beta_k ‖k‖², in the type A the caller
// accumulates in (float on a GPU). The tiled kernels compute the q·k of a whole tile at once and
// finish each element with this; tests hold it equal to the policy's operator()(q, k, d).
template <ScorePolicy S, class A>
ATTN_HOST_DEVICE A score_from_parts(A alpha, A qk, A qq, A kk) {
  return alpha * qk + static_cast<A>(S::beta_q) * qq + static_cast<A>(S::beta_k) * kk;
}

namespace detail {

// Throws value_error unless a soft cap (score::SoftCap; 0 or less: none, for the materialised
// form) is positive and finite; `op` names the operation.
inline void check_soft_cap(double cap, const char* op) {
  ATTN_CHECK(cap > 0 && std::isfinite(cap), value_error, op,
             ": the soft cap must be positive and finite, got ", cap);
}
template <ScorePolicy S>
void check_score(const S& s, const char* op) {
  if constexpr (HasSoftCap<S>) check_soft_cap(s.cap, op);
}
// The cap of a soft-capped score, checked; 0 for the others (what the CUDA block programs take).
template <ScorePolicy S>
double soft_cap_of(const S& s, const char* op) {
  if constexpr (HasSoftCap<S>) {
    check_soft_cap(s.cap, op);
    return s.cap;
  } else {
    return 0.0;
  }
}

// Feature maps read q and k scaled so that φ(q)·φ(k) approximates κ of the score: by d^{-1/4}
// each under ScaledDot (together 1/√d), unscaled under Dot.
template <ScorePolicy Score>
double feature_input_scale(index_t d) {
  if constexpr (std::is_same_v<Score, score::ScaledDot>)
    return std::pow(static_cast<double>(d), -0.25);
  else
    return 1.0;
}

}  // namespace detail

static_assert(ScorePolicy<score::Dot>);
static_assert(ScorePolicy<score::ScaledDot>);
static_assert(ScorePolicy<score::NegSqEuclidean>);
static_assert(ScorePolicy<score::Alibi> && HasPositionBias<score::Alibi>);
static_assert(ScorePolicy<score::SoftCap<score::ScaledDot>> &&
              HasSoftCap<score::SoftCap<score::ScaledDot>>);

}  // namespace attn
