// attn/attention/kernel.hpp: the kernel κ that turns scores into unnormalised weights,
// w_j = κ(q, k_j) / Σ_l κ(q, k_l). Does not normalise or mask; the operator does.
//
// Two families:
//  * score kernels apply a scalar function to the score: Softmax (κ = e^s) and Polynomial<C>
//    (κ = s^C). They provide value(s), derivative(s, κ) and shift_invariant (whether a row may
//    subtract its max before κ, as softmax does for stability). A new one needs nothing else.
//  * feature-map kernels are κ(q, k) = φ(q)·φ(k) (linear attention): EluPlusOne, Relu and
//    RandomFeatures. They provide feature_map = true, and the operator applies φ with autodiff
//    ops, so only the map itself is defined here. With no mask or a causal mask they run in
//    O(T d²) by associativity: (φ(Q) φ(K)ᵀ) V = φ(Q) (φ(K)ᵀ V).
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>

#include "../core/host_device.hpp"
#include "../core/shape.hpp"

namespace attn {

template <class K>
concept ScoreKernel = requires(const K& k, double s) {
  { k.value(s) } -> std::convertible_to<double>;
  { k.derivative(s, s) } -> std::convertible_to<double>;  // dκ/ds at s, given κ(s)
  {
    K::shift_invariant
    } -> std::convertible_to<bool>;  // κ(s − c) ∝ κ(s): rows may subtract their max
  { K::name } -> std::convertible_to<const char*>;
  requires !K::feature_map;
};

template <class K>
concept FeatureMapKernel = requires {
  { K::name } -> std::convertible_to<const char*>;
  requires K::feature_map;
};

template <class K>
concept KernelPolicy = std::copy_constructible<K> &&(ScoreKernel<K> || FeatureMapKernel<K>);

namespace kernel {

// κ = exp(s): softmax attention. The default, and the one with the fused online-softmax path.
struct Softmax {
  static constexpr const char* name = "softmax";
  static constexpr bool feature_map = false;
  static constexpr bool shift_invariant = true;
  template <class T>
  ATTN_HOST_DEVICE T value(T s) const {
    return std::exp(s);
  }
  template <class T>
  ATTN_HOST_DEVICE T derivative(T, T k) const {
    return k;
  }
};

// κ = s^C (e.g. C = 2). With odd C or signed scores the "weights" can be negative and need not
// sum to a distribution; the value-aware study uses C = 2.
template <int C>
struct Polynomial {
  static_assert(C >= 1, "attn: the polynomial kernel's degree must be at least 1");
  static constexpr const char* name = "polynomial";
  static constexpr bool feature_map = false;
  static constexpr bool shift_invariant = false;
  static constexpr int degree = C;
  template <class T>
  ATTN_HOST_DEVICE T value(T s) const {
    T p = 1;
    for (int i = 0; i < C; ++i) p *= s;
    return p;
  }
  template <class T>
  ATTN_HOST_DEVICE T derivative(T s, T) const {
    T p = C;
    for (int i = 1; i < C; ++i) p *= s;
    return p;
  }
};

// φ(x) = elu(x) + 1 > 0 (Katharopoulos et al. 2020, "linear attention").
struct EluPlusOne {
  static constexpr const char* name = "elu_plus_one";
  static constexpr bool feature_map = true;
};

// φ(x) = max(x, 0). A query whose features are all zero gets output 0.
struct Relu {
  static constexpr const char* name = "relu";
  static constexpr bool feature_map = true;
};

// Positive orthogonal random features (Performer, Choromanski et al. 2021), estimating exp(q·k):
// φ(x) = exp(Rx − ‖x‖²/2 − m) / √F with R [F, d] a seeded random orthogonal matrix scaled to
// Gaussian row norms; m is a max subtracted for stability (per query row for queries, over all
// keys for keys): both cancel in the normalisation.
struct RandomFeatures {
  static constexpr const char* name = "random_features";
  static constexpr bool feature_map = true;
  index_t features = 256;
  std::uint64_t seed = 0;
};

}  // namespace kernel

static_assert(KernelPolicy<kernel::Softmax>);
static_assert(KernelPolicy<kernel::Polynomial<2>>);
static_assert(KernelPolicy<kernel::EluPlusOne>);
static_assert(KernelPolicy<kernel::Relu>);
static_assert(KernelPolicy<kernel::RandomFeatures>);

}  // namespace attn
