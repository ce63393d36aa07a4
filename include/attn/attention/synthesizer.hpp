// attn/attention/synthesizer.hpp: SynthesizerAttention, the dense synthesizer (Tay et al. 2020,
// as in XCS224N problem set 5): each head's score row comes from its own token alone,
// ReLU(x_i A_h + b₁) B_h + b₂, truncated to the sequence length; no keys, no q·k products.
// Does not do cross-attention (there is no key to take from a memory) nor sequences longer than
// config.max_length (B_h has one column per position).
#pragma once

#include <cstdint>
#include <string_view>

#include "learned_scores.hpp"

namespace attn {

// Dense synthesizer attention. For head h (of H, width Dh = D / H) and a sequence x [T, D] with
// T <= ℓ = config.max_length:
//     S_h = ReLU(x A_h + b₁,h) B_h[:, :T] + b₂[:T]                       [T, Dh] [Dh, T] -> [T, T]
//     Y_h = softmax(S_h over the allowed keys) (x V_h + b_V,h)           [T, T] [T, Dh] -> [T, Dh]
//     Y   = [Y_1, …, Y_H] W_Oᵀ + b_O                                     [T, D]
// Row i of S_h depends on x_i only, and its column j is B_h's column j: score j of position i
// is the same whatever T is, so decoding position p needs ReLU(x_p A_h + b₁) B_h[:, :p+1] and the
// cached values, no keys. A row with no allowed key gives Y_h row 0 (never NaN).
//
// Parameters, PyTorch layouts (y = x Wᵀ + b):
//   w1.weight [D, D], w1.bias [D]   all A_h side by side: A_h = w1.weight[h·Dh : (h+1)·Dh, :]ᵀ and
//                                   b₁,h = w1.bias[h·Dh : (h+1)·Dh] (the problem set's Linear(d,
//                                   d))
//   w2 [H, Dh, ℓ]                   B_h = w2[h]; ~ N(0, init_std²)
//   b2 [ℓ]                          b₂, shared by the heads as in the problem set's formula (3)
//   v_proj.weight [D, D], v_proj.bias [D], out_proj.weight [D, D], out_proj.bias [D]
// config.bias = false drops every bias (w1, b2, v_proj, out_proj). The problem set's starter code
// shares one w2 [Dh, ℓ − 1] between the heads; this follows formula (3), one B_h per head.
//
// Cost per sequence: O(T·D²) for w1, v_proj and out_proj, O(T²·D) for the scores and weighted
// values (like dot-product attention, but the scores are one GEMM of x's features with a weight
// matrix instead of with the other tokens); H·Dh·ℓ + ℓ parameters beyond D² + D for w1.
template <MaskPolicy Mask = mask::Causal, HeadsPolicy H = Heads<dynamic>, class T = float>
class SynthesizerAttention {
 public:
  using value_type = T;
  using mask_type = Mask;

  explicit SynthesizerAttention(const MultiHeadConfig& c)
      : config_(detail::learned::resolve_config<H>(c, "SynthesizerAttention")), rng_(c.seed) {
    ATTN_CHECK(c.max_length > 0, value_error,
               "SynthesizerAttention: config.max_length must be positive (the longest sequence; "
               "B_h has one column per position), got ",
               c.max_length);
    const index_t d = config_.d_model, l = c.max_length;
    w1 = ProjectionWeights<T>(d, d, c.bias, c.init_std, rng_);
    w2 = Parameter<T>(Tensor<T>::randn({heads(), head_dim(), l}, rng_, 0.0, c.init_std));
    b2 = Parameter<T>(Tensor<T>::zeros({c.bias ? l : 0}));
    v_proj = ProjectionWeights<T>(d, d, c.bias, c.init_std, rng_);
    out_proj = ProjectionWeights<T>(d, d, c.bias, c.init_std, rng_);
  }

  index_t d_model() const { return config_.d_model; }
  index_t heads() const { return config_.heads; }
  index_t head_dim() const { return config_.d_model / config_.heads; }
  index_t max_length() const { return config_.max_length; }
  const MultiHeadConfig& config() const { return config_; }

  bool training = true;  // dropout on the weights only while training
  void reseed(std::uint64_t seed) { rng_.reseed(seed); }

  // Self-attention: x [B, T, D] (T <= max_length) -> [B, T, D]. `weights` receives [B, H, T, T].
  Var<T> operator()(const Var<T>& x, const Mask& mask = {}, Tensor<T>* weights = nullptr) {
    Tape<T>& tape = x.tape();
    detail::learned::check_input(x, d_model(), "SynthesizerAttention", "x");
    const index_t t = x.shape()[1];
    ATTN_CHECK(t <= max_length(), shape_error, "SynthesizerAttention: x ", x.shape(), " has ", t,
               " positions, more than config.max_length = ", max_length());
    const Var<T> s = scores(tape, x, t);                                      // [B, H, T, T]
    const Var<T> v = detail::learned::split_heads(v_proj(tape, x), heads());  // [B, H, T, Dh]
    const Var<T> o = detail::learned::softmax_values(s, v, mask, weights, config_.dropout, training,
                                                     rng_);  // [B, H, T, Dh]
    return out_proj(tape, detail::learned::merge_heads(o));
  }

  // Incremental decoding: x holds the new positions [B, t, D], which follow the L already in
  // `cache` (L + t <= max_length). Their values are appended to cache.v [B, H, L + t, Dh]; cache.k
  // holds no keys, only the count, as a [B, H, L + t, 0] tensor, so cache.length() works. Each
  // new position's score row is computed from its own x, then it attends to the cached values.
  Var<T> decode(const Var<T>& x, KVCache<T>& cache, const Mask& mask = {}) {
    Tape<T>& tape = x.tape();
    detail::learned::check_input(x, d_model(), "SynthesizerAttention", "x");
    const index_t batch = x.shape()[0], t = x.shape()[1], l = cache.length();
    ATTN_CHECK(l + t <= max_length(), shape_error, "SynthesizerAttention::decode: positions ", l,
               "..", l + t - 1, " exceed config.max_length = ", max_length());
    const Var<T> s = scores(tape, x, l + t);  // [B, H, t, L + t]
    const Var<T> v_new = detail::learned::split_heads(v_proj(tape, x), heads());
    detail::learned::append_positions(cache.k, Tensor<T>(Shape{batch, heads(), t, 0}),
                                      "SynthesizerAttention");
    detail::learned::append_positions(cache.v, v_new.value(), "SynthesizerAttention");
    const Var<T> o = detail::learned::softmax_values(s, tape.leaf(cache.v), mask, nullptr,
                                                     config_.dropout, training, rng_);
    return out_proj(tape, detail::learned::merge_heads(o));
  }

  // w1.weight, w1.bias, w2, b2, v_proj.weight, v_proj.bias, out_proj.weight, out_proj.bias
  // (biases only with config.bias).
  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    detail::learned::visit(f, prefix, "w1", w1);
    detail::learned::visit(f, prefix, "w2", w2);
    if (config_.bias) detail::learned::visit(f, prefix, "b2", b2);
    detail::learned::visit(f, prefix, "v_proj", v_proj);
    detail::learned::visit(f, prefix, "out_proj", out_proj);
  }

  ProjectionWeights<T> w1, v_proj, out_proj;
  Parameter<T> w2;  // [H, Dh, ℓ]
  Parameter<T> b2;  // [ℓ] ([0] without bias)

 private:
  // Scores of the positions in x [B, t, D] against keys 0 .. tk − 1:
  // ReLU(x A_h + b₁) B_h[:, :tk] + b₂[:tk]  -> [B, H, t, tk].
  Var<T> scores(Tape<T>& tape, const Var<T>& x, index_t tk) {
    const Var<T> hidden = relu(w1(tape, x));        // [B, t, D]: every head's features
    const Var<T> b = slice(tape.param(w2), 0, tk);  // [H, Dh, tk]
    Var<T> s = detail::learned::per_head_matmul(hidden, b, false);  // [B, H, t, tk]
    if (config_.bias) s = s + slice(tape.param(b2), 0, tk);         // b₂[:tk] on every row
    return s;
  }

  MultiHeadConfig config_;
  Rng rng_;
};

}  // namespace attn
