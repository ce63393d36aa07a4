// attn/approx/linformer.hpp: LinformerAttention, low-rank attention (Wang et al. 2020) as a
// trainable module with MultiHeadAttention's interface: keys and values are projected along the
// sequence axis to K rows by learned matrices E and F, so each query attends to K "virtual" keys.
// Does not approximate a trained model's attention (the projections are learned with the model;
// approx/evaluation.hpp swaps approximations into trained models) nor share E between layers.
//
// Why a module of its own and not a score policy of MultiHeadAttention: a score maps a query and
// a key (or a query alone) to a number, and its transforms act on one token at a time. Linformer's
// E and F mix the keys and the values of different positions, and under a mask each query row
// needs its own mix (see below), so neither the score contract, the key/value cache nor any
// fused path applies. It shares the module pieces (config checks, head split, visitor, cache).
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "../attention/multi_head.hpp"

namespace attn::approx {

// Linformer attention with K projected rows. For head h (width Dh) and keys/values k, v [Tk, Dh]
// of a sequence whose length Tk <= ℓ = config.max_length:
//     k' = E[:, :Tk] k,   v' = F[:, :Tk] v                              [K, Tk] [Tk, Dh] -> [K, Dh]
//     o_i = Σ_m softmax_m(q_i·k'_m / √Dh) v'_m                          [Tq, K] [K, Dh] -> [Tq, Dh]
// E and F [K, ℓ] are shared by the heads (Linformer's "headwise sharing").
//
// Under a mask, row i's projection mixes only the keys row i may see, so a causal model cannot
// read the future through the projected rows:
//     k'_{i,m} = Σ_{j allowed for i} E[m, j] k_j,   v'_{i,m} = Σ_{j allowed for i} F[m, j] v_j.
// Then q_i·k'_{i,m} = Σ_j [allowed] (q_i·k_j) E[m, j], i.e. the scores are (QKᵀ ⊙ M) Eᵀ and the
// output is ((W F) ⊙ M) V with W the [Tq, K] weights; that is how it is computed, through
// [Tq, Tk] intermediates, O(Tq·Tk·(Dh + K)). Only mask::None takes the O(T·K·Dh) route of the
// paper (project once, attend to K rows). A row with no allowed key gets output 0.
//
// Parameters (PyTorch layouts): q_proj, k_proj, v_proj, out_proj (.weight [D, D], .bias [D]) as in
// MultiHeadAttention, and e_proj, f_proj [K, ℓ] ~ N(0, 1/ℓ), so a projected row starts at the
// scale of one key whatever the length (ℓ terms of variance 1/ℓ each).
template <index_t K, MaskPolicy Mask = mask::None, HeadsPolicy H = Heads<dynamic>, class T = float>
class LinformerAttention {
  static_assert(K > 0, "attn: Linformer needs at least one projected row");

 public:
  using value_type = T;
  using mask_type = Mask;
  static constexpr index_t rows = K;

  explicit LinformerAttention(const MultiHeadConfig& c)
      : config_(attn::detail::resolve_heads<H>(c, "LinformerAttention")), rng_(c.seed) {
    ATTN_CHECK(config_.kv_heads == config_.heads, value_error,
               "LinformerAttention: grouped key/value heads are not supported (kv_heads = ",
               c.kv_heads, "); use 0 or ", config_.heads);
    ATTN_CHECK(c.max_length > 0, value_error,
               "LinformerAttention: config.max_length must be positive (the longest sequence; E "
               "and F have one column per position), got ",
               c.max_length);
    const index_t d = config_.d_model, l = c.max_length;
    q_proj = ProjectionWeights<T>(d, d, c.bias, c.init_std, rng_);
    k_proj = ProjectionWeights<T>(d, d, c.bias, c.init_std, rng_);
    v_proj = ProjectionWeights<T>(d, d, c.bias, c.init_std, rng_);
    out_proj = ProjectionWeights<T>(d, d, c.bias, c.init_std, rng_);
    const double std = 1.0 / std::sqrt(static_cast<double>(l));
    e_proj = Parameter<T>(Tensor<T>::randn({K, l}, rng_, 0.0, std));
    f_proj = Parameter<T>(Tensor<T>::randn({K, l}, rng_, 0.0, std));
  }

  index_t d_model() const { return config_.d_model; }
  index_t heads() const { return config_.heads; }
  index_t head_dim() const { return config_.d_model / config_.heads; }
  index_t max_length() const { return config_.max_length; }
  const MultiHeadConfig& config() const { return config_; }

  bool training = true;  // dropout on the weights only while training
  void reseed(std::uint64_t seed) { rng_.reseed(seed); }

  // Self-attention: x [B, T, D] (T <= max_length) -> [B, T, D]. `weights` receives the weights
  // over the projected rows, [B, H, T, K].
  Var<T> operator()(const Var<T>& x, const Mask& mask = {}, Tensor<T>* weights = nullptr) {
    Tape<T>& tape = x.tape();
    attn::detail::check_module_input(x, d_model(), "LinformerAttention", "x");
    check_length(x.shape()[1], "");
    const Var<T> q = attn::detail::split_heads(q_proj(tape, x), heads());  // [B, H, T, Dh]
    const Var<T> k = attn::detail::split_heads(k_proj(tape, x), heads());
    const Var<T> v = attn::detail::split_heads(v_proj(tape, x), heads());
    return out_proj(tape, attn::detail::merge_heads(attend(q, k, v, mask, weights)));
  }

  // Incremental decoding: x holds the new positions [B, t, D], which follow the L in `cache`
  // (L + t <= max_length); their keys and values are appended (k, v [B, H, L + t, Dh]) and the
  // new rows attend as in the full pass (with Causal, end-aligned). Costs O((L + t)·(Dh + K))
  // per new position and head.
  Var<T> decode(const Var<T>& x, KVCache<T>& cache, const Mask& mask = {}) {
    Tape<T>& tape = x.tape();
    attn::detail::check_module_input(x, d_model(), "LinformerAttention", "x");
    check_length(cache.length() + x.shape()[1], "::decode");
    const Var<T> q = attn::detail::split_heads(q_proj(tape, x), heads());
    const Var<T> k_new = attn::detail::split_heads(k_proj(tape, x), heads());
    const Var<T> v_new = attn::detail::split_heads(v_proj(tape, x), heads());
    cache.append(k_new.value(), v_new.value(), "LinformerAttention");
    // E and F multiply whole key and value columns: contiguous copies of the cached rows.
    const Var<T> o = attend(q, tape.leaf(cache.keys()), tape.leaf(cache.values()), mask, nullptr);
    return out_proj(tape, attn::detail::merge_heads(o));
  }

  // q_proj, k_proj, v_proj, out_proj (.weight, .bias), e_proj, f_proj.
  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    attn::detail::visit_projection(f, prefix, "q_proj", q_proj);
    attn::detail::visit_projection(f, prefix, "k_proj", k_proj);
    attn::detail::visit_projection(f, prefix, "v_proj", v_proj);
    attn::detail::visit_projection(f, prefix, "out_proj", out_proj);
    attn::detail::visit_parameter(f, prefix, "e_proj", e_proj);
    attn::detail::visit_parameter(f, prefix, "f_proj", f_proj);
  }

  ProjectionWeights<T> q_proj, k_proj, v_proj, out_proj;
  Parameter<T> e_proj;  // E [K, ℓ]
  Parameter<T> f_proj;  // F [K, ℓ]

 private:
  void check_length(index_t t, const char* where) const {
    ATTN_CHECK(t <= max_length(), shape_error, "LinformerAttention", where, ": ", t,
               " positions exceed config.max_length = ", max_length());
  }

  // q [B, H, Tq, Dh], k and v [B, H, Tk, Dh] -> [B, H, Tq, Dh].
  Var<T> attend(const Var<T>& q, const Var<T>& k, const Var<T>& v, const Mask& mask,
                Tensor<T>* weights) {
    Tape<T>& tape = q.tape();
    const Shape& qs = q.shape();
    const index_t batch = qs[0], h = qs[1], tq = qs[2], tk = k.shape()[2];
    mask.validate(batch, tq, tk);
    const Var<T> e = slice(tape.param(e_proj), 0, tk);  // [K, Tk]
    const Var<T> f = slice(tape.param(f_proj), 0, tk);  // [K, Tk]
    const bool drop = training && config_.dropout > 0 && tape.grad_enabled();

    if constexpr (std::is_same_v<Mask, mask::None>) {
      const Var<T> kp = matmul(e, k);  // [B, H, K, Dh]
      const Var<T> vp = matmul(f, v);  // [B, H, K, Dh]
      Attention<score::ScaledDot, kernel::Softmax, mask::None> op;
      if (drop) op.dropout = AttentionDropout{config_.dropout, rng_.split()};
      return op(q, kp, vp, weights);
    } else {
      // M [B, H, Tq, Tk]: 1 where the mask allows the pair.
      Tensor<T> allowed(Shape{batch, h, tq, tk});
      for (index_t b = 0; b < batch; ++b)
        for (index_t hh = 0; hh < h; ++hh)
          for (index_t i = 0; i < tq; ++i)
            for (index_t j = 0; j < tk; ++j)
              allowed(b, hh, i, j) = mask.allowed(b, i, j, tq, tk) ? T{1} : T{0};
      const Var<T> m = tape.leaf(allowed);
      const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(qs[3])));
      const Var<T> qk = matmul(q, k, false, true) * m;      // (QKᵀ ⊙ M) [B, H, Tq, Tk]
      const Var<T> s = matmul(qk, e, false, true) * scale;  // [B, H, Tq, K]
      Var<T> w = softmax(s);                                // [B, H, Tq, K]
      if (weights) *weights = w.value();
      if (drop) w = dropout(w, config_.dropout, rng_);
      const Var<T> p = matmul(w, f) * m;  // ((W F) ⊙ M) [B, H, Tq, Tk]
      return matmul(p, v);                // [B, H, Tq, Dh]
    }
  }

  MultiHeadConfig config_;
  Rng rng_;
};

}  // namespace attn::approx
