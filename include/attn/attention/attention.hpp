// attn/attention/attention.hpp: the Attention<Score, Kernel, Mask> operator on per-head tensors
// q [B, H, Tq, Dh], k [B, Hk, Tk, Dh], v [B, Hk, Tk, Dv]. The path is chosen at compile time:
//   Softmax                          -> online softmax, tiled, masked tiles skipped (fused)
//   other score kernels (Polynomial) -> materialised weights
//   feature maps, mask None / Causal -> linear attention, O(T F Dv)
//   feature maps, other masks        -> materialised weights of φ(q)·φ(k)
// Does not project or split heads; MultiHeadAttention (multi_head.hpp) does.
#pragma once

#include <type_traits>

#include "kernel.hpp"
#include "linear.hpp"
#include "mask.hpp"
#include "materialized.hpp"
#include "online_softmax.hpp"
#include "random_features.hpp"
#include "reference.hpp"
#include "score.hpp"

namespace attn {

// Which implementation runs: the compile-time choice above, or the materialised one for every
// kernel (the plain-GEMM path; tests compare the two).
enum class AttentionPath { automatic, materialized };

template <ScorePolicy Score = score::ScaledDot, KernelPolicy Kernel = kernel::Softmax,
          MaskPolicy Mask = mask::None>
struct Attention {
  static_assert(
      !Kernel::feature_map || std::is_same_v<Score, score::Dot> ||
          std::is_same_v<Score, score::ScaledDot>,
      "attn: feature-map kernels need an inner-product score (score::Dot or score::ScaledDot)");

  static_assert(
      !Kernel::feature_map || std::is_same_v<Kernel, kernel::EluPlusOne> ||
          std::is_same_v<Kernel, kernel::Relu> || std::is_same_v<Kernel, kernel::RandomFeatures>,
      "attn: Attention runs the built-in feature maps (EluPlusOne, Relu, RandomFeatures); a new "
      "feature map needs its own branch in Attention::operator()");

  Score score{};
  Kernel kernel{};
  Mask mask{};
  AttentionPath path = AttentionPath::automatic;
  AttentionDropout dropout{};    // on the weights; set p = 0 (or a new seed per step) as needed
  AttentionBackward backward{};  // how the fused path's backward runs (default: by shape)
  // > 0: attend to the first key_length rows of each key/value head of k and v (a decoding cache
  // with spare capacity, read in place); 0: all of them. Score kernels only (not feature maps).
  index_t key_length = 0;

  // True when this combination runs in O(T) memory and time per query row (no T x T matrix).
  static constexpr bool linear_path = Kernel::feature_map && (std::is_same_v<Mask, mask::None> ||
                                                              std::is_same_v<Mask, mask::Causal>);

  // o = attention(q, k, v). With `weights`, also writes the [B, H, Tq, Tk] weights (analysis;
  // for feature-map kernels this takes the materialised path).
  template <class T>
  Var<T> operator()(const Var<T>& q, const Var<T>& k, const Var<T>& v,
                    Tensor<T>* weights = nullptr) const {
    ATTN_CHECK(key_length == 0 || !Kernel::feature_map, value_error, "attention: key_length ",
               key_length, " needs a score kernel; feature maps read whole key tensors");
    if constexpr (Kernel::feature_map) {
      const T c = static_cast<T>(detail::feature_input_scale<Score>(q.shape().last()));
      Var<T> fq, fk;
      if constexpr (std::is_same_v<Kernel, kernel::EluPlusOne>) {
        fq = elu(c * q) + T{1};
        fk = elu(c * k) + T{1};
      } else if constexpr (std::is_same_v<Kernel, kernel::Relu>) {
        fq = relu(c * q);
        fk = relu(c * k);
      } else {
        const Var<T> r =
            q.tape().leaf(random_feature_matrix<T>(kernel.features, q.shape().last(), kernel.seed));
        fq = random_feature_map(eval(c * q), r, true);
        fk = random_feature_map(eval(c * k), r, false);
      }
      if constexpr (linear_path) {
        // The linear path never forms the weights, so it cannot return or drop them.
        if (path == AttentionPath::automatic && weights == nullptr && !dropout.active())
          return linear_attention(fq, fk, v, std::is_same_v<Mask, mask::Causal>);
      }
      return materialized_attention(fq, fk, v, detail::MaterializedForm{1, 0, 0},
                                    detail::IdentityKernel{}, mask, weights, dropout);
    } else {
      const detail::MaterializedForm form{score.alpha(q.shape().last()), Score::beta_q,
                                          Score::beta_k};
      const detail::ScoreBias<Score> bias{score};  // ALiBi's b_h(p_i − p_j); nothing for others
      if constexpr (std::is_same_v<Kernel, kernel::Softmax>) {
        if (path == AttentionPath::automatic)
          return online_softmax_attention(q, k, v, score, mask, weights, dropout, backward,
                                          key_length);
      }
      return materialized_attention(q, k, v, form, kernel, mask, weights, dropout, bias,
                                    key_length);
    }
  }
};

// attention<Score, Kernel>(q, k, v, mask): the operator as one call.
template <ScorePolicy Score = score::ScaledDot, KernelPolicy Kernel = kernel::Softmax,
          MaskPolicy Mask = mask::None, class T>
Var<T> attention(const Var<T>& q, const Var<T>& k, const Var<T>& v, const Mask& mask = {},
                 Tensor<T>* weights = nullptr) {
  return Attention<Score, Kernel, Mask>{Score{}, Kernel{}, mask}(q, k, v, weights);
}

}  // namespace attn
