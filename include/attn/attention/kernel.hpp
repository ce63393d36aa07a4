// attn/attention/kernel.hpp: the kernel κ that turns scores into unnormalised weights,
// w_j = κ(q, k_j) / Σ_l κ(q, k_l). Does not normalise or mask; the operator does.
//
// Two families:
//  * score kernels apply a scalar function to the score: Softmax (κ = e^s) and Polynomial<C>
//    (κ = s^C). They provide value(s), derivative(s, κ) and shift_invariant (whether a row may
//    subtract its max before κ, as softmax does for stability). A new one needs nothing else.
//  * feature-map kernels are κ(q, k) = φ(q)·φ(k) (linear attention), feature_map = true. With no
//    mask, a causal mask or a mask of keys only they run in O(T F Dv) by associativity:
//    (φ(Q) φ(K)ᵀ) V = φ(Q) (φ(K)ᵀ V). A new one is one struct, in one of two forms:
//      elementwise (φ applied to each coordinate, F = d; EluPlusOne, Relu):
//        T value(T x) const;  T derivative(T x, T phi) const;      // φ(x), φ'(x) given φ(x)
//      by rows (φ: R^d -> R^F; RandomFeatures, TaylorExp):
//        index_t feature_count(index_t d) const;                   // F
//        void map(const T* x, index_t rows, index_t d, T* phi, FeatureSide side) const;
//        void map_backward(const T* x, const T* phi, const T* dphi, index_t rows, index_t d,
//                          T* dx) const;                           // dx += J_φ(x)ᵀ dφ
//    The operator applies φ to the scaled q and k as one autodiff op (linear.hpp), the reference
//    in double (reference.hpp); nothing else names a feature map. `side` says whether the rows
//    are queries or keys: a map may multiply each query row by its own constant (it cancels in
//    that row's normalisation), but keys only by one constant shared by every key.
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>

#include "../core/host_device.hpp"
#include "../core/parallel.hpp"
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

// Which rows a row feature map is given: a query row may be scaled by a constant of its own, a
// key row only by the constant every key shares.
enum class FeatureSide { query, key };

template <class K>
concept ElementwiseFeatureMap = requires(const K& k, double x) {
  { k.value(x) } -> std::convertible_to<double>;
  { k.derivative(x, x) } -> std::convertible_to<double>;  // dφ/dx at x, given φ(x)
};

template <class K>
concept RowFeatureMap = requires(const K& k, index_t n, const double* x, double* y,
                                 FeatureSide side) {
  { k.feature_count(n) } -> std::convertible_to<index_t>;
  k.map(x, n, n, y, side);
  k.map_backward(x, x, x, n, n, y);
};

template <class K>
concept FeatureMapKernel = requires {
  { K::name } -> std::convertible_to<const char*>;
  requires K::feature_map;
  requires ElementwiseFeatureMap<K> || RowFeatureMap<K>;
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

// φ(x) = elu(x) + 1 > 0 (Katharopoulos, Vyas, Pappas & Fleuret 2020, "Transformers are RNNs:
// Fast Autoregressive Transformers with Linear Attention"): x + 1 for x > 0, e^x otherwise.
struct EluPlusOne {
  static constexpr const char* name = "elu_plus_one";
  static constexpr bool feature_map = true;
  template <class T>
  ATTN_HOST_DEVICE T value(T x) const {
    return x > 0 ? x + 1 : std::exp(x);
  }
  template <class T>
  ATTN_HOST_DEVICE T derivative(T x, T phi) const {
    return x > 0 ? T{1} : phi;  // (e^x)' = e^x = φ
  }
};

// φ(x) = max(x, 0). A query whose features are all zero gets output 0.
struct Relu {
  static constexpr const char* name = "relu";
  static constexpr bool feature_map = true;
  template <class T>
  ATTN_HOST_DEVICE T value(T x) const {
    return x > 0 ? x : T{0};
  }
  template <class T>
  ATTN_HOST_DEVICE T derivative(T x, T) const {
    return x > 0 ? T{1} : T{0};
  }
};

// Positive orthogonal random features (Performer, Choromanski et al. 2021, "Rethinking Attention
// with Performers"), estimating exp(q·k): φ(x) = exp(Rx − ‖x‖²/2 − m) / √F with R [F, d] a seeded
// random orthogonal matrix scaled to Gaussian row norms (random_feature_matrix). The stabiliser m
// is exact because it cancels in the normalisation:
//   queries: m = max_a (r_a·x) − ‖x‖²/2, the row's largest exponent (so its largest feature is
//            1/√F): one constant per query row, which o_i = Σ_j φ(q_i)·φ(k_j) v_j / Σ_j
//            φ(q_i)·φ(k_j) divides out;
//   keys:    m = c, one constant for every key of every row, because a factor per key cancels only
//            when every key of a row's sum shares it. c depends on R alone, never on other keys
//            (a max over the sequence would let a large future key change earlier causal rows):
//            r_a·x − ‖x‖²/2 = (‖r_a‖² − ‖x − r_a‖²)/2 <= ‖r_a‖²/2, so c = max(0, max_a ‖r_a‖²/2 −
//            H) bounds every key feature by e^H (H = 0.75 ln of T's largest value: 66 in float, 532
//            in double). When c itself exceeds H, ordinary keys (exponents near 0) would fall
//            towards underflow: map() throws (in float from head widths of 184 to 216, by R).
// map() and map_backward() are defined in random_features.hpp (they need R, built by an Eigen QR).
struct RandomFeatures {
  static constexpr const char* name = "random_features";
  static constexpr bool feature_map = true;
  index_t features = 256;
  std::uint64_t seed = 0;

  index_t feature_count(index_t) const { return features; }
  template <class T>
  void map(const T* x, index_t rows, index_t d, T* phi, FeatureSide side) const;
  // m held constant (it cancels downstream): dx = Rᵀ(dφ ∘ φ) − x Σ_a dφ_a φ_a.
  template <class T>
  void map_backward(const T* x, const T* phi, const T* dphi, index_t rows, index_t d, T* dx) const;
};

// The second-order Taylor expansion of exp as a feature map (Arora, Eyuboglu, Zhang, Timalsina,
// Alberti, Zinsley, Zou, Rudra & Ré 2024, "Simple linear attention language models balance the
// recall-throughput tradeoff"): φ(x) = [1, x, vec(x xᵀ)/√2], F = 1 + d + d², so that
//   φ(q)·φ(k) = 1 + q·k + (q·k)²/2 = ((q·k + 1)² + 1)/2 >= 1/2 > 0:
// softmax's exp(s) replaced by its Taylor polynomial, positive for every score, in O(T d² Dv).
struct TaylorExp {
  static constexpr const char* name = "taylor_exp";
  static constexpr bool feature_map = true;

  index_t feature_count(index_t d) const { return 1 + d + d * d; }
  template <class T>
  void map(const T* x, index_t rows, index_t d, T* phi, FeatureSide) const {
    const index_t F = feature_count(d);
    const T h = T{1} / std::sqrt(T{2});
    parallel_for(rows, double(F), [&](index_t r) {
      const T* xr = x + r * d;
      T* p = phi + r * F;
      p[0] = 1;
      for (index_t a = 0; a < d; ++a) p[1 + a] = xr[a];
      for (index_t a = 0; a < d; ++a)
        for (index_t b = 0; b < d; ++b) p[1 + d + a * d + b] = h * xr[a] * xr[b];
    });
  }
  // dx_a += dφ_{1+a} + (1/√2) Σ_b (dφ_{ab} + dφ_{ba}) x_b, with φ_{ab} = x_a x_b / √2.
  template <class T>
  void map_backward(const T* x, const T*, const T* dphi, index_t rows, index_t d, T* dx) const {
    const index_t F = feature_count(d);
    const T h = T{1} / std::sqrt(T{2});
    parallel_for(rows, 2.0 * double(F), [&](index_t r) {
      const T* xr = x + r * d;
      const T* g = dphi + r * F;
      const T* gp = g + 1 + d;  // [d, d]
      for (index_t a = 0; a < d; ++a) {
        T s = 0;
        for (index_t b = 0; b < d; ++b) s += (gp[a * d + b] + gp[b * d + a]) * xr[b];
        dx[r * d + a] += g[1 + a] + h * s;
      }
    });
  }
};

}  // namespace kernel

static_assert(KernelPolicy<kernel::Softmax>);
static_assert(KernelPolicy<kernel::Polynomial<2>>);
static_assert(KernelPolicy<kernel::EluPlusOne>);
static_assert(KernelPolicy<kernel::Relu>);
static_assert(KernelPolicy<kernel::RandomFeatures>);
static_assert(KernelPolicy<kernel::TaylorExp>);

}  // namespace attn
