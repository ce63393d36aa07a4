// attn/attention/attention.hpp: the Attention<Score, Kernel, Mask> operator on per-head tensors
// q [B, H, Tq, Dh], k [B, Hk, Tk, Dh], v [B, Hk, Tk, Dv]. The path is chosen at compile time:
//   Softmax                          -> online softmax, tiled, masked tiles skipped (fused)
//   other score kernels (Polynomial) -> materialised weights
//   feature maps, mask None, Causal,
//     key-only masks and And of those -> linear attention, O(T F Dv) (masked keys dropped)
//   feature maps, other masks        -> materialised weights of φ(q)·φ(k)
// op.partial(q, k, v) gives a softmax attention's output with its log-sum-exp (partials.hpp);
// op(q, k, v, bias) adds a bias with parameters to the scores of a score kernel and returns its
// gradient too (learned_bias.hpp: T5 buckets, learned ALiBi slopes, dense bias tensors).
// op.materialized(q, k, v) runs the materialised path for any combination (the plain-GEMM
// implementation the fast paths are compared with); it is compiled only where it is called.
// Does not project or split heads; MultiHeadAttention (multi_head.hpp) does.
#pragma once

#include <algorithm>
#include <type_traits>
#include <utility>

#include "kernel.hpp"
#include "learned_bias.hpp"
#include "linear.hpp"
#include "mask.hpp"
#include "materialized.hpp"
#include "online_softmax.hpp"
#include "random_features.hpp"
#include "score.hpp"

namespace attn {

template <ScorePolicy Score = score::ScaledDot, KernelPolicy Kernel = kernel::Softmax,
          MaskPolicy Mask = mask::None>
struct Attention {
  static_assert(
      !Kernel::feature_map || std::is_same_v<Score, score::Dot> ||
          std::is_same_v<Score, score::ScaledDot>,
      "attn: feature-map kernels need an inner-product score (score::Dot or score::ScaledDot)");

  Score score{};
  Kernel kernel{};
  Mask mask{};
  AttentionDropout dropout{};    // on the weights; set p = 0 (or a new seed per step) as needed
  AttentionBackward backward{};  // how the fused path's backward runs (default: by shape)
  // > 0: attend to the first key_length rows of each key/value head of k and v (a decoding cache
  // with spare capacity, read in place); 0: all of them. Score kernels only (not feature maps).
  index_t key_length = 0;

  // True when this combination runs in O(T) memory and time per query row (no T x T matrix).
  static constexpr bool linear_path = Kernel::feature_map && detail::LinearMask<Mask>::ok;

  // o = attention(q, k, v) on the path chosen at compile time (see the top of this file). With
  // `weights`, also writes the [B, H, Tq, Tk] weights (analysis; for feature-map kernels this
  // takes the materialised path).
  template <class T>
  Var<T> operator()(const Var<T>& q, const Var<T>& k, const Var<T>& v,
                    Tensor<T>* weights = nullptr) const {
    check_settings();
    if constexpr (linear_path) {
      // The linear path never forms the weights, so it cannot return or drop them.
      if (weights == nullptr && !dropout.active()) {
        auto [fq, fk] = features(q, k);
        using Linear = detail::LinearMask<Mask>;
        if constexpr (Linear::drop_keys) {  // φ(k_j) = 0 for the keys the mask leaves out
          const detail::AttentionGeometry g = detail::checked_geometry(q, k, v, "attention");
          mask.validate(g.B, g.Tq, g.Tk);
          const index_t F = fk.shape().last();
          Tensor<T> keep(Shape{g.B, g.Hk, g.Tk, F});  // 1 for a kept key, 0 for a dropped one
          for (index_t b = 0; b < g.B; ++b)
            for (index_t j = 0; j < g.Tk; ++j)
              if (Linear::keep(mask, b, j, g.Tq, g.Tk))
                for (index_t hk = 0; hk < g.Hk; ++hk) std::fill_n(&keep(b, hk, j, 0), F, T{1});
          fk = eval(fk * fk.tape().leaf(std::move(keep)));
        }
        return linear_attention(fq, fk, v, Linear::causal);
      }
    }
    return score_kernel_path(q, k, v, weights, static_cast<const LearnedBias<T>*>(nullptr));
  }

  // o = attention(q, k, v) with `bias` added to every score (before the soft cap and the mask)
  // and its parameters' gradient recorded (learned_bias.hpp): the fused path for kernel::Softmax,
  // the materialised one for the other score kernels.
  template <class T>
  Var<T> operator()(const Var<T>& q, const Var<T>& k, const Var<T>& v, const LearnedBias<T>& bias,
                    Tensor<T>* weights = nullptr) const {
    static_assert(!Kernel::feature_map,
                  "attn: a learned score bias needs a score kernel (a feature map has no scores)");
    check_settings();
    return score_kernel_path(q, k, v, weights, &bias);
  }

  // The softmax attention as a partial result: the output and each row's log-sum-exp, both
  // differentiable (partials.hpp; merge_attention combines partials over disjoint key sets).
  // The fused path, kernel::Softmax only.
  // `weights` as for operator().
  template <class T>
  AttentionPartial<T> partial(const Var<T>& q, const Var<T>& k, const Var<T>& v,
                              Tensor<T>* weights = nullptr) const {
    return partial_with(q, k, v, weights, static_cast<const LearnedBias<T>*>(nullptr));
  }
  // The same with a learned bias added to the scores (see operator()).
  template <class T>
  AttentionPartial<T> partial(const Var<T>& q, const Var<T>& k, const Var<T>& v,
                              const LearnedBias<T>& bias, Tensor<T>* weights = nullptr) const {
    return partial_with(q, k, v, weights, &bias);
  }

  // The same attention on the materialised path, for every kernel: all Tq x Tk weights formed,
  // then W V (per head: GEMM, kernel, GEMM: the plain implementation that tests and benchmarks
  // compare operator() with). A member template, so a program that never calls it does not
  // compile it.
  template <class T>
  Var<T> materialized(const Var<T>& q, const Var<T>& k, const Var<T>& v,
                      Tensor<T>* weights = nullptr) const {
    return materialized_with(q, k, v, weights, static_cast<const LearnedBias<T>*>(nullptr));
  }
  // The materialised path with a learned bias (see operator()).
  template <class T>
  Var<T> materialized(const Var<T>& q, const Var<T>& k, const Var<T>& v, const LearnedBias<T>& bias,
                      Tensor<T>* weights = nullptr) const {
    static_assert(!Kernel::feature_map,
                  "attn: a learned score bias needs a score kernel (a feature map has no scores)");
    return materialized_with(q, k, v, weights, &bias);
  }

 private:
  template <class T>
  Var<T> score_kernel_path(const Var<T>& q, const Var<T>& k, const Var<T>& v, Tensor<T>* weights,
                           const LearnedBias<T>* bias) const {
    if constexpr (std::is_same_v<Kernel, kernel::Softmax>)
      return online_softmax_attention(q, k, v, score, mask, weights, dropout, backward, key_length,
                                      bias);
    else
      return materialized_with(q, k, v, weights, bias);
  }

  template <class T>
  AttentionPartial<T> partial_with(const Var<T>& q, const Var<T>& k, const Var<T>& v,
                                   Tensor<T>* weights, const LearnedBias<T>* bias) const {
    static_assert(
        std::is_same_v<Kernel, kernel::Softmax>,
        "attn: a partial result (output and log-sum-exp) exists for kernel::Softmax only");
    check_settings();
    return online_softmax_attention_partial(q, k, v, score, mask, dropout, backward, key_length,
                                            weights, bias);
  }

  template <class T>
  Var<T> materialized_with(const Var<T>& q, const Var<T>& k, const Var<T>& v, Tensor<T>* weights,
                           const LearnedBias<T>* learned) const {
    check_settings();
    if constexpr (Kernel::feature_map) {
      auto [fq, fk] = features(q, k);
      return materialized_attention(fq, fk, v, detail::MaterializedForm{1, 0, 0},
                                    detail::IdentityKernel{}, mask, weights, dropout);
    } else {
      detail::MaterializedForm form{score.alpha(q.shape().last()), Score::beta_q, Score::beta_k};
      if constexpr (HasSoftCap<Score>) {
        detail::check_soft_cap(score.cap, "attention");
        form.soft_cap = score.cap;
      }
      const detail::ScoreBias<Score> bias{score};  // ALiBi's b_h(p_i − p_j); nothing for others
      return materialized_attention(q, k, v, form, kernel, mask, weights, dropout, bias, key_length,
                                    learned);
    }
  }

  void check_settings() const {
    ATTN_CHECK(key_length == 0 || !Kernel::feature_map, value_error, "attention: key_length ",
               key_length, " needs a score kernel; feature maps read whole key tensors");
    dropout.check("attention");
  }

  // φ(c q), φ(c k) of a feature-map kernel, c scaling the inputs to the score (score.hpp).
  template <class T>
  std::pair<Var<T>, Var<T>> features(const Var<T>& q, const Var<T>& k) const {
    const T c = static_cast<T>(detail::feature_input_scale<Score>(q.shape().last()));
    return {feature_map(kernel, eval(c * q), FeatureSide::query),
            feature_map(kernel, eval(c * k), FeatureSide::key)};
  }
};

// attention<Score, Kernel>(q, k, v, mask): the operator as one call.
template <ScorePolicy Score = score::ScaledDot, KernelPolicy Kernel = kernel::Softmax,
          MaskPolicy Mask = mask::None, class T>
Var<T> attention(const Var<T>& q, const Var<T>& k, const Var<T>& v, const Mask& mask = {},
                 Tensor<T>* weights = nullptr) {
  return Attention<Score, Kernel, Mask>{Score{}, Kernel{}, mask}(q, k, v, weights);
}

// The causal and unmasked softmax attention of float and double on both of their paths are
// compiled once in attn::compiled (src/attention.cpp): the fused kernel of the dot family (the
// default scaled dot and every score run as a dot product, detail::DotForm; its output alone and
// as a partial) and the materialised scaled dot; programs linking it (ATTN_COMPILED) do not
// compile them again.
#define ATTN_ATTENTION_PATH_INSTANTIATIONS(PREFIX, T, M)                                         \
  PREFIX Var<T> online_softmax_attention<detail::DotForm, M, T>(                                 \
      const Var<T>&, const Var<T>&, const Var<T>&, const detail::DotForm&, const M&, Tensor<T>*, \
      const AttentionDropout&, const AttentionBackward&, index_t, const LearnedBias<T>*);        \
  PREFIX AttentionPartial<T> online_softmax_attention_partial<detail::DotForm, M, T>(            \
      const Var<T>&, const Var<T>&, const Var<T>&, const detail::DotForm&, const M&,             \
      const AttentionDropout&, const AttentionBackward&, index_t, Tensor<T>*,                    \
      const LearnedBias<T>*);                                                                    \
  PREFIX Var<T>                                                                                  \
  materialized_attention<kernel::Softmax, M, T, detail::ScoreBias<score::ScaledDot>>(            \
      const Var<T>&, const Var<T>&, const Var<T>&, const detail::MaterializedForm&,              \
      const kernel::Softmax&, const M&, Tensor<T>*, const AttentionDropout&,                     \
      const detail::ScoreBias<score::ScaledDot>&, index_t, const LearnedBias<T>*);
// The fused kernels of the negative squared Euclidean and ALiBi scores, float only (what models
// train in), the same two masks.
#define ATTN_ATTENTION_SCORE_INSTANTIATIONS(PREFIX, S, M)                                          \
  PREFIX Var<float> online_softmax_attention<S, M, float>(                                         \
      const Var<float>&, const Var<float>&, const Var<float>&, const S&, const M&, Tensor<float>*, \
      const AttentionDropout&, const AttentionBackward&, index_t, const LearnedBias<float>*);      \
  PREFIX AttentionPartial<float> online_softmax_attention_partial<S, M, float>(                    \
      const Var<float>&, const Var<float>&, const Var<float>&, const S&, const M&,                 \
      const AttentionDropout&, const AttentionBackward&, index_t, Tensor<float>*,                  \
      const LearnedBias<float>*);
// Every MultiHeadAttention on the fused path can take sinks (a run-time setting), so the sink
// op is compiled once too.
#define ATTN_ATTENTION_SINK_INSTANTIATIONS(PREFIX, T) \
  PREFIX AttentionPartial<T> attention_sink<T>(const AttentionPartial<T>&, const Var<T>&);
#define ATTN_ATTENTION_INSTANTIATIONS(PREFIX)                                      \
  ATTN_ATTENTION_SINK_INSTANTIATIONS(PREFIX, float)                                \
  ATTN_ATTENTION_SINK_INSTANTIATIONS(PREFIX, double)                               \
  ATTN_ATTENTION_PATH_INSTANTIATIONS(PREFIX, float, mask::None)                    \
  ATTN_ATTENTION_PATH_INSTANTIATIONS(PREFIX, float, mask::Causal)                  \
  ATTN_ATTENTION_PATH_INSTANTIATIONS(PREFIX, double, mask::None)                   \
  ATTN_ATTENTION_PATH_INSTANTIATIONS(PREFIX, double, mask::Causal)                 \
  ATTN_ATTENTION_SCORE_INSTANTIATIONS(PREFIX, score::NegSqEuclidean, mask::None)   \
  ATTN_ATTENTION_SCORE_INSTANTIATIONS(PREFIX, score::NegSqEuclidean, mask::Causal) \
  ATTN_ATTENTION_SCORE_INSTANTIATIONS(PREFIX, score::Alibi, mask::None)            \
  ATTN_ATTENTION_SCORE_INSTANTIATIONS(PREFIX, score::Alibi, mask::Causal)
#ifdef ATTN_COMPILED
ATTN_ATTENTION_INSTANTIATIONS(extern template)
#endif

}  // namespace attn
