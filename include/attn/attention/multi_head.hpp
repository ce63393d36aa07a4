// attn/attention/multi_head.hpp: MultiHeadAttention, the module: input projections, heads,
// the Attention operator, output projection; self- and cross-attention, batch-first [B, T, D];
// separate or tied query/key projections; a key/value cache for incremental decoding.
// Does not add residuals or norms (nn::TransformerBlock does) nor positions.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>

#include "attention.hpp"

namespace attn {

inline constexpr int dynamic = -1;

// The head count: Heads<8> fixes it at compile time, Heads<dynamic> takes it from the config.
template <int N>
struct Heads {
  static_assert(N > 0 || N == dynamic, "attn: the head count must be positive (or attn::dynamic)");
  static constexpr int count = N;
};

template <class H>
concept HeadsPolicy = requires {
  { H::count } -> std::convertible_to<int>;
}
&&std::same_as<H, Heads<H::count>>;

namespace projection {
// W_Q and W_K are separate matrices (the standard Transformer).
struct Separate {
  static constexpr bool tied = false;
};
// W_Q = W_K: one vector z = x W + b per token serves as query and key, so the score matrix is
// symmetric before masking ("shared query-key" attention; a third fewer attention parameters).
struct Tied {
  static constexpr bool tied = true;
};
}  // namespace projection

template <class P>
concept ProjectionPolicy =
    std::same_as<P, projection::Separate> || std::same_as<P, projection::Tied>;

struct MultiHeadConfig {
  index_t d_model = 0;
  index_t heads = 0;       // required with Heads<dynamic>; must equal N (or be 0) with Heads<N>
  index_t kv_heads = 0;    // key/value heads (grouped query); 0 means one per query head
  double dropout = 0.0;    // on the attention weights, while training
  bool bias = true;        // biases on the four projections
  double init_std = 0.02;  // weights ~ N(0, init_std²), biases 0
  std::uint64_t seed = 0;  // initialisation and dropout
  index_t max_length = 0;  // the longest sequence, for modules whose weights depend on it
                           // (the dense synthesizer); 0 when unused
};

// A linear map y = x Wᵀ + b with W [out, in], PyTorch's layout.
template <class T>
struct ProjectionWeights {
  Parameter<T> weight;
  Parameter<T> bias;
  bool has_bias = true;

  ProjectionWeights() = default;
  ProjectionWeights(index_t out, index_t in, bool with_bias, double std, Rng& rng)
      : weight(Tensor<T>::randn({out, in}, rng, 0.0, std)),
        bias(Tensor<T>::zeros({with_bias ? out : 0})),
        has_bias(with_bias) {}

  Var<T> operator()(Tape<T>& tape, const Var<T>& x) {
    if (has_bias) return linear(x, tape.param(weight), tape.param(bias));
    return linear(x, tape.param(weight));
  }
};

// Keys and values of the positions decoded so far: [B, Hk, L, Dh] each.
template <class T>
struct KVCache {
  Tensor<T> k, v;
  index_t length() const { return k.rank() == 4 ? k.shape()[2] : 0; }
  void clear() { k = v = Tensor<T>(); }
};

// What an attention probe sees, once per forward (or decode) call of a MultiHeadAttention at
// evaluation time: the per-head inputs, the exact weights under the module's own score, kernel and
// mask, and the exact output, which the probe may replace. analysis/ records keys and weights
// through it; approx/ swaps in approximate attention in a trained model. Grouped-query heads:
// query head h reads key/value head h / (H / Hk).
template <class T>
struct AttentionStep {
  Tensor<T> q;        // [B, H, Tq, Dh]
  Tensor<T> k;        // [B, Hk, Tk, Dh]
  Tensor<T> v;        // [B, Hk, Tk, Dv]
  Tensor<T> weights;  // [B, H, Tq, Tk]; a row with no allowed key is all zero
  Tensor<T> output;   // [B, H, Tq, Dv]; overwrite (same shape) to change what the module returns
};

template <class T>
using AttentionProbe = std::function<void(AttentionStep<T>&)>;

template <ScorePolicy Score = score::ScaledDot, KernelPolicy Kernel = kernel::Softmax,
          MaskPolicy Mask = mask::None, HeadsPolicy H = Heads<dynamic>,
          ProjectionPolicy Projection = projection::Separate, class T = float>
class MultiHeadAttention {
 public:
  using value_type = T;
  using mask_type = Mask;
  static constexpr bool tied = Projection::tied;

  explicit MultiHeadAttention(const MultiHeadConfig& c) : config_(c), rng_(c.seed) {
    if constexpr (H::count != dynamic) {
      ATTN_CHECK(c.heads == 0 || c.heads == H::count, value_error,
                 "MultiHeadAttention: config.heads = ", c.heads, " but the type fixes ", H::count,
                 " heads");
      config_.heads = H::count;
    }
    const index_t h = config_.heads, d = c.d_model;
    ATTN_CHECK(h > 0, value_error, "MultiHeadAttention: the head count must be positive, got ", h);
    ATTN_CHECK(d > 0 && d % h == 0, value_error, "MultiHeadAttention: d_model ", d,
               " must be divisible by the head count ", h);
    if (config_.kv_heads == 0) config_.kv_heads = h;
    ATTN_CHECK(h % config_.kv_heads == 0, value_error, "MultiHeadAttention: ", config_.kv_heads,
               " key/value heads do not divide ", h, " query heads");
    ATTN_CHECK(!tied || config_.kv_heads == h, value_error,
               "MultiHeadAttention: tied query/key projections need one key head per query head");
    ATTN_CHECK(c.dropout >= 0 && c.dropout < 1, value_error, "MultiHeadAttention: dropout ",
               c.dropout, " outside [0, 1)");
    const index_t kv_width = config_.kv_heads * head_dim();
    q_proj = ProjectionWeights<T>(d, d, c.bias, c.init_std, rng_);
    if constexpr (!tied) k_proj = ProjectionWeights<T>(kv_width, d, c.bias, c.init_std, rng_);
    v_proj = ProjectionWeights<T>(kv_width, d, c.bias, c.init_std, rng_);
    out_proj = ProjectionWeights<T>(d, d, c.bias, c.init_std, rng_);
  }

  index_t d_model() const { return config_.d_model; }
  index_t heads() const { return config_.heads; }
  index_t kv_heads() const { return config_.kv_heads; }
  index_t head_dim() const { return config_.d_model / config_.heads; }
  const MultiHeadConfig& config() const { return config_; }

  bool training = true;  // dropout on the weights only while training

  // Restarts the dropout stream (a trainer reseeds per step so a resumed run replays it).
  void reseed(std::uint64_t seed) { rng_.reseed(seed); }
  Score score{};
  Kernel kernel{};

  // Called by every forward and decode pass that records no gradients (under NoGrad), never
  // while training: the step's weights are materialised, [B, H, Tq, Tk], so keep it to analysis.
  AttentionProbe<T> probe;

  // Self-attention: x [B, T, D] -> [B, T, D]. `weights` receives [B, H, T, T] when given.
  Var<T> operator()(const Var<T>& x, const Mask& mask = {}, Tensor<T>* weights = nullptr) {
    return (*this)(x, x, mask, weights);
  }

  // Cross-attention: queries from x [B, Tq, D], keys and values from memory [B, Tk, D].
  Var<T> operator()(const Var<T>& x, const Var<T>& memory, const Mask& mask,
                    Tensor<T>* weights = nullptr) {
    Tape<T>& tape = x.tape();
    check_input(x, "x");
    check_input(memory, "memory");
    ATTN_CHECK(memory.shape()[0] == x.shape()[0], shape_error, "MultiHeadAttention: x ", x.shape(),
               " and memory ", memory.shape(), " differ in batch size");
    const Var<T> q = split_heads(q_proj(tape, x), heads());
    const Var<T> k = tied ? (&memory == &x ? q : split_heads(q_proj(tape, memory), heads()))
                          : split_heads(key_projection()(tape, memory), kv_heads());
    const Var<T> v = split_heads(v_proj(tape, memory), kv_heads());
    return out_proj(tape, merge_heads(attend(q, k, v, mask, weights)));
  }

  // Incremental decoding: x holds the new positions [B, t, D]; their keys and values are appended
  // to `cache`, and they attend to everything cached (with Causal, end-aligned, each new position
  // sees itself and the past). Costs O(L·D) per new position for L cached ones.
  Var<T> decode(const Var<T>& x, KVCache<T>& cache, const Mask& mask = {}) {
    Tape<T>& tape = x.tape();
    check_input(x, "x");
    const Var<T> q = split_heads(q_proj(tape, x), heads());
    const Var<T> k_new = tied ? q : split_heads(key_projection()(tape, x), kv_heads());
    const Var<T> v_new = split_heads(v_proj(tape, x), kv_heads());
    append(cache.k, k_new.value());
    append(cache.v, v_new.value());
    const Var<T> k = tape.leaf(cache.k);
    const Var<T> v = tape.leaf(cache.v);
    return out_proj(tape, merge_heads(attend(q, k, v, mask, nullptr)));
  }

  // Visits every parameter with its name: q_proj.weight, q_proj.bias, ... (under "prefix." when
  // a prefix is given).
  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    auto visit = [&](std::string_view name, ProjectionWeights<T>& p) {
      std::string base(prefix);
      if (!base.empty()) base += '.';
      base += name;
      f(base + ".weight", p.weight);
      if (p.has_bias) f(base + ".bias", p.bias);
    };
    visit(tied ? "qk_proj" : "q_proj", q_proj);
    if constexpr (!tied) visit("k_proj", k_proj);
    visit("v_proj", v_proj);
    visit("out_proj", out_proj);
  }

  ProjectionWeights<T> q_proj, k_proj, v_proj, out_proj;  // k_proj is unused when tied

 private:
  ProjectionWeights<T>& key_projection() { return tied ? q_proj : k_proj; }

  void check_input(const Var<T>& x, const char* what) const {
    ATTN_CHECK(x.shape().rank() == 3 && x.shape()[2] == d_model(), shape_error,
               "MultiHeadAttention: ", what, " must be [B, T, ", d_model(), "], got ", x.shape());
  }

  // [B, T, n·Dh] -> [B, n, T, Dh]
  Var<T> split_heads(const Var<T>& x, index_t n) const {
    const Shape& s = x.shape();
    return transpose_reshape(x, {s[0], s[1], n, s[2] / n}, 1, 2, {s[0], n, s[1], s[2] / n});
  }

  // [B, H, T, Dv] -> [B, T, H·Dv]
  static Var<T> merge_heads(const Var<T>& o) {
    const Shape& s = o.shape();
    return transpose_reshape(o, s, 1, 2, {s[0], s[2], s[1] * s[3]});
  }

  Var<T> attend(const Var<T>& q, const Var<T>& k, const Var<T>& v, const Mask& mask,
                Tensor<T>* weights) {
    Attention<Score, Kernel, Mask> op{score, kernel, mask};
    if (training && config_.dropout > 0 && q.tape().grad_enabled())
      op.dropout = AttentionDropout{config_.dropout, rng_.split()};
    if (!probe || q.tape().grad_enabled()) return op(q, k, v, weights);

    AttentionStep<T> step{q.value(), k.value(), v.value(), {}, {}};
    step.output = op(q, k, v, &step.weights).value();
    const Shape expected = step.output.shape();
    probe(step);
    ATTN_CHECK(step.output.shape() == expected, shape_error,
               "MultiHeadAttention: the probe changed the output shape from ", expected, " to ",
               step.output.shape());
    if (weights != nullptr) *weights = std::move(step.weights);
    return q.tape().leaf(step.output);
  }

  // Appends `fresh` [B, Hk, t, Dh] to `cache` along the time axis.
  static void append(Tensor<T>& cache, const Tensor<T>& fresh) {
    const Shape& f = fresh.shape();
    if (cache.rank() != 4) {
      cache = fresh;
      return;
    }
    const Shape& c = cache.shape();
    ATTN_CHECK(c[0] == f[0] && c[1] == f[1] && c[3] == f[3], shape_error,
               "MultiHeadAttention::decode: cache ", c, " does not fit new keys ", f);
    Tensor<T> grown(Shape{c[0], c[1], c[2] + f[2], c[3]});
    for (index_t bh = 0; bh < c[0] * c[1]; ++bh) {
      std::copy_n(cache.data() + bh * c[2] * c[3], c[2] * c[3],
                  grown.data() + bh * (c[2] + f[2]) * c[3]);
      std::copy_n(fresh.data() + bh * f[2] * f[3], f[2] * f[3],
                  grown.data() + (bh * (c[2] + f[2]) + c[2]) * c[3]);
    }
    cache = std::move(grown);
  }

  MultiHeadConfig config_;
  Rng rng_;
};

}  // namespace attn
