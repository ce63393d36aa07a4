// attn/attention/multi_head.hpp: MultiHeadAttention, the one attention module: input
// projections, heads, the score policy (score.hpp, module_scores.hpp) with its parameters, the
// Attention operator, output projection; self- and cross-attention, batch-first [B, T, D];
// separate or tied query/key projections, grouped key/value heads; a key/value cache for
// incremental decoding that grows by doubling and is read in place.
// Does not add residuals or norms (nn::TransformerBlock does) nor positions to the input
// (positional scores, score::Rotary and score::Alibi, act inside the score).
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "attention.hpp"
#include "module_scores.hpp"

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

// Keys and values of the positions decoded so far. Stored as [B, Hk, C, Dk] and [B, Hk, C, Dv]
// with capacity C >= length(): rows [0, length()) of each head hold the positions, the rest is
// room to grow. append() doubles C when it runs out, so a decoding step copies only its new rows
// (amortised O(1) per position, not a copy of the whole cache per token), and the attention
// paths that can read k and v in place do (the fused and materialised ones, via key_length).
// Dk may be 0: a key-free score (score::Synthesizer) caches values only.
template <class T>
class KVCache {
 public:
  index_t length() const { return length_; }
  index_t capacity() const { return v_.rank() == 4 ? v_.shape()[2] : 0; }
  void clear() {
    k_ = v_ = Tensor<T>();
    length_ = 0;
  }

  // The storage, [B, Hk, capacity(), D]: rows past length() of each head are unspecified.
  const Tensor<T>& key_storage() const { return k_; }
  const Tensor<T>& value_storage() const { return v_; }
  // [B, Hk, length(), D] copies, for paths that need contiguous keys or values.
  Tensor<T> keys() const { return prefix(k_); }
  Tensor<T> values() const { return prefix(v_); }

  // Appends k_new [B, Hk, t, Dk] and v_new [B, Hk, t, Dv] after the positions held; `who` names
  // the caller in the shape_error a cache from another module (or batch) gets.
  void append(const Tensor<T>& k_new, const Tensor<T>& v_new, const char* who) {
    const Shape &fk = k_new.shape(), &fv = v_new.shape();
    ATTN_CHECK(
        fk.rank() == 4 && fv.rank() == 4 && fk[0] == fv[0] && fk[1] == fv[1] && fk[2] == fv[2],
        shape_error, who, "::decode: new keys ", fk, " and values ", fv, " do not pair up");
    if (length_ > 0) {
      const Shape &ck = k_.shape(), &cv = v_.shape();
      ATTN_CHECK(ck[0] == fk[0] && ck[1] == fk[1] && ck[3] == fk[3] && cv[3] == fv[3], shape_error,
                 who, "::decode: the cache holds keys [", ck[0], ", ", ck[1], ", ", length_, ", ",
                 ck[3], "] that do not fit the new positions ", fk,
                 " (a cache from another module?)");
    }
    const index_t t = fk[2], need = length_ + t;
    if (need > capacity()) {
      const index_t grown = std::max(need, 2 * capacity());
      k_ = regrown(k_, fk, grown);
      v_ = regrown(v_, fv, grown);
    }
    write_rows(k_, k_new);
    write_rows(v_, v_new);
    length_ = need;
  }

 private:
  // `old` (its first length_ rows per head) in a new tensor of `rows` rows per head.
  Tensor<T> regrown(const Tensor<T>& old, const Shape& fresh, index_t rows) const {
    Tensor<T> out(Shape{fresh[0], fresh[1], rows, fresh[3]});
    const index_t d = fresh[3];
    if (length_ > 0)
      for (index_t bh = 0; bh < fresh[0] * fresh[1]; ++bh)
        std::copy_n(old.data() + bh * old.shape()[2] * d, length_ * d, out.data() + bh * rows * d);
    return out;
  }
  void write_rows(Tensor<T>& store, const Tensor<T>& fresh) const {
    const Shape& f = fresh.shape();
    const index_t d = f[3], rows = store.shape()[2];
    for (index_t bh = 0; bh < f[0] * f[1]; ++bh)
      std::copy_n(fresh.data() + bh * f[2] * d, f[2] * d, store.data() + (bh * rows + length_) * d);
  }
  Tensor<T> prefix(const Tensor<T>& store) const {
    if (store.rank() != 4) return Tensor<T>();
    const Shape& s = store.shape();
    Tensor<T> out(Shape{s[0], s[1], length_, s[3]});
    for (index_t bh = 0; bh < s[0] * s[1]; ++bh)
      std::copy_n(store.data() + bh * s[2] * s[3], length_ * s[3],
                  out.data() + bh * length_ * s[3]);
    return out;
  }

  Tensor<T> k_, v_;
  index_t length_ = 0;
};

namespace detail {

// Checks a MultiHeadConfig and fills in what the type fixes (Heads<N>) or implies (kv_heads);
// `who` names the module in the value_error.
template <class H>
MultiHeadConfig resolve_heads(MultiHeadConfig c, const char* who) {
  if constexpr (H::count != dynamic) {
    ATTN_CHECK(c.heads == 0 || c.heads == H::count, value_error, who, ": config.heads = ", c.heads,
               " but the type fixes ", H::count, " heads");
    c.heads = H::count;
  }
  ATTN_CHECK(c.heads > 0, value_error, who, ": the head count must be positive, got ", c.heads);
  ATTN_CHECK(c.d_model > 0 && c.d_model % c.heads == 0, value_error, who, ": d_model ", c.d_model,
             " must be divisible by the head count ", c.heads);
  if (c.kv_heads == 0) c.kv_heads = c.heads;
  ATTN_CHECK(c.kv_heads > 0 && c.heads % c.kv_heads == 0, value_error, who, ": ", c.kv_heads,
             " key/value heads do not divide ", c.heads, " query heads");
  ATTN_CHECK(c.dropout >= 0 && c.dropout < 1, value_error, who, ": dropout ", c.dropout,
             " outside [0, 1)");
  return c;
}

template <class T>
void check_module_input(const Var<T>& x, index_t d_model, const char* who, const char* what) {
  ATTN_CHECK(x.shape().rank() == 3 && x.shape()[2] == d_model, shape_error, who, ": ", what,
             " must be [B, T, ", d_model, "], got ", x.shape());
}

// [B, T, n·Dh] -> [B, n, T, Dh]
template <class T>
Var<T> split_heads(const Var<T>& x, index_t n) {
  const Shape& s = x.shape();
  return transpose_reshape(x, {s[0], s[1], n, s[2] / n}, 1, 2, {s[0], n, s[1], s[2] / n});
}

// [B, H, T, Dv] -> [B, T, H·Dv]
template <class T>
Var<T> merge_heads(const Var<T>& o) {
  const Shape& s = o.shape();
  return transpose_reshape(o, s, 1, 2, {s[0], s[2], s[1] * s[3]});
}

// o = W V for weights w [B, H, Tq, Tk] and values v [B, Hk, Tk, Dv], query head h reading value
// head h / (H / Hk): the H heads are Hk groups of consecutive heads, so w is [B, Hk, G·Tq, Tk]
// as it lies in memory and one batched product serves a whole group.
template <class T>
Var<T> grouped_values(const Var<T>& w, const Var<T>& v) {
  const Shape &sw = w.shape(), &sv = v.shape();
  if (sw[1] == sv[1]) return matmul(w, v);  // [B, H, Tq, Dv]
  const index_t group = sw[1] / sv[1];
  const Var<T> o = matmul(reshape(w, {sw[0], sv[1], group * sw[2], sw[3]}), v);
  return reshape(o, {sw[0], sw[1], sw[2], sv[3]});
}

template <class T, class F>
void visit_projection(F& f, std::string_view prefix, std::string_view name,
                      ProjectionWeights<T>& p) {
  std::string base(prefix);
  if (!base.empty()) base += '.';
  base += name;
  f(base + ".weight", p.weight);
  if (p.has_bias) f(base + ".bias", p.bias);
}

}  // namespace detail

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

// Multi-head attention with any score policy. Per head h (query heads H, key/value heads Hk
// dividing H, width Dh = D / H) and q = x W_Qᵀ + b_Q, k = m W_Kᵀ + b_K, v = m W_Vᵀ + b_V split
// into heads (m = x for self-attention; tied: W_K = W_Q):
//     o_i,h = Σ_j κ(s(q_i, k_j)) v_j / Σ_j κ(s(q_i, k_j))   over the keys the mask allows,
//     y = [o_1, …, o_H] W_Oᵀ + b_O.
// The score's form (module_scores.hpp) picks the path at compile time:
//   quadratic    Attention<Score, Kernel, Mask> on q, k (fused, linear or materialised);
//   transformed  Attention<Score::inner, Kernel, Mask> on transform_q(q), transform_k(k);
//   pairwise     Score::scores(q, k) -> masked softmax -> W V (softmax kernel only);
//   key_free     Score::scores(q) -> masked softmax -> W V (no key projection, no cross-attention).
// Parameters are drawn q, k, v, out and then the score's (a key-free score's in the key
// projection's place) and visited q_proj (qk_proj when tied; the score's query_name), k_proj, the
// score's, v_proj, out_proj. Invalid combinations fail to compile with an `attn:` sentence.
template <MultiHeadScore Score = score::ScaledDot, KernelPolicy Kernel = kernel::Softmax,
          MaskPolicy Mask = mask::None, HeadsPolicy H = Heads<dynamic>,
          ProjectionPolicy Projection = projection::Separate, class T = float>
class MultiHeadAttention {
  static constexpr ScoreForm form = score_form<Score>();
  static constexpr bool key_free = form == ScoreForm::key_free;
  static constexpr bool scores_materialised = form == ScoreForm::pairwise || key_free;
  static constexpr bool sinks_possible =
      !scores_materialised && std::is_same_v<Kernel, kernel::Softmax>;
  static constexpr bool learned_bias_possible = !scores_materialised && !Kernel::feature_map;

  static_assert(!scores_materialised || std::is_same_v<Kernel, kernel::Softmax>,
                "attn: pairwise and key-free scores (score::Additive, score::Synthesizer) are "
                "normalised by a masked softmax; use kernel::Softmax");
  using InnerScore = inner_score_t<Score>;  // what the Attention operator computes
  static_assert(!Kernel::feature_map || !HasPositionBias<InnerScore>,
                "attn: linear attention (a feature-map kernel) has no per-pair score to add a "
                "position bias to; score::Alibi needs a score kernel such as kernel::Softmax");
  static_assert(!key_free || !Projection::tied,
                "attn: a key-free score (score::Synthesizer) has no key projection to tie to the "
                "query projection");

 public:
  using value_type = T;
  using mask_type = Mask;
  using score_type = Score;
  using params_type = score_params_t<Score, T>;
  static constexpr bool tied = Projection::tied;

  explicit MultiHeadAttention(const MultiHeadConfig& c)
      : config_(detail::resolve_heads<H>(c, "MultiHeadAttention")), rng_(c.seed) {
    ATTN_CHECK(!tied || config_.kv_heads == config_.heads, value_error,
               "MultiHeadAttention: tied query/key projections need one key head per query head");
    const index_t d = d_model(), kv_width = kv_heads() * head_dim();
    q_proj = ProjectionWeights<T>(d, d, c.bias, c.init_std, rng_);
    if constexpr (key_free)
      score_params = params_type(config_, rng_);
    else if constexpr (!tied)
      k_proj =
          ProjectionWeights<T>(kv_width, d, c.bias && score_key_bias<Score>(), c.init_std, rng_);
    v_proj = ProjectionWeights<T>(kv_width, d, c.bias, c.init_std, rng_);
    out_proj = ProjectionWeights<T>(d, d, c.bias, c.init_std, rng_);
    if constexpr (!key_free) score_params = params_type(config_, rng_);
    ATTN_CHECK(!c.sinks || sinks_possible, value_error,
               "MultiHeadAttention: attention sinks (config.sinks) need the fused softmax path: "
               "kernel::Softmax with a quadratic or transformed score");
    if (c.sinks) sinks = Parameter<T>(Tensor<T>(Shape{heads()}));  // 0: softmax one at start
    ATTN_CHECK(c.position_bias == LearnedPositionBias::none || learned_bias_possible, value_error,
               "MultiHeadAttention: a learned position bias (config.position_bias) needs a score "
               "kernel (not a feature map) with a quadratic or transformed score");
    if (c.position_bias == LearnedPositionBias::t5) {
      detail::check_t5_settings(c.t5_buckets, c.t5_max_distance, c.t5_bidirectional,
                                "MultiHeadAttention");
      position_bias = Parameter<T>(Tensor<T>(Shape{heads(), c.t5_buckets}));
    } else if (c.position_bias == LearnedPositionBias::alibi) {
      position_bias = Parameter<T>(alibi_slopes<T>(heads()));
    }
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
  // For transformed scores it sees the transformed q and k; for key-free scores k is empty.
  AttentionProbe<T> probe;

  // Self-attention: x [B, T, D] -> [B, T, D]. `weights` receives [B, H, T, T] when given.
  Var<T> operator()(const Var<T>& x, const Mask& mask = {}, Tensor<T>* weights = nullptr) {
    return forward(x, x, true, mask, weights);
  }

  // Cross-attention: queries from x [B, Tq, D], keys and values from memory [B, Tk, D].
  Var<T> operator()(const Var<T>& x, const Var<T>& memory, const Mask& mask,
                    Tensor<T>* weights = nullptr) {
    static_assert(!key_free,
                  "attn: a key-free score (score::Synthesizer) has no keys to take from a memory: "
                  "no cross-attention");
    return forward(x, memory, false, mask, weights);
  }

  // Incremental decoding: x holds the new positions [B, t, D], which follow the L already in
  // `cache` (positions L … L + t − 1); their keys (transformed, for transformed scores) and
  // values are appended and they attend to everything cached (with Causal, end-aligned, each new
  // position sees itself and the past). Costs O(L·D) per new position for L cached ones; the
  // cache grows by doubling and the fused and materialised paths read it in place.
  Var<T> decode(const Var<T>& x, KVCache<T>& cache, const Mask& mask = {}) {
    Tape<T>& tape = x.tape();
    detail::check_module_input(x, d_model(), "MultiHeadAttention", "x");
    const index_t L = cache.length(), t = x.shape()[1];
    const Var<T> q = detail::split_heads(q_proj(tape, x), heads());     // [B, H, t, Dh]
    const Var<T> v = detail::split_heads(v_proj(tape, x), kv_heads());  // [B, Hk, t, Dh]
    Var<T> k;
    if constexpr (!key_free)
      k = tied ? q : detail::split_heads(key_projection()(tape, x), kv_heads());
    // The new keys (transformed, for transformed scores) and values join the cache; attention
    // reads all of it.
    auto cached = [&](const Var<T>& k_new, const Var<T>& v_new) {
      if constexpr (key_free) {
        const Shape& s = v_new.shape();
        cache.append(Tensor<T>(Shape{s[0], s[1], s[2], 0}), v_new.value(), "MultiHeadAttention");
        return Keys{Var<T>(), tape.leaf(cache.values()), 0};
      } else {
        cache.append(k_new.value(), v_new.value(), "MultiHeadAttention");
        if constexpr (form == ScoreForm::pairwise || Kernel::feature_map)  // whole tensors
          return Keys{tape.leaf(cache.keys()), tape.leaf(cache.values()), 0};
        // Read in place when nothing will run backward through the step; with gradients
        // recorded, a copy, so a later append that moves the storage cannot pull it away.
        auto stored = [&](const Tensor<T>& s) {
          return tape.grad_enabled() ? tape.leaf(s) : tape.view(s);
        };
        return Keys{stored(cache.key_storage()), stored(cache.value_storage()), cache.length()};
      }
    };
    return attend_form(q, k, v, L, L, L + t, mask, nullptr, cached);
  }

  // Visits every parameter with its name: q_proj.weight, q_proj.bias, k_proj.*, the score's,
  // v_proj.*, out_proj.*, sinks with config.sinks and position_bias with config.position_bias
  // (under "prefix." when a prefix is given).
  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    detail::visit_projection(f, prefix, tied ? "qk_proj" : score_query_name<Score>(), q_proj);
    if constexpr (!tied && !key_free) detail::visit_projection(f, prefix, "k_proj", k_proj);
    score_params.for_each_parameter(f, prefix);
    detail::visit_projection(f, prefix, "v_proj", v_proj);
    detail::visit_projection(f, prefix, "out_proj", out_proj);
    if (config_.sinks) detail::visit_parameter(f, prefix, "sinks", sinks);
    if (config_.position_bias != LearnedPositionBias::none)
      detail::visit_parameter(f, prefix, "position_bias", position_bias);
  }

  // k_proj is unused when tied or for a key-free score.
  ProjectionWeights<T> q_proj, k_proj, v_proj, out_proj;
  params_type score_params;  // the score's own parameters (none for most)
  Parameter<T> sinks;        // [H] with config.sinks, else empty
  // With config.position_bias: T5's table [H, t5_buckets] or ALiBi's slopes [H]; else empty.
  Parameter<T> position_bias;

 private:
  ProjectionWeights<T>& key_projection() { return tied ? q_proj : k_proj; }

  Var<T> forward(const Var<T>& x, const Var<T>& m, bool self, const Mask& mask,
                 Tensor<T>* weights) {
    Tape<T>& tape = x.tape();
    detail::check_module_input(x, d_model(), "MultiHeadAttention", "x");
    if (!self) {
      detail::check_module_input(m, d_model(), "MultiHeadAttention", "memory");
      ATTN_CHECK(m.shape()[0] == x.shape()[0], shape_error, "MultiHeadAttention: x ", x.shape(),
                 " and memory ", m.shape(), " differ in batch size");
    }
    const index_t tq = x.shape()[1], tk = m.shape()[1];
    const Var<T> q = detail::split_heads(q_proj(tape, x), heads());     // [B, H, Tq, Dh]
    const Var<T> v = detail::split_heads(v_proj(tape, m), kv_heads());  // [B, Hk, Tk, Dh]
    Var<T> k;
    if constexpr (!key_free)
      k = tied ? (self ? q : detail::split_heads(q_proj(tape, m), heads()))
               : detail::split_heads(key_projection()(tape, m), kv_heads());
    // Queries end-aligned with the keys.
    return attend_form(q, k, v, 0, tk - tq, tk, mask, weights,
                       [](const Var<T>& k_all, const Var<T>& v_all) {
                         return Keys{k_all, v_all, 0};
                       });
  }

  // The keys and values attention reads: k empty for a key-free score; key_length > 0 when they
  // are a cache's storage, of which the first key_length rows per head count.
  struct Keys {
    Var<T> k, v;
    index_t key_length;
  };

  // The one dispatch on the score's form, for forward and decode: q [B, H, Tq, Dh] and the new
  // k, v (k empty for a key-free score), whose first key sits at position k_position and first
  // query at q_position, attending to tk keys in all; keys(k', v) gives the keys to read from
  // the new ones (transformed, for a transformed score): forward's own, or the cache after it
  // took them. A key-free score's scores are made first, so a decoding step past its longest
  // sequence throws with the cache untouched.
  template <class KeysOf>
  Var<T> attend_form(Var<T> q, Var<T> k, const Var<T>& v, index_t k_position, index_t q_position,
                     index_t tk, const Mask& mask, Tensor<T>* weights, KeysOf&& keys) {
    if constexpr (key_free) {
      const Var<T> scores = score.scores(score_params, q, tk, mask);
      const Keys kv = keys(Var<T>(), v);
      return finish(attend_scores(scores, q, Var<T>(), kv.v, mask, weights));
    } else {
      if constexpr (form == ScoreForm::transformed) {
        k = score.transform_k(score_params, k, k_position);
        q = score.transform_q(score_params, q, q_position);
      }
      const Keys kv = keys(k, v);
      if constexpr (form == ScoreForm::pairwise)
        return finish(
            attend_scores(score.scores(score_params, q, kv.k, mask), q, kv.k, kv.v, mask, weights));
      else
        return finish(attend(q, kv.k, kv.v, mask, weights, kv.key_length));
    }
  }

  // [B, H, T, Dv] -> out_proj of the merged heads, [B, T, D].
  Var<T> finish(const Var<T>& o) { return out_proj(o.tape(), detail::merge_heads(o)); }

  bool dropping(const Tape<T>& tape) const {
    return training && config_.dropout > 0 && tape.grad_enabled();
  }

  // The probe's turn (evaluation only): it sees the step and may replace the output.
  Var<T> probed(AttentionStep<T>& step, Tensor<T>* weights, Tape<T>& tape) {
    const Shape expected = step.output.shape();
    probe(step);
    ATTN_CHECK(step.output.shape() == expected, shape_error,
               "MultiHeadAttention: the probe changed the output shape from ", expected, " to ",
               step.output.shape());
    if (weights != nullptr) *weights = std::move(step.weights);
    return tape.leaf(step.output);
  }

  // Quadratic and transformed scores: the Attention operator (with the sinks and the learned
  // position bias, when the config has them). key_length > 0: k and v are a cache's storage, of
  // which the first key_length rows per head are attended to.
  Var<T> attend(const Var<T>& q, const Var<T>& k, const Var<T>& v, const Mask& mask,
                Tensor<T>* weights, index_t key_length = 0) {
    InnerScore inner{};
    if constexpr (form == ScoreForm::quadratic) inner = score;
    Attention<InnerScore, Kernel, Mask> op{inner, kernel, mask};
    op.key_length = key_length;
    if (dropping(q.tape())) op.dropout = AttentionDropout{config_.dropout, rng_.split()};
    auto run = [&](const Var<T>& kk, const Var<T>& vv, Tensor<T>* w) {
      if constexpr (learned_bias_possible)
        if (config_.position_bias != LearnedPositionBias::none) {
          const LearnedBias<T> b = learned_position_bias(q.tape());
          if constexpr (sinks_possible)
            if (config_.sinks) return sunk(op.partial(q, kk, vv, b, w), w);
          return op(q, kk, vv, b, w);
        }
      if constexpr (sinks_possible)
        if (config_.sinks) return sunk(op.partial(q, kk, vv, w), w);
      return op(q, kk, vv, w);
    };
    if (!probe || q.tape().grad_enabled()) return run(k, v, weights);

    Tape<T>& tape = q.tape();
    AttentionStep<T> step{
        q.value(), compact(k.value(), key_length), compact(v.value(), key_length), {}, {}};
    op.key_length = 0;  // the probe sees the cached rows only
    step.output = (key_length == 0 ? run(k, v, &step.weights)
                                   : run(tape.leaf(step.k), tape.leaf(step.v), &step.weights))
                      .value();
    return probed(step, weights, tape);
  }

  // The config's learned position bias on this tape.
  LearnedBias<T> learned_position_bias(Tape<T>& tape) {
    const Var<T> p = tape.param(position_bias);
    if (config_.position_bias == LearnedPositionBias::alibi) return learned_alibi(p);
    return t5_relative_bias(p, config_.t5_bidirectional, config_.t5_max_distance);
  }

  // The partial p with the sinks in its softmax; the weights w (when given) scaled to match.
  Var<T> sunk(const AttentionPartial<T>& p, Tensor<T>* w) {
    const AttentionPartial<T> s = attention_sink(p, p.output.tape().param(sinks));
    if (w) {
      const index_t tk = w->shape()[3];
      for (index_t r = 0; r < p.lse.numel(); ++r) {
        const T before = p.lse.value()[r];
        const T keep = before == -std::numeric_limits<T>::infinity()
                           ? T{0}
                           : std::exp(before - s.lse.value()[r]);
        for (index_t j = 0; j < tk; ++j) (*w)[r * tk + j] *= keep;
      }
    }
    return s.output;
  }

  // Pairwise and key-free scores s [B, H, Tq, Tk]: W = masked softmax (dropped out while
  // training; `weights` receives it before dropout), o = W V. A row with no allowed key gives 0.
  Var<T> attend_scores(const Var<T>& s, const Var<T>& q, const Var<T>& k, const Var<T>& v,
                       const Mask& mask, Tensor<T>* weights) {
    Tape<T>& tape = s.tape();
    Var<T> w = masked_softmax(s, mask);  // [B, H, Tq, Tk]
    if (weights) *weights = w.value();
    if (dropping(tape)) w = dropout(w, config_.dropout, rng_);
    const Var<T> o = detail::grouped_values(w, v);  // [B, H, Tq, Dv]
    if (!probe || tape.grad_enabled()) return o;
    AttentionStep<T> step{q.value(), k.valid() ? k.value() : Tensor<T>(), v.value(), w.value(),
                          o.value()};
    return probed(step, weights, tape);
  }

  // The first `rows` rows per head of t [B, N, L, D] (all of t when rows is 0).
  static Tensor<T> compact(const Tensor<T>& t, index_t rows) {
    if (rows == 0 || rows == t.shape()[2]) return t;
    const Shape& s = t.shape();
    Tensor<T> out(Shape{s[0], s[1], rows, s[3]});
    for (index_t bh = 0; bh < s[0] * s[1]; ++bh)
      std::copy_n(t.data() + bh * s[2] * s[3], rows * s[3], out.data() + bh * rows * s[3]);
    return out;
  }

  MultiHeadConfig config_;
  Rng rng_;
};

// The learned-score modules of earlier versions, as the scores they are now.
template <MaskPolicy Mask = mask::None, HeadsPolicy H = Heads<dynamic>, class T = float>
using BilinearAttention =
    MultiHeadAttention<score::Bilinear, kernel::Softmax, Mask, H, projection::Separate, T>;
template <MaskPolicy Mask = mask::None, HeadsPolicy H = Heads<dynamic>, class T = float>
using AdditiveAttention =
    MultiHeadAttention<score::Additive, kernel::Softmax, Mask, H, projection::Separate, T>;
template <MaskPolicy Mask = mask::Causal, HeadsPolicy H = Heads<dynamic>, class T = float>
using SynthesizerAttention =
    MultiHeadAttention<score::Synthesizer, kernel::Softmax, Mask, H, projection::Separate, T>;

}  // namespace attn
