// attn/attention/learned_scores.hpp: attention modules whose score function has weights of its
// own, with MultiHeadAttention's interface (so nn::GPT<BilinearAttention<…>> works):
//   BilinearAttention   s_ij = q_iᵀ W_h k_j / √Dh                 (a learnable W_h per head)
//   AdditiveAttention   s_ij = w_hᵀ tanh(W₁ᵃ x_i + b₁ + W₁ᵇ m_j)     (Bahdanau's MLP score)
// Both do self- and cross-attention and incremental decoding with a KVCache.
// Does not offer kernels other than softmax, grouped key/value heads or tied projections; the
// dense synthesizer (scores from x alone) is in synthesizer.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "../autodiff/masked_softmax.hpp"
#include "../autodiff/pairwise.hpp"
#include "multi_head.hpp"

namespace attn {

// The pieces every learned-score module shares (synthesizer.hpp uses them too).
namespace detail::learned {

// Checks a MultiHeadConfig and fills in what the type fixes (Heads<N>) or implies (kv_heads).
template <HeadsPolicy H>
MultiHeadConfig resolve_config(MultiHeadConfig c, const char* who) {
  if constexpr (H::count != dynamic) {
    ATTN_CHECK(c.heads == 0 || c.heads == H::count, value_error, who, ": config.heads = ", c.heads,
               " but the type fixes ", H::count, " heads");
    c.heads = H::count;
  }
  ATTN_CHECK(c.heads > 0, value_error, who, ": the head count must be positive, got ", c.heads);
  ATTN_CHECK(c.d_model > 0 && c.d_model % c.heads == 0, value_error, who, ": d_model ", c.d_model,
             " must be divisible by the head count ", c.heads);
  ATTN_CHECK(c.kv_heads == 0 || c.kv_heads == c.heads, value_error, who,
             ": grouped key/value heads are not supported (kv_heads = ", c.kv_heads, "); use 0 or ",
             c.heads);
  c.kv_heads = c.heads;
  ATTN_CHECK(c.dropout >= 0 && c.dropout < 1, value_error, who, ": dropout ", c.dropout,
             " outside [0, 1)");
  return c;
}

template <class T>
void check_input(const Var<T>& x, index_t d_model, const char* who, const char* what) {
  ATTN_CHECK(x.shape().rank() == 3 && x.shape()[2] == d_model, shape_error, who, ": ", what,
             " must be [B, T, ", d_model, "], got ", x.shape());
}

// [B, T, n·W] -> [B, n, T, W]
template <class T>
Var<T> split_heads(const Var<T>& x, index_t n) {
  const Shape& s = x.shape();
  return transpose(reshape(x, {s[0], s[1], n, s[2] / n}), 1, 2);
}

// [B, H, T, W] -> [B, T, H·W]
template <class T>
Var<T> merge_heads(const Var<T>& o) {
  const Shape& s = o.shape();
  return reshape(transpose(o, 1, 2), {s[0], s[2], s[1] * s[3]});
}

// One matrix per head: x [B, T, H·K] (heads side by side, as a projection writes them) and
// w [H, K, N] (or [H, N, K] when tw) give y[b, h] = x[b, :, h] op(w[h])  -> [B, H, T, N].
// matmul batches over equal leading axes only, so the head axis goes to the front for one
// batched GEMM per head ([H, B·T, K] x [H, K, N]) and back afterwards.
template <class T>
Var<T> per_head_matmul(const Var<T>& x, const Var<T>& w, bool tw) {
  const Shape& s = x.shape();
  const index_t batch = s[0], t = s[1], h = w.shape()[0], k = s[2] / h;
  const index_t n = tw ? w.shape()[1] : w.shape()[2];
  const Var<T> xh = transpose(reshape(x, {batch * t, h, k}), 0, 1);  // [H, B·T, K]
  const Var<T> y = matmul(xh, w, false, tw);                         // [H, B·T, N]
  return transpose(reshape(y, {h, batch, t, n}), 0, 1);              // [B, H, T, N]
}

// Appends `fresh` [B, H, t, W] to `cache` [B, H, L, W] along the time axis (W may be 0).
template <class T>
void append_positions(Tensor<T>& cache, const Tensor<T>& fresh, const char* who) {
  const Shape& f = fresh.shape();
  if (cache.rank() != 4) {
    cache = fresh;
    return;
  }
  const Shape& c = cache.shape();
  ATTN_CHECK(c[0] == f[0] && c[1] == f[1] && c[3] == f[3], shape_error, who, "::decode: cache ", c,
             " does not fit the new positions ", f, " (a cache from another module?)");
  Tensor<T> grown(Shape{c[0], c[1], c[2] + f[2], c[3]});
  for (index_t bh = 0; bh < c[0] * c[1]; ++bh) {
    std::copy_n(cache.data() + bh * c[2] * c[3], c[2] * c[3],
                grown.data() + bh * (c[2] + f[2]) * c[3]);
    std::copy_n(fresh.data() + bh * f[2] * f[3], f[2] * f[3],
                grown.data() + (bh * (c[2] + f[2]) + c[2]) * c[3]);
  }
  cache = std::move(grown);
}

// o = W V with W = masked softmax of the scores s [B, H, Tq, Tk] (dropped out while training),
// V [B, H, Tk, Dv]; `weights` receives W before dropout. A row with no allowed key gives o = 0.
template <class T, MaskPolicy Mask>
Var<T> softmax_values(const Var<T>& s, const Var<T>& v, const Mask& mask,
                      std::type_identity_t<Tensor<T>>* weights, double dropout_p, bool training,
                      Rng& rng) {
  Var<T> w = masked_softmax(s, mask);  // [B, H, Tq, Tk]
  if (weights) *weights = w.value();
  if (training && dropout_p > 0 && s.tape().grad_enabled()) w = dropout(w, dropout_p, rng);
  return matmul(w, v);  // [B, H, Tq, Dv]
}

template <class T, class F>
void visit(F& f, std::string_view prefix, std::string_view name, Parameter<T>& p) {
  std::string full(prefix);
  if (!full.empty()) full += '.';
  full += name;
  f(full, p);
}

template <class T, class F>
void visit(F& f, std::string_view prefix, std::string_view name, ProjectionWeights<T>& p) {
  std::string base(prefix);
  if (!base.empty()) base += '.';
  base += name;
  f(base + ".weight", p.weight);
  if (p.has_bias) f(base + ".bias", p.bias);
}

}  // namespace detail::learned

// Bilinear ("general", Luong et al. 2015) attention per head h:
//     s_ij = q_iᵀ W_h k_j / √Dh,   o_i = Σ_j softmax_j(s_ij) v_j   over the allowed keys,
// with q = x W_Qᵀ + b_Q, k = m W_Kᵀ + b_K, v = m W_Vᵀ + b_V split into H heads of width Dh
// (m = x for self-attention), heads merged and projected by out_proj.
//
// Computed as standard scaled-dot attention on (q, k') with k'_j = W_h k_j (rows: k' = k W_hᵀ,
// one batched GEMM per head). That is exact, not an approximation: q_iᵀ W_h k_j = q_i · (W_h k_j)
// is only a regrouping of the same sum of products, so every mask, the fused online-softmax path
// and the weight dropout apply unchanged (results differ from the literal triple sum by rounding
// alone). Decoding caches k' (already multiplied by W_h), so a new position costs O(L·Dh) per head.
//
// Parameters (PyTorch layouts): q_proj, k_proj, v_proj, out_proj (.weight [D, D], .bias [D]) and
// bilinear_weight [H, Dh, Dh] (W_h = bilinear_weight[h]), the identity at initialisation, so the
// module starts as MultiHeadAttention<ScaledDot> with the same seed. W_h is redundant with W_Q
// and W_K in exact arithmetic (W_Qᵀ W_h W_K is again one matrix); it changes what gradient
// descent sees, not what the module can express.
template <MaskPolicy Mask = mask::None, HeadsPolicy H = Heads<dynamic>, class T = float>
class BilinearAttention {
 public:
  using value_type = T;
  using mask_type = Mask;

  explicit BilinearAttention(const MultiHeadConfig& c)
      : config_(detail::learned::resolve_config<H>(c, "BilinearAttention")), rng_(c.seed) {
    const index_t d = config_.d_model, h = config_.heads, dh = head_dim();
    // Drawn in MultiHeadAttention's order (q, k, v, out), so equal seeds give equal projections.
    q_proj = ProjectionWeights<T>(d, d, c.bias, c.init_std, rng_);
    k_proj = ProjectionWeights<T>(d, d, c.bias, c.init_std, rng_);
    v_proj = ProjectionWeights<T>(d, d, c.bias, c.init_std, rng_);
    out_proj = ProjectionWeights<T>(d, d, c.bias, c.init_std, rng_);
    Tensor<T> eye = Tensor<T>::zeros({h, dh, dh});
    for (index_t i = 0; i < h; ++i)
      for (index_t r = 0; r < dh; ++r) eye(i, r, r) = T{1};
    bilinear_weight = Parameter<T>(std::move(eye));
  }

  index_t d_model() const { return config_.d_model; }
  index_t heads() const { return config_.heads; }
  index_t head_dim() const { return config_.d_model / config_.heads; }
  const MultiHeadConfig& config() const { return config_; }

  bool training = true;  // dropout on the weights only while training
  void reseed(std::uint64_t seed) { rng_.reseed(seed); }

  // Self-attention: x [B, T, D] -> [B, T, D]. `weights` receives [B, H, T, T] when given.
  Var<T> operator()(const Var<T>& x, const Mask& mask = {}, Tensor<T>* weights = nullptr) {
    return (*this)(x, x, mask, weights);
  }

  // Cross-attention: queries from x [B, Tq, D], keys and values from memory [B, Tk, D].
  Var<T> operator()(const Var<T>& x, const Var<T>& memory, const Mask& mask,
                    Tensor<T>* weights = nullptr) {
    Tape<T>& tape = x.tape();
    detail::learned::check_input(x, d_model(), "BilinearAttention", "x");
    detail::learned::check_input(memory, d_model(), "BilinearAttention", "memory");
    ATTN_CHECK(memory.shape()[0] == x.shape()[0], shape_error, "BilinearAttention: x ", x.shape(),
               " and memory ", memory.shape(), " differ in batch size");
    const Var<T> q = detail::learned::split_heads(q_proj(tape, x), heads());       // [B, H, Tq, Dh]
    const Var<T> k = transformed_keys(tape, memory);                               // [B, H, Tk, Dh]
    const Var<T> v = detail::learned::split_heads(v_proj(tape, memory), heads());  // [B, H, Tk, Dh]
    return out_proj(tape, detail::learned::merge_heads(attend(q, k, v, mask, weights)));
  }

  // Incremental decoding: x holds the new positions [B, t, D]; their k' = W_h k and v are
  // appended to `cache` (k' [B, H, L, Dh], v [B, H, L, Dh]) and they attend to everything cached
  // (with Causal, end-aligned: each new position sees itself and the past).
  Var<T> decode(const Var<T>& x, KVCache<T>& cache, const Mask& mask = {}) {
    Tape<T>& tape = x.tape();
    detail::learned::check_input(x, d_model(), "BilinearAttention", "x");
    const Var<T> q = detail::learned::split_heads(q_proj(tape, x), heads());
    const Var<T> k_new = transformed_keys(tape, x);
    const Var<T> v_new = detail::learned::split_heads(v_proj(tape, x), heads());
    detail::learned::append_positions(cache.k, k_new.value(), "BilinearAttention");
    detail::learned::append_positions(cache.v, v_new.value(), "BilinearAttention");
    const Var<T> o = attend(q, tape.leaf(cache.k), tape.leaf(cache.v), mask, nullptr);
    return out_proj(tape, detail::learned::merge_heads(o));
  }

  // q_proj.weight, q_proj.bias, k_proj.*, bilinear_weight, v_proj.*, out_proj.* (under
  // "prefix." when given).
  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    detail::learned::visit(f, prefix, "q_proj", q_proj);
    detail::learned::visit(f, prefix, "k_proj", k_proj);
    detail::learned::visit(f, prefix, "bilinear_weight", bilinear_weight);
    detail::learned::visit(f, prefix, "v_proj", v_proj);
    detail::learned::visit(f, prefix, "out_proj", out_proj);
  }

  ProjectionWeights<T> q_proj, k_proj, v_proj, out_proj;
  Parameter<T> bilinear_weight;  // [H, Dh, Dh]

 private:
  // k' = k W_hᵀ per head: [B, Tk, D] -> [B, H, Tk, Dh].
  Var<T> transformed_keys(Tape<T>& tape, const Var<T>& m) {
    return detail::learned::per_head_matmul(k_proj(tape, m), tape.param(bilinear_weight), true);
  }

  Var<T> attend(const Var<T>& q, const Var<T>& k, const Var<T>& v, const Mask& mask,
                Tensor<T>* weights) {
    Attention<score::ScaledDot, kernel::Softmax, Mask> op{score::ScaledDot{}, kernel::Softmax{},
                                                          mask};
    if (training && config_.dropout > 0 && q.tape().grad_enabled())
      op.dropout = AttentionDropout{config_.dropout, rng_.split()};
    return op(q, k, v, weights);
  }

  MultiHeadConfig config_;
  Rng rng_;
};

// Additive (Bahdanau et al. 2015; "MLP" score) attention per head h, hidden width Da = Dh:
//     s_ij = w_hᵀ tanh(a_i + c_j),   a = x W₁ᵃᵀ + b₁,   c = m W₁ᵇᵀ   (split into H heads of Da),
//     o_i = Σ_j softmax_j(s_ij) v_j   over the allowed keys,   v = m W_Vᵀ + b_V,
// heads merged and projected by out_proj. W₁ [q; k] = W₁ᵃ q + W₁ᵇ k, and a query projection
// before W₁ᵃ would compose with it into one matrix, so q_proj IS W₁ᵃ (with the bias b₁) and
// k_proj IS W₁ᵇ (no bias: a second one would only duplicate b₁).
//
// The scores come from one pairwise op (additive_scores, autodiff/pairwise.hpp) that evaluates
// B·H·Tq·Tk·Da tanh's forward and again backward, skipping pairs the mask rules out (half of
// them under Causal), and stores only the [B, H, Tq, Tk] scores; then masked_softmax and W V.
// Time O(B·H·Tq·Tk·Dh) in tanh's rather than a GEMM's multiply-adds: several times slower than
// scaled-dot attention of the same size. Decoding caches c and v.
//
// Parameters (PyTorch layouts): q_proj (.weight [D, D], .bias [D]), k_proj (.weight [D, D]),
// score_weight [H, Dh] (w_h = score_weight[h], ~ N(0, init_std²)), v_proj and out_proj
// (.weight [D, D], .bias [D]).
template <MaskPolicy Mask = mask::None, HeadsPolicy H = Heads<dynamic>, class T = float>
class AdditiveAttention {
 public:
  using value_type = T;
  using mask_type = Mask;

  explicit AdditiveAttention(const MultiHeadConfig& c)
      : config_(detail::learned::resolve_config<H>(c, "AdditiveAttention")), rng_(c.seed) {
    const index_t d = config_.d_model;
    q_proj = ProjectionWeights<T>(d, d, c.bias, c.init_std, rng_);
    k_proj = ProjectionWeights<T>(d, d, false, c.init_std, rng_);
    v_proj = ProjectionWeights<T>(d, d, c.bias, c.init_std, rng_);
    out_proj = ProjectionWeights<T>(d, d, c.bias, c.init_std, rng_);
    score_weight = Parameter<T>(Tensor<T>::randn({heads(), head_dim()}, rng_, 0.0, c.init_std));
  }

  index_t d_model() const { return config_.d_model; }
  index_t heads() const { return config_.heads; }
  index_t head_dim() const { return config_.d_model / config_.heads; }
  const MultiHeadConfig& config() const { return config_; }

  bool training = true;  // dropout on the weights only while training
  void reseed(std::uint64_t seed) { rng_.reseed(seed); }

  // Self-attention: x [B, T, D] -> [B, T, D]. `weights` receives [B, H, T, T] when given.
  Var<T> operator()(const Var<T>& x, const Mask& mask = {}, Tensor<T>* weights = nullptr) {
    return (*this)(x, x, mask, weights);
  }

  // Cross-attention: queries from x [B, Tq, D], keys and values from memory [B, Tk, D].
  Var<T> operator()(const Var<T>& x, const Var<T>& memory, const Mask& mask,
                    Tensor<T>* weights = nullptr) {
    Tape<T>& tape = x.tape();
    detail::learned::check_input(x, d_model(), "AdditiveAttention", "x");
    detail::learned::check_input(memory, d_model(), "AdditiveAttention", "memory");
    ATTN_CHECK(memory.shape()[0] == x.shape()[0], shape_error, "AdditiveAttention: x ", x.shape(),
               " and memory ", memory.shape(), " differ in batch size");
    const Var<T> a = detail::learned::split_heads(q_proj(tape, x), heads());       // [B, H, Tq, Da]
    const Var<T> c = detail::learned::split_heads(k_proj(tape, memory), heads());  // [B, H, Tk, Da]
    const Var<T> v = detail::learned::split_heads(v_proj(tape, memory), heads());  // [B, H, Tk, Dh]
    return out_proj(tape, detail::learned::merge_heads(attend(a, c, v, mask, weights)));
  }

  // Incremental decoding: the new positions' key sides c [B, H, t, Da] and values v are appended
  // to `cache` (cache.k holds c), and they attend to everything cached.
  Var<T> decode(const Var<T>& x, KVCache<T>& cache, const Mask& mask = {}) {
    Tape<T>& tape = x.tape();
    detail::learned::check_input(x, d_model(), "AdditiveAttention", "x");
    const Var<T> a = detail::learned::split_heads(q_proj(tape, x), heads());
    const Var<T> c_new = detail::learned::split_heads(k_proj(tape, x), heads());
    const Var<T> v_new = detail::learned::split_heads(v_proj(tape, x), heads());
    detail::learned::append_positions(cache.k, c_new.value(), "AdditiveAttention");
    detail::learned::append_positions(cache.v, v_new.value(), "AdditiveAttention");
    const Var<T> o = attend(a, tape.leaf(cache.k), tape.leaf(cache.v), mask, nullptr);
    return out_proj(tape, detail::learned::merge_heads(o));
  }

  // q_proj.weight, q_proj.bias, k_proj.weight, score_weight, v_proj.*, out_proj.*.
  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    detail::learned::visit(f, prefix, "q_proj", q_proj);
    detail::learned::visit(f, prefix, "k_proj", k_proj);
    detail::learned::visit(f, prefix, "score_weight", score_weight);
    detail::learned::visit(f, prefix, "v_proj", v_proj);
    detail::learned::visit(f, prefix, "out_proj", out_proj);
  }

  ProjectionWeights<T> q_proj, k_proj, v_proj, out_proj;
  Parameter<T> score_weight;  // [H, Da]

 private:
  Var<T> attend(const Var<T>& a, const Var<T>& c, const Var<T>& v, const Mask& mask,
                Tensor<T>* weights) {
    Tape<T>& tape = a.tape();
    const Var<T> s = additive_scores(a, c, tape.param(score_weight), mask);  // [B, H, Tq, Tk]
    return detail::learned::softmax_values(s, v, mask, weights, config_.dropout, training, rng_);
  }

  MultiHeadConfig config_;
  Rng rng_;
};

}  // namespace attn
