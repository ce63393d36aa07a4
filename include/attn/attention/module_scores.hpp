// attn/attention/module_scores.hpp: the score policies of MultiHeadAttention beyond the plain
// quadratic forms of score.hpp: scores with parameters of their own, scores that transform q and
// k per token before a quadratic form (Bilinear, Rotary, Cosine), the general pairwise form
// (Additive) and the key-free form (Synthesizer); the contract they share (MultiHeadScore).
// Does not run attention or own projections: MultiHeadAttention (multi_head.hpp) creates each
// score's parameters, visits them by name and calls its hooks.
//
// A MultiHeadScore S is one struct with `name` and a `form` (default: quadratic) that decides the
// path at compile time:
//   quadratic    S is a ScorePolicy (score.hpp): the per-head Attention operator computes it on
//                every path (fused online softmax, linear, materialised, CUDA).
//   transformed  S::inner is a ScorePolicy, applied to q' = transform_q(q), k' = transform_k(k);
//                the transforms act on each token alone, so the paths of `inner` run unchanged
//                on q', k', and a decoding cache stores k'. Provides
//                  Var<T> transform_q(Params<T>&, const Var<T>& q, index_t position0) const;
//                  Var<T> transform_k(Params<T>&, const Var<T>& k, index_t position0) const;
//                for q [B, H, T, Dh] (query heads) and k [B, Hk, T, Dh] (key/value heads), row t at
//                absolute position position0 + t.
//   pairwise     Var<T> scores(Params<T>&, const Var<T>& q, const Var<T>& k, const Mask&) const;
//                all scores [B, H, Tq, Tk] of q [B, H, Tq, Dq] and k [B, Hk, Tk, Dq]; entries
//                the mask rules out may hold anything. Materialised path, softmax kernel.
//   key_free     Var<T> scores(Params<T>&, const Var<T>& q, index_t Tk, const Mask&) const;
//                scores [B, H, Tq, Tk] from the queries alone (column j: key position j); there
//                is no key projection. Materialised path, softmax kernel.
// Optional members: `template <class T> struct Params` (default-constructible, constructed as
// Params(const MultiHeadConfig&, Rng&) with the module's resolved config, and visiting its
// Parameters by name with for_each_parameter(f, prefix)); `key_bias = false` (the key projection
// has no bias); `query_name` (the checkpoint name of the query projection, "q_proj" otherwise).
// (A score without Params takes its hooks' parameter argument as a template `P&`.)
// Every form but quadratic also gives its formula literally, in double, for the tests' oracle:
//   double reference(const Params<T>&, h, H, const double* q, const double* k, Dh, p_i, p_j) const;
// (q and k: head h's query and key vectors straight from the projections, k null for key_free;
// p_i, p_j: the positions, query i of Tq at i + Tk − Tq and key j at j).
// Adding a score: one struct here ending in static_assert(MultiHeadScore<…>), and one line in
// tests/attention/test_learned_scores.cpp (docs/attention.md, "Adding a score").
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../autodiff/autodiff.hpp"
#include "mask.hpp"
#include "score.hpp"
#include "score_ops.hpp"

namespace attn {

// A score bias with parameters that MultiHeadAttention owns (learned_bias.hpp): none, T5's
// relative-position buckets, or ALiBi with learned slopes.
enum class LearnedPositionBias { none, t5, alibi };

struct MultiHeadConfig {
  index_t d_model = 0;
  index_t heads = 0;       // required with Heads<dynamic>; must equal N (or be 0) with Heads<N>
  index_t kv_heads = 0;    // key/value heads (grouped query); 0 means one per query head
  double dropout = 0.0;    // on the attention weights, while training
  bool bias = true;        // biases on the projections (and the synthesizer's b2)
  double init_std = 0.02;  // weights ~ N(0, init_std²), biases 0
  std::uint64_t seed = 0;  // initialisation and dropout
  index_t max_length = 0;  // the longest sequence, for scores whose weights depend on it
                           // (score::Synthesizer); 0 when unused
  bool sinks = false;      // a learned sink logit per head in every softmax (attention_sink);
                           // fused softmax path only (quadratic and transformed scores)
  // > 0: score::Synthesizer's w2 ~ U(−r, r) (the problem set's code: 0.001); 0: N(0, init_std²)
  double synthesizer_range = 0.0;
  // A learned score bias, the module's parameter "position_bias": t5 [H, t5_buckets] (0 at the
  // start; t5_bidirectional false for a decoder's buckets) or alibi (slopes [H], the paper's at
  // the start). Score kernels with quadratic or transformed scores only.
  LearnedPositionBias position_bias = LearnedPositionBias::none;
  index_t t5_buckets = 32, t5_max_distance = 128;
  bool t5_bidirectional = true;
  index_t head_dim() const { return heads > 0 ? d_model / heads : 0; }
};

enum class ScoreForm { quadratic, transformed, pairwise, key_free };

namespace detail {

template <class T, class F>
void visit_parameter(F& f, std::string_view prefix, std::string_view name, Parameter<T>& p) {
  std::string full(prefix);
  if (!full.empty()) full += '.';
  full += name;
  f(full, p);
}

// The parameters of a score that has none.
template <class T>
struct NoScoreParams {
  NoScoreParams() = default;
  NoScoreParams(const MultiHeadConfig&, Rng&) {}
  template <class F>
  void for_each_parameter(F&&, std::string_view) {}
};

template <class S, class T>
struct score_params {
  using type = NoScoreParams<T>;
};
template <class S, class T>
requires requires {
  typename S::template Params<T>;
}
struct score_params<S, T> {
  using type = typename S::template Params<T>;
};

}  // namespace detail

template <class S>
constexpr ScoreForm score_form() {
  if constexpr (requires { S::form; })
    return S::form;
  else
    return ScoreForm::quadratic;
}

// The parameters S owns in a module of element type T.
template <class S, class T>
using score_params_t = typename detail::score_params<S, T>::type;

// Whether S's key projection has a bias (when the config asks for biases).
template <class S>
constexpr bool score_key_bias() {
  if constexpr (requires { S::key_bias; })
    return S::key_bias;
  else
    return true;
}

namespace detail {
template <class S, bool = score_form<S>() == ScoreForm::transformed>
struct inner_score {
  using type = S;
};
template <class S>
struct inner_score<S, true> {
  using type = typename S::inner;
};
}  // namespace detail

// The quadratic form the Attention operator computes for S: S itself, or a transformed score's
// inner form.
template <class S>
using inner_score_t = typename detail::inner_score<S>::type;

// The checkpoint name of S's query projection.
template <class S>
constexpr const char* score_query_name() {
  if constexpr (requires { S::query_name; })
    return S::query_name;
  else
    return "q_proj";
}

// What each form of score must provide, one concept per form, so that a score that declares a
// form and misses part of it is rejected with the name of its form's concept. Every form but
// the quadratic one also states its formula for the tests (reference()).
template <class S>
concept QuadraticScore = ScorePolicy<S>;
template <class S>
concept ScoreWithReference = requires(const S& s, const score_params_t<S, double>& p,
                                      const double* q, index_t i) {
  { s.reference(p, i, i, q, q, i, i, i) } -> std::convertible_to<double>;
};
template <class S>
concept TransformedScore = ScorePolicy<typename S::inner> && ScoreWithReference<S> &&
    requires(const S& s, score_params_t<S, float>& p, const Var<float>& x, index_t i) {
  { s.transform_q(p, x, i) } -> std::same_as<Var<float>>;
  { s.transform_k(p, x, i) } -> std::same_as<Var<float>>;
};
template <class S>
concept PairwiseScore = ScoreWithReference<S> &&
    requires(const S& s, score_params_t<S, float>& p, const Var<float>& x, const mask::None& m) {
  { s.scores(p, x, x, m) } -> std::same_as<Var<float>>;
};
template <class S>
concept KeyFreeScore = ScoreWithReference<S> &&
    requires(const S& s, score_params_t<S, float>& p, const Var<float>& x, index_t i,
             const mask::None& m) {
  { s.scores(p, x, i, m) } -> std::same_as<Var<float>>;
};

// A score MultiHeadAttention takes: a name, default-constructible parameters, and what its form
// (score_form) needs.
// clang-format off
template <class S>
concept MultiHeadScore =
    std::copy_constructible<S> && std::default_initializable<S> &&
    std::default_initializable<score_params_t<S, float>> &&
    requires { { S::name } -> std::convertible_to<const char*>; } &&
    (score_form<S>() != ScoreForm::quadratic || QuadraticScore<S>) &&
    (score_form<S>() != ScoreForm::transformed || TransformedScore<S>) &&
    (score_form<S>() != ScoreForm::pairwise || PairwiseScore<S>) &&
    (score_form<S>() != ScoreForm::key_free || KeyFreeScore<S>);
// clang-format on

// The score S gives query vector q and key vector k (k null for key-free scores) of head h of
// `heads`, width d, at positions p_i and p_j, by its formula in double: the tests' oracle.
template <MultiHeadScore S, class P>
double score_reference(const S& s, const P& params, index_t h, index_t heads, const double* q,
                       const double* k, index_t d, index_t pi, index_t pj) {
  if constexpr (score_form<S>() == ScoreForm::quadratic)
    return s(q, k, d) + head_position_bias(s, h, heads)(pi - pj);
  else
    return s.reference(params, h, heads, q, k, d, pi, pj);
}

namespace score {

// Bilinear ("general", Luong, Pham and Manning 2015) per head h:  s_ij = q_iᵀ W_h k_j / √Dh.
// Runs as ScaledDot on q'_i = W_hᵀ q_i (rows: q' = q W_h, one batched GEMM per head), which is
// exact, not an approximation: q_iᵀ W_h k_j = (W_hᵀ q_i)·k_j regroups the same products, so
// every path, mask and kernel of ScaledDot applies, with rounding the only difference from the
// triple sum. Transforming the query side (rather than k' = W_h k) keeps one key per key/value
// head, so grouped-query heads and tied projections work; the decoding cache holds plain keys.
// Parameter bilinear_weight [H, Dh, Dh] (W_h = bilinear_weight[h]), the identity at
// initialisation (the module then computes exactly ScaledDot attention with the same seed).
struct Bilinear {
  static constexpr const char* name = "bilinear";
  static constexpr ScoreForm form = ScoreForm::transformed;
  using inner = ScaledDot;

  template <class T>
  struct Params {
    Parameter<T> bilinear_weight;  // [H, Dh, Dh]

    Params() = default;
    Params(const MultiHeadConfig& c, Rng&) {
      const index_t dh = c.head_dim();
      Tensor<T> eye = Tensor<T>::zeros({c.heads, dh, dh});
      for (index_t h = 0; h < c.heads; ++h)
        for (index_t r = 0; r < dh; ++r) eye(h, r, r) = T{1};
      bilinear_weight = Parameter<T>(std::move(eye));
    }
    template <class F>
    void for_each_parameter(F&& f, std::string_view prefix) {
      attn::detail::visit_parameter(f, prefix, "bilinear_weight", bilinear_weight);
    }
  };

  template <class T>
  Var<T> transform_q(Params<T>& p, const Var<T>& q, index_t) const {
    return per_head_matmul(q, q.tape().param(p.bilinear_weight));  // [B, H, Tq, Dh]
  }
  template <class T>
  Var<T> transform_k(Params<T>&, const Var<T>& k, index_t) const {
    return k;
  }
  template <class T>
  double reference(const Params<T>& p, index_t h, index_t, const double* q, const double* k,
                   index_t d, index_t, index_t) const {
    double s = 0;
    for (index_t a = 0; a < d; ++a)
      for (index_t b = 0; b < d; ++b)
        s += q[a] * static_cast<double>(p.bilinear_weight.value(h, a, b)) * k[b];
    return s / std::sqrt(static_cast<double>(d));
  }
};

// Rotary positions (Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding"):
// q_i and k_j turn by their absolute positions, pair c of the head width by the angle p θ_c with
// θ_c = base^{−2c/Dh}, and then ScaledDot:
//     s_ij = (R_{p_i} q_i)·(R_{p_j} k_j) / √Dh = q_iᵀ R_{p_j − p_i} k_j / √Dh,
// a function of the relative position only, with no parameters and nothing added to the input.
// `pairs` says which coordinates form pair c: adjacent ones (x_{2c}, x_{2c+1}), the paper's, or
// halves (x_c, x_{c+Dh/2}), GPT-NeoX's and Llama's; `base` is Llama's rope_theta; `scaling`
// stretches the frequencies for longer contexts (linear, NTK-aware, YaRN, Llama 3's bands:
// RotaryScaling). Decoding rotates each new key once at its own position and caches it rotated.
// Dh must be even.
struct Rotary {
  static constexpr const char* name = "rotary";
  static constexpr ScoreForm form = ScoreForm::transformed;
  using inner = ScaledDot;
  double base = 10000.0;  // the paper's
  RotaryPairs pairs = RotaryPairs::adjacent;
  RotaryScaling scaling;  // none

  // No parameters; the constructor checks the head width once, where the config is read.
  template <class T>
  struct Params : attn::detail::NoScoreParams<T> {
    Params() = default;
    Params(const MultiHeadConfig& c, Rng&) {
      ATTN_CHECK(c.head_dim() % 2 == 0, value_error,
                 "score::Rotary: the head width d_model / heads = ", c.head_dim(),
                 " must be even (coordinates turn in pairs)");
    }
  };

  template <class T>
  Var<T> transform_q(Params<T>&, const Var<T>& q, index_t position0) const {
    return rotary_rotation(q, position0, base, pairs, scaling);
  }
  template <class T>
  Var<T> transform_k(Params<T>&, const Var<T>& k, index_t position0) const {
    return rotary_rotation(k, position0, base, pairs, scaling);
  }
  template <class T>
  double reference(const Params<T>&, index_t, index_t, const double* q, const double* k, index_t d,
                   index_t pi, index_t pj) const {
    const std::vector<double> thetas = rotary_frequencies(d, base, scaling);
    const double m = rotary_attention_factor(scaling);
    double s = 0;
    for (index_t c = 0; c < d / 2; ++c) {
      const double theta = thetas[static_cast<std::size_t>(c)];
      const double ai = static_cast<double>(pi) * theta, aj = static_cast<double>(pj) * theta;
      const index_t u = pairs == RotaryPairs::adjacent ? 2 * c : c;
      const index_t w = pairs == RotaryPairs::adjacent ? 2 * c + 1 : c + d / 2;
      const double q0 = q[u] * std::cos(ai) - q[w] * std::sin(ai);
      const double q1 = q[u] * std::sin(ai) + q[w] * std::cos(ai);
      const double k0 = k[u] * std::cos(aj) - k[w] * std::sin(aj);
      const double k1 = k[u] * std::sin(aj) + k[w] * std::cos(aj);
      s += q0 * k0 + q1 * k1;
    }
    return m * m * s / std::sqrt(static_cast<double>(d));
  }
};

// The negative squared Euclidean score at the scaled dot product's temperature:
//     s_ij = −‖q_i − k_j‖² / √Dh,
// run as NegSqEuclidean on q' = q / Dh^{1/4} and k' = k / Dh^{1/4} (‖q' − k'‖² = ‖q − k‖² / √Dh),
// so every path of NegSqEuclidean applies and decoding caches k'. ScaledDot divides q·k by √Dh
// to keep the scores of unit-variance vectors near unit variance as Dh grows; NegSqEuclidean
// does not, so comparing the two at several head widths mixes the score's shape with its
// temperature, and this score takes the temperature out. No parameters.
struct ScaledNegSqEuclidean {
  static constexpr const char* name = "scaled_neg_sq_euclidean";
  static constexpr ScoreForm form = ScoreForm::transformed;
  using inner = NegSqEuclidean;

  template <class P, class T>
  Var<T> transform_q(P&, const Var<T>& q, index_t) const {
    return scaled(q);
  }
  template <class P, class T>
  Var<T> transform_k(P&, const Var<T>& k, index_t) const {
    return scaled(k);
  }
  template <class P>
  double reference(const P&, index_t, index_t, const double* q, const double* k, index_t d, index_t,
                   index_t) const {
    double s = 0;
    for (index_t c = 0; c < d; ++c) s += (q[c] - k[c]) * (q[c] - k[c]);
    return -s / std::sqrt(static_cast<double>(d));
  }

 private:
  template <class T>
  static Var<T> scaled(const Var<T>& x) {  // x [B, H, T, Dh] times Dh^{-1/4}
    return x * static_cast<T>(std::pow(static_cast<double>(x.dim(3)), -0.25));
  }
};

// A learned scale on q and k before the score Inner (and before a kernel's feature map):
//     s_ij = Inner(g q_i, g k_j),   g = g_m of key/value head m (query head h: m = h / (H / Hk)).
// Under softmax it is a learned inverse temperature for the scaled dot product (g² q·k/√Dh) and
// the negative squared Euclidean distance (−g²‖q − k‖²); under a feature-map kernel such as
// elu+1 it sets how far into φ's non-linear range q and k reach. The projections could learn the
// same lengths, but weight decay pulls them down with their weights, where g (a vector) is not
// decayed under attn's default rule. Parameter head_scale [Hk] (one per key/value head, so
// grouped-query heads share their key's), starting at 1: the module then computes Inner's
// attention exactly.
template <ScorePolicy Inner>
struct HeadScaled {
  static_assert(!HasPositionBias<Inner>,
                "attn: score::HeadScaled scales q and k, not a position bias; give it a score "
                "without one");
  static constexpr const char* name = "head_scaled";
  static constexpr ScoreForm form = ScoreForm::transformed;
  using inner = Inner;

  template <class T>
  struct Params {
    Parameter<T> head_scale;  // [Hk]

    Params() = default;
    Params(const MultiHeadConfig& c, Rng&)
        : head_scale(Tensor<T>(Shape{c.kv_heads > 0 ? c.kv_heads : c.heads}, T{1})) {}
    template <class F>
    void for_each_parameter(F&& f, std::string_view prefix) {
      attn::detail::visit_parameter(f, prefix, "head_scale", head_scale);
    }
  };

  template <class T>
  Var<T> transform_q(Params<T>& p, const Var<T>& q, index_t) const {
    return head_scale(q, q.tape().param(p.head_scale));
  }
  template <class T>
  Var<T> transform_k(Params<T>& p, const Var<T>& k, index_t) const {
    return head_scale(k, k.tape().param(p.head_scale));
  }
  template <class T>
  double reference(const Params<T>& p, index_t h, index_t heads, const double* q, const double* k,
                   index_t d, index_t, index_t) const {
    const index_t groups = p.head_scale.value.numel();
    const double g = static_cast<double>(p.head_scale.value[h / (heads / groups)]);
    std::vector<double> qs(static_cast<std::size_t>(d)), ks(static_cast<std::size_t>(d));
    for (index_t c = 0; c < d; ++c) {
      qs[static_cast<std::size_t>(c)] = g * q[c];
      ks[static_cast<std::size_t>(c)] = g * k[c];
    }
    return Inner{}(qs.data(), ks.data(), d);
  }
};

// Cosine similarity times a learned per-head scale (query-key normalisation):
//     s_ij = g_h (q_i / ‖q_i‖)·(k_j / ‖k_j‖),
// run as Dot on q' = g_h q/‖q‖ and k' = k/‖k‖ (a zero vector stays zero). The scores are bounded
// by |g_h|, so no head can saturate its softmax by growing its projections. Parameter
// cosine_scale [H] (g_h), starting at √Dh: for q and k with unit-variance coordinates
// (‖q‖ ≈ ‖k‖ ≈ √Dh) the scores then start where ScaledDot's would.
struct Cosine {
  static constexpr const char* name = "cosine";
  static constexpr ScoreForm form = ScoreForm::transformed;
  using inner = Dot;

  template <class T>
  struct Params {
    Parameter<T> cosine_scale;  // [H]

    Params() = default;
    Params(const MultiHeadConfig& c, Rng&)
        : cosine_scale(Tensor<T>(Shape{c.heads}, static_cast<T>(std::sqrt(double(c.head_dim()))))) {
    }
    template <class F>
    void for_each_parameter(F&& f, std::string_view prefix) {
      attn::detail::visit_parameter(f, prefix, "cosine_scale", cosine_scale);
    }
  };

  template <class T>
  Var<T> transform_q(Params<T>& p, const Var<T>& q, index_t) const {
    const Var<T> g = q.tape().param(p.cosine_scale);
    return unit_rows(q, &g);
  }
  template <class T>
  Var<T> transform_k(Params<T>&, const Var<T>& k, index_t) const {
    return unit_rows(k);
  }
  template <class T>
  double reference(const Params<T>& p, index_t h, index_t, const double* q, const double* k,
                   index_t d, index_t, index_t) const {
    double qk = 0, qq = 0, kk = 0;
    for (index_t c = 0; c < d; ++c) {
      qk += q[c] * k[c];
      qq += q[c] * q[c];
      kk += k[c] * k[c];
    }
    if (qq == 0 || kk == 0) return 0.0;
    return static_cast<double>(p.cosine_scale.value[h]) * qk / std::sqrt(qq * kk);
  }
};

// Additive (Bahdanau, Cho and Bengio 2015; the "MLP" score) per head h, hidden width Da = Dh:
//     s_ij = w_hᵀ tanh(a_i + c_j),   a = x W₁ᵃᵀ + b₁ (the query projection),
//                                    c = m W₁ᵇᵀ      (the key projection, without bias),
// the lecture's w₂ᵀ tanh(W₁ [q; k]) with W₁ [q; k] = W₁ᵃ q + W₁ᵇ k: a separate query projection
// in front of W₁ᵃ would compose with it into one matrix, so q_proj IS W₁ᵃ and k_proj IS W₁ᵇ (a
// second bias would only duplicate b₁). One pairwise op, additive_scores (autodiff/pairwise.hpp),
// evaluates the B·H·Tq·Tk·Da tanh's, skipping pairs the mask rules out. Grouped-query heads: query
// head h pairs with key/value head h / (H / Hk). Parameter score_weight [H, Dh] (w_h), drawn
// N(0, init_std²) after the module's projections.
struct Additive {
  static constexpr const char* name = "additive";
  static constexpr ScoreForm form = ScoreForm::pairwise;
  static constexpr bool key_bias = false;

  template <class T>
  struct Params {
    Parameter<T> score_weight;  // [H, Dh]

    Params() = default;
    Params(const MultiHeadConfig& c, Rng& rng)
        : score_weight(Tensor<T>::randn({c.heads, c.head_dim()}, rng, 0.0, c.init_std)) {}
    template <class F>
    void for_each_parameter(F&& f, std::string_view prefix) {
      attn::detail::visit_parameter(f, prefix, "score_weight", score_weight);
    }
  };

  template <class T, class Mask>
  Var<T> scores(Params<T>& p, const Var<T>& a, const Var<T>& c, const Mask& mask) const {
    return additive_scores(a, c, a.tape().param(p.score_weight), mask);  // [B, H, Tq, Tk]
  }
  template <class T>
  double reference(const Params<T>& p, index_t h, index_t, const double* q, const double* k,
                   index_t d, index_t, index_t) const {
    double s = 0;
    for (index_t c = 0; c < d; ++c)
      s += static_cast<double>(p.score_weight.value(h, c)) * std::tanh(q[c] + k[c]);
    return s;
  }
};

// The dense synthesizer (Tay et al. 2020, "Synthesizer: Rethinking Self-Attention in Transformer
// Models", in the form of XCS224N problem set 5): each head's score row comes from its own token
// alone, with no key:
//     s_ij = ReLU(x_i A_h + b₁,h) B_h[:, j] + b₂[j],   j < Tk <= ℓ = config.max_length,
// where x A_h + b₁,h is head h's slice of the query projection (checkpoint name w1, as in the
// problem set's Linear(d, d)). Column j is B_h's column j whatever Tk is, so truncating to the
// current length is consistent and decoding position p needs only its own row and the cached
// values. Parameters w2 [H, Dh, ℓ] (B_h = w2[h], ~ N(0, init_std²), or U(−r, r) with
// r = config.synthesizer_range > 0) and b2 [ℓ] (b₂, shared by the heads as in the problem set's
// formula (3), zero at the start; absent with config.bias = false), drawn in the key projection's
// place. There is no cross-attention (no key to take from a memory).
struct Synthesizer {
  static constexpr const char* name = "synthesizer";
  static constexpr ScoreForm form = ScoreForm::key_free;
  static constexpr const char* query_name = "w1";

  template <class T>
  struct Params {
    Parameter<T> w2;  // [H, Dh, ℓ]
    Parameter<T> b2;  // [ℓ], or [0] without biases
    bool has_bias = true;

    Params() = default;
    Params(const MultiHeadConfig& c, Rng& rng) : has_bias(c.bias) {
      ATTN_CHECK(c.max_length > 0, value_error,
                 "score::Synthesizer: config.max_length must be positive (the longest sequence; "
                 "w2 has one column per position), got ",
                 c.max_length);
      ATTN_CHECK(c.synthesizer_range >= 0, value_error,
                 "score::Synthesizer: config.synthesizer_range must be >= 0, got ",
                 c.synthesizer_range);
      const Shape shape{c.heads, c.head_dim(), c.max_length};
      const double r = c.synthesizer_range;
      w2 = Parameter<T>(r > 0 ? Tensor<T>::uniform(shape, rng, -r, r)
                              : Tensor<T>::randn(shape, rng, 0.0, c.init_std));
      b2 = Parameter<T>(Tensor<T>::zeros({c.bias ? c.max_length : 0}));
    }
    index_t max_length() const { return w2.shape()[2]; }
    template <class F>
    void for_each_parameter(F&& f, std::string_view prefix) {
      attn::detail::visit_parameter(f, prefix, "w2", w2);
      if (has_bias) attn::detail::visit_parameter(f, prefix, "b2", b2);
    }
  };

  template <class T, class Mask>
  Var<T> scores(Params<T>& p, const Var<T>& q, index_t tk, const Mask&) const {
    ATTN_CHECK(tk <= p.max_length(), shape_error, "score::Synthesizer: ", tk,
               " key positions, more than config.max_length = ", p.max_length());
    Tape<T>& tape = q.tape();
    const Var<T> b = slice(tape.param(p.w2), 0, tk);         // [H, Dh, Tk]
    Var<T> s = per_head_matmul(Var<T>(relu(q)), b);          // [B, H, Tq, Tk]
    if (p.has_bias) s = s + slice(tape.param(p.b2), 0, tk);  // b₂[:Tk] on every row
    return s;
  }
  template <class T>
  double reference(const Params<T>& p, index_t h, index_t, const double* q, const double*,
                   index_t d, index_t, index_t pj) const {
    double s = p.has_bias ? static_cast<double>(p.b2.value[pj]) : 0.0;
    for (index_t c = 0; c < d; ++c)
      s += std::max(0.0, q[c]) * static_cast<double>(p.w2.value(h, c, pj));
    return s;
  }
};

}  // namespace score

static_assert(MultiHeadScore<score::Dot>);
static_assert(MultiHeadScore<score::ScaledDot>);
static_assert(MultiHeadScore<score::NegSqEuclidean>);
static_assert(MultiHeadScore<score::Alibi>);
static_assert(MultiHeadScore<score::Bilinear>);
static_assert(MultiHeadScore<score::Rotary>);
static_assert(MultiHeadScore<score::Cosine>);
static_assert(MultiHeadScore<score::ScaledNegSqEuclidean>);
static_assert(MultiHeadScore<score::HeadScaled<score::ScaledDot>>);
static_assert(MultiHeadScore<score::Additive>);
static_assert(MultiHeadScore<score::Synthesizer>);

}  // namespace attn
