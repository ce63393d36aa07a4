// attn/nn/transformer.hpp: TransformerBlock<Attn> (pre- or post-norm residual block) and GPT<Attn>,
// a decoder-only language model: token + position embeddings, blocks, final norm, vocabulary head.
// The architectures of GPT-2 (LayerNorm, tanh GELU MLP, learned positions, tied head) and of Llama
// (RMSNorm, SwiGLU, no biases, rotary positions in its attention, grouped-query heads, untied
// head) are configurations of the same two templates (BlockParts, GPTConfig). Does not train or
// sample by itself (optim/ and nn/generate.hpp do); Attn is any attention module.
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <numbers>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "any_attention.hpp"
#include "layers.hpp"

namespace attn::nn {

// The attention of minGPT's CausalSelfAttention and GPT-2: softmax of scaled dot products under a
// causal mask, heads set at run time, separate query and key projections, in float.
using CausalSelfAttention = MultiHeadAttention<score::ScaledDot, kernel::Softmax, mask::Causal,
                                               Heads<dynamic>, projection::Separate, float>;

enum class PositionEncoding { learned, sinusoidal, none };
enum class InitScheme {
  normal,  // every weight ~ N(0, 0.02²), residual projections 0.02/√(2·layers) (GPT-2)
  scaled_embedding,  // the same, and embeddings multiplied by √D (Takase et al. 2023, "Spike No
                     // More"), so the residual stream starts at unit scale
  mingpt,  // minGPT of 2020 (the problem set's model): every weight ~ N(0, 0.02²), the residual
           // projections too, the learned position table starts at zero, and a synthesizer's w2
           // ~ U(−0.001, 0.001), which minGPT's initialisation leaves as the problem set's
           // SynthesizerAttention draws it (nn::GPT only)
};

struct GPTConfig {
  index_t vocab_size = 0;
  index_t block_size = 0;  // the longest context
  index_t layers = 0;
  index_t heads = 0;
  index_t d_model = 0;
  index_t kv_heads = 0;  // 0: one key/value head per query head
  double dropout = 0.0;  // embeddings, residual branches and attention weights, while training
  bool bias = true;
  bool pre_ln = true;        // LayerNorm before each branch (GPT-2); false: after the residual add
  bool tie_weights = false;  // the head reuses the token embedding matrix
  PositionEncoding positions = PositionEncoding::learned;
  InitScheme init = InitScheme::normal;
  double init_std = 0.02;
  std::uint64_t seed = 0;
  // The blocks' norms (and the final one) and feed-forward networks: GPT-2's LayerNorm and exact
  // GELU MLP of 4·d_model by default; Llama: NormKind::rms, FeedForwardKind::swiglu, its
  // intermediate size, no bias.
  NormKind norm = NormKind::layer;
  double norm_eps = 1e-5;
  FeedForwardKind feed_forward = FeedForwardKind::gelu;
  index_t hidden = 0;  // the feed-forward network's width; 0: 4·d_model
};

// What a block has besides its attention: the kind of its norms and of its feed-forward network.
struct BlockParts {
  NormKind norm = NormKind::layer;
  double norm_eps = 1e-5;
  FeedForwardKind feed_forward = FeedForwardKind::gelu;
  index_t hidden = 0;  // 0: 4·d_model
};

inline BlockParts block_parts(const GPTConfig& c) {
  return {c.norm, c.norm_eps, c.feed_forward, c.hidden};
}

// The sinusoidal table of Vaswani et al. (2017): PE[p, 2i] = sin(p / 10000^(2i/D)),
// PE[p, 2i+1] = cos(p / 10000^(2i/D)).
template <class T>
Tensor<T> sinusoidal_positions(index_t length, index_t dim) {
  Tensor<T> pe(Shape{length, dim});
  for (index_t p = 0; p < length; ++p)
    for (index_t i = 0; i < dim; ++i) {
      const double angle = double(p) / std::pow(10000.0, double(i - i % 2) / double(dim));
      pe[p * dim + i] = T(i % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
  return pe;
}

// The position vectors of positions offset, …, offset + t − 1 added to x [B, t, D]: rows of
// `table` [L, D] (a learned parameter, or a constant such as sinusoidal_positions), looked up by an
// embedding whose ids are written into `ids` (scratch space the caller keeps between calls). With
// `starts` (a left-padded batch: row b's first real token is at starts[b]), row b's positions
// count from its first real token, offset + i − starts[b], and its padding takes position 0.
template <class T>
Var<T> add_positions(const Var<T>& x, const Var<T>& table, index_t offset,
                     Tensor<std::int32_t>& ids, const std::vector<index_t>* starts = nullptr) {
  const Shape& s = x.shape();
  ATTN_CHECK(s.rank() == 3 && table.shape().rank() == 2 && table.shape()[1] == s[2], shape_error,
             "add_positions: x ", s, " and table ", table.shape(), " must be [B, t, D] and [L, D]");
  ATTN_CHECK(offset >= 0 && offset + s[1] <= table.shape()[0], value_error,
             "add_positions: ", "positions ", offset, "..", offset + s[1] - 1,
             " exceed the table's ", table.shape()[0]);
  ATTN_CHECK(starts == nullptr || index_t(starts->size()) == s[0], shape_error,
             "add_positions: ", starts ? starts->size() : 0, " row starts for a batch of ", s[0]);
  ids.resize(Shape{s[0], s[1]});
  for (index_t b = 0; b < s[0]; ++b) {
    const index_t shift = starts ? (*starts)[std::size_t(b)] : 0;
    for (index_t i = 0; i < s[1]; ++i)
      ids[b * s[1] + i] = std::int32_t(std::max<index_t>(offset + i - shift, 0));
  }
  return x + embedding(table, ids);
}

// x + Attn(N(x)), then + FF(N(·)) (pre-norm); or N(x + Attn(x)), N(· + FF(·)) (post-norm); N a
// LayerNorm or RMSNorm, FF the GELU MLP or SwiGLU (BlockParts).
template <AttentionModule Attn>
struct TransformerBlock {
  using T = typename Attn::value_type;
  using Mask = typename Attn::mask_type;

  Norm<T> ln1, ln2;
  Attn attn;
  FeedForward<T> mlp;
  Dropout attn_drop, mlp_drop;  // on the residual branches
  bool pre_ln = true;

  TransformerBlock(
      const MultiHeadConfig& mc, bool pre_ln_, double proj_std, Rng& rng,
      const BlockParts& parts = {}) requires std::constructible_from<Attn, const MultiHeadConfig&>
      : TransformerBlock(Attn(mc), mc, pre_ln_, proj_std, rng, parts) {}

  // With an attention module built by the caller (from the same `mc`).
  TransformerBlock(Attn attention, const MultiHeadConfig& mc, bool pre_ln_, double proj_std,
                   Rng& rng, const BlockParts& parts = {})
      : ln1(parts.norm, mc.d_model, parts.norm_eps),
        ln2(parts.norm, mc.d_model, parts.norm_eps),
        attn(std::move(attention)),
        mlp(parts.feed_forward, mc.d_model, parts.hidden > 0 ? parts.hidden : 4 * mc.d_model,
            mc.bias, mc.init_std, proj_std, rng),
        attn_drop(mc.dropout, rng.split()),
        mlp_drop(mc.dropout, rng.split()),
        pre_ln(pre_ln_) {
    // GPT-2 scales the projections that write into the residual stream by 1/√(2·layers).
    scale(output_projection(attn).weight.value, proj_std / mc.init_std);
  }

  void set_training(bool on) {
    training_ = on;
    attn.training = on;
  }

  // Restarts every dropout stream of the block from `seed`.
  void reseed(std::uint64_t seed) {
    Rng r(seed);
    attn.reseed(r.split());
    attn_drop.rng.reseed(r.split());
    mlp_drop.rng.reseed(r.split());
  }

  Var<T> operator()(const Var<T>& x, const Mask& mask = {}) {
    return forward(x, [&](const Var<T>& h) { return attn(h, mask); });
  }
  Var<T> decode(const Var<T>& x, KVCache<T>& cache, const Mask& mask = {}) {
    return forward(x, [&](const Var<T>& h) { return attn.decode(h, cache, mask); });
  }

  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    ln1.for_each_parameter(f, join_name(prefix, "ln1"));
    attn.for_each_parameter(f, join_name(prefix, "attn"));
    ln2.for_each_parameter(f, join_name(prefix, "ln2"));
    mlp.for_each_parameter(f, join_name(prefix, "mlp"));
  }

 private:
  template <class AttnCall>
  Var<T> forward(const Var<T>& x, AttnCall&& attend) {
    if (pre_ln) {
      const Var<T> h = x + attn_drop(attend(ln1(x)), training_);
      return h + mlp_drop(mlp(ln2(h)), training_);
    }
    const Var<T> h = ln1(x + attn_drop(attend(x), training_));
    return ln2(h + mlp_drop(mlp(h), training_));
  }

  static void scale(Tensor<T>& t, double factor) {
    for (T& v : t) v = T(double(v) * factor);
  }

  bool training_ = true;
};

// A GPT: logits[b, t] = head(LN(blocks(embed(ids[b, ≤ t])))). Attn's mask decides causality
// (mask::Causal for a language model).
template <AttentionModule Attn>
class GPT {
 public:
  using T = typename Attn::value_type;
  using Mask = typename Attn::mask_type;
  using Block = TransformerBlock<Attn>;

  explicit GPT(const GPTConfig& c) requires std::constructible_from<Attn, const MultiHeadConfig&>
      : GPT(c, [](const MultiHeadConfig& mc) { return Attn(mc); }) {}

  // With the attention module of each block built by make(mc): AnyAttention<T, Mask>::make<A>
  // chooses the variant at run time.
  template <std::invocable<const MultiHeadConfig&> Make>
  requires std::convertible_to<std::invoke_result_t<Make&, const MultiHeadConfig&>, Attn> GPT(
      const GPTConfig& c, Make&& make)
      : config_(c) {
    ATTN_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.layers > 0 && c.d_model > 0, value_error,
               "nn::GPT: vocab_size (", c.vocab_size, "), block_size (", c.block_size,
               "), layers (", c.layers, ") and d_model (", c.d_model, ") must be positive");
    ATTN_CHECK(c.dropout >= 0 && c.dropout < 1, value_error, "nn::GPT: dropout ", c.dropout,
               " outside [0, 1)");
    ATTN_CHECK(c.init_std > 0, value_error, "nn::GPT: init_std must be positive, got ", c.init_std);
    ATTN_CHECK(c.hidden >= 0 && c.norm_eps > 0, value_error, "nn::GPT: hidden (", c.hidden,
               ") must be >= 0 and norm_eps (", c.norm_eps, ") positive");
    Rng rng(c.seed);
    tok_emb = Embedding<T>(c.vocab_size, c.d_model, c.init_std, rng);
    if (c.positions == PositionEncoding::learned) {
      pos_emb = Embedding<T>(c.block_size, c.d_model, c.init_std, rng);
      if (c.init == InitScheme::mingpt) pos_emb.weight.value.fill(T(0));
    }
    if (c.positions == PositionEncoding::sinusoidal)
      sinusoid_ = sinusoidal_positions<T>(c.block_size, c.d_model);
    const double proj_std =
        c.init == InitScheme::mingpt ? c.init_std : c.init_std / std::sqrt(2.0 * double(c.layers));
    blocks.reserve(static_cast<std::size_t>(c.layers));
    for (index_t l = 0; l < c.layers; ++l) {
      MultiHeadConfig mc{c.d_model, c.heads,    c.kv_heads, c.dropout,
                         c.bias,    c.init_std, rng.split()};
      mc.max_length = c.block_size;
      if (c.init == InitScheme::mingpt) mc.synthesizer_range = 0.001;
      blocks.emplace_back(make(mc), mc, c.pre_ln, proj_std, rng, block_parts(c));
    }
    ln_f = Norm<T>(c.norm, c.d_model, c.norm_eps);
    if (!c.tie_weights) head = Linear<T>(c.d_model, c.vocab_size, false, c.init_std, rng);
    emb_drop = Dropout(c.dropout, rng.split());
  }

  const GPTConfig& config() const { return config_; }

  // Dropout on while training; off for evaluation and sampling.
  void set_training(bool on) {
    training_ = on;
    for (Block& b : blocks) b.set_training(on);
  }
  bool training() const { return training_; }

  // Restarts every dropout stream from `seed`: a trainer calls it each step with a seed derived
  // from (run seed, step), so the dropout masks of step s do not depend on what ran before.
  void reseed(std::uint64_t seed) {
    Rng r(seed);
    emb_drop.rng.reseed(r.split());
    for (Block& b : blocks) b.reseed(r.split());
  }

  // ids [B, T] (T <= block_size) -> logits [B, T, V], under `mask` (the attention's mask type:
  // mask::Causal needs nothing; And<Causal, LeftPadding> takes each row's first real position,
  // from which the row's absolute positions count).
  Var<T> operator()(Tape<T>& tape, const Tensor<std::int32_t>& ids, const Mask& mask = {}) {
    Var<T> x = embed(tape, ids, 0, mask);
    for (Block& b : blocks) x = b(x, mask);
    return logits(tape, x);
  }

  // Mean cross-entropy of next-token targets [B, T] (-100 = ignored) under the logits.
  Var<T> loss(Tape<T>& tape, const Tensor<std::int32_t>& ids, const Tensor<std::int32_t>& targets,
              const Mask& mask = {}) {
    return cross_entropy((*this)(tape, ids, mask), targets);
  }

  // One key/value cache per block, for decode().
  std::vector<KVCache<T>> make_caches() const {
    return std::vector<KVCache<T>>(static_cast<std::size_t>(config_.layers));
  }

  // The logits of new positions ids [B, t] that follow the ones already in `caches` (which this
  // appends to): equal to the last t rows of the full forward pass over the whole sequence.
  // `mask` as for operator(), over the whole sequence so far (a left-padded batch keeps its
  // starts from the prompt on).
  Var<T> decode(Tape<T>& tape, const Tensor<std::int32_t>& ids, std::vector<KVCache<T>>& caches,
                const Mask& mask = {}) {
    ATTN_CHECK(caches.size() == blocks.size(), value_error, "GPT::decode: ", caches.size(),
               " caches for ", blocks.size(), " blocks (use make_caches())");
    Var<T> x = embed(tape, ids, caches.front().length(), mask);
    for (std::size_t l = 0; l < blocks.size(); ++l) x = blocks[l].decode(x, caches[l], mask);
    return logits(tape, x);
  }

  // Visits tok_emb.weight, pos_emb.weight, blocks.<l>.…, ln_f.*, head.weight (when not tied).
  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    tok_emb.for_each_parameter(f, join_name(prefix, "tok_emb"));
    if (config_.positions == PositionEncoding::learned)
      pos_emb.for_each_parameter(f, join_name(prefix, "pos_emb"));
    for (std::size_t l = 0; l < blocks.size(); ++l)
      blocks[l].for_each_parameter(f, join_name(prefix, "blocks." + std::to_string(l)));
    ln_f.for_each_parameter(f, join_name(prefix, "ln_f"));
    if (!config_.tie_weights) head.for_each_parameter(f, join_name(prefix, "head"));
  }

  Embedding<T> tok_emb, pos_emb;
  std::vector<Block> blocks;
  Norm<T> ln_f;
  Linear<T> head;  // unused when tie_weights
  Dropout emb_drop;

 private:
  // Token (and position) embeddings of ids [B, t] at positions offset, …, offset + t − 1.
  Var<T> embed(Tape<T>& tape, const Tensor<std::int32_t>& ids, index_t offset, const Mask& mask) {
    ATTN_CHECK(ids.rank() == 2 && ids.shape()[1] > 0, shape_error, "GPT: ids must be [B, T], got ",
               ids.shape());
    const index_t t = ids.shape()[1], D = config_.d_model;
    ATTN_CHECK(offset + t <= config_.block_size, value_error, "GPT: positions ", offset, "..",
               offset + t - 1, " exceed the block size ", config_.block_size);
    Var<T> x = tok_emb(tape, ids);  // [B, t, D]
    if (config_.init == InitScheme::scaled_embedding) x = x * T(std::sqrt(double(D)));
    if (config_.positions != PositionEncoding::none) {
      const Var<T> table = config_.positions == PositionEncoding::learned
                               ? tape.param(pos_emb.weight)
                               : tape.leaf(sinusoid_);
      x = add_positions(x, table, offset, positions_, attn::mask::left_padding_starts(mask));
    }
    return emb_drop(x, training_);
  }

  Var<T> logits(Tape<T>& tape, const Var<T>& x) {
    const Var<T> h = ln_f(x);
    if (config_.tie_weights) return matmul(h, tape.param(tok_emb.weight), false, true);
    return head(h);
  }

  GPTConfig config_;
  Tensor<T> sinusoid_;
  Tensor<std::int32_t> positions_;
  bool training_ = true;
};

}  // namespace attn::nn
