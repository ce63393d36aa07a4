// attn/nn/encoder_decoder.hpp: the Transformer of Vaswani et al. (2017) for sequence-to-sequence
// tasks: TokenEmbedding (tokens + positions), TransformerEncoder (bidirectional self-attention
// blocks), DecoderBlock (causal self-attention, cross-attention to the encoder's output, MLP) and
// EncoderDecoder, all pre-LN. Does not search (greedy or beam decoding is the caller's loop over
// decode()) nor cache keys and values across decoding steps: a decoder call recomputes its prefix.
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "transformer.hpp"

namespace attn::nn {

// What DecoderBlock needs from its cross-attention module (MultiHeadAttention<…>,
// BilinearAttention<…> and AdditiveAttention<…> satisfy it): queries x [B, Tq, D], keys and
// values from memory [B, Tk, D] under a mask, optionally writing the [B, H, Tq, Tk] weights.
template <class A>
concept CrossAttentionModule = std::constructible_from<A, const MultiHeadConfig&> &&
    requires(A a, const Var<typename A::value_type>& x, const typename A::mask_type& mask,
             Tensor<typename A::value_type>* weights) {
  { a(x, x, mask, weights) } -> std::same_as<Var<typename A::value_type>>;
  a.training = true;
  a.reseed(std::uint64_t{0});
  a.for_each_parameter([](const std::string&, Parameter<typename A::value_type>&) {});
};

// Token embeddings (times `scale`) plus position vectors (learned, sinusoidal or none) for ids
// [B, t] at positions offset, …, offset + t − 1 < block: tok_emb.weight [V, D] and, when learned,
// pos_emb.weight [L, D]. Vaswani et al. scale the embeddings by √D, so that N(0, init_std²) token
// vectors are not swamped by the unit-amplitude sinusoids (InitScheme::scaled_embedding).
template <class T = float>
struct TokenEmbedding {
  Embedding<T> tok_emb, pos_emb;
  PositionEncoding positions = PositionEncoding::learned;
  index_t block = 0;
  double scale = 1.0;

  TokenEmbedding() = default;
  TokenEmbedding(index_t vocab, index_t block_, index_t dim, PositionEncoding p, double std,
                 Rng& rng, double scale_ = 1.0)
      : tok_emb(vocab, dim, std, rng), positions(p), block(block_), scale(scale_) {
    ATTN_CHECK(vocab > 0 && block > 0 && dim > 0, value_error, "nn::TokenEmbedding: vocab (", vocab,
               "), block (", block, ") and dim (", dim, ") must be positive");
    if (p == PositionEncoding::learned) pos_emb = Embedding<T>(block, dim, std, rng);
    if (p == PositionEncoding::sinusoidal) sinusoid_ = sinusoidal_positions<T>(block, dim);
  }

  // ids [B, t] -> [B, t, D].
  Var<T> operator()(Tape<T>& tape, const Tensor<std::int32_t>& ids, index_t offset = 0) {
    ATTN_CHECK(ids.rank() == 2 && ids.shape()[1] > 0, shape_error,
               "nn::TokenEmbedding: ids must be [B, T], got ", ids.shape());
    Var<T> x = tok_emb(tape, ids);
    if (scale != 1.0) x = x * T(scale);
    if (positions == PositionEncoding::none) return x;
    const Var<T> table =
        positions == PositionEncoding::learned ? tape.param(pos_emb.weight) : tape.leaf(sinusoid_);
    return add_positions(x, table, offset, ids_);
  }

  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    tok_emb.for_each_parameter(f, join_name(prefix, "tok_emb"));
    if (positions == PositionEncoding::learned)
      pos_emb.for_each_parameter(f, join_name(prefix, "pos_emb"));
  }

 private:
  Tensor<T> sinusoid_;
  Tensor<std::int32_t> ids_;
};

// The shape of a Transformer encoder, decoder or both (EncoderDecoder reads every field; the
// encoder alone ignores tgt_* and decoder_layers).
struct Seq2SeqConfig {
  index_t src_vocab = 0, tgt_vocab = 0;
  index_t src_block = 0, tgt_block = 0;  // the longest source / target sequence
  index_t encoder_layers = 0, decoder_layers = 0;
  index_t heads = 0;
  index_t d_model = 0;
  double dropout = 0.0;  // embeddings, residual branches and attention weights, while training
  bool bias = true;
  PositionEncoding positions = PositionEncoding::learned;
  InitScheme init = InitScheme::normal;  // scaled_embedding: token embeddings times √D
  double init_std = 0.02;
  std::uint64_t seed = 0;
};

namespace detail {

inline MultiHeadConfig block_attention_config(const Seq2SeqConfig& c, index_t block, Rng& rng) {
  MultiHeadConfig mc{c.d_model, c.heads, 0, c.dropout, c.bias, c.init_std, rng.split()};
  mc.max_length = block;
  return mc;
}

inline double embedding_scale(const Seq2SeqConfig& c) {
  return c.init == InitScheme::scaled_embedding ? std::sqrt(double(c.d_model)) : 1.0;
}

inline void check_seq2seq_config(const Seq2SeqConfig& c, bool decoder, const char* who) {
  ATTN_CHECK(
      c.src_vocab > 0 && c.src_block > 0 && c.encoder_layers > 0 && c.d_model > 0 && c.heads > 0,
      value_error, who, ": src_vocab (", c.src_vocab, "), src_block (", c.src_block,
      "), encoder_layers (", c.encoder_layers, "), heads (", c.heads, ") and d_model (", c.d_model,
      ") must be positive");
  ATTN_CHECK(!decoder || (c.tgt_vocab > 0 && c.tgt_block > 0 && c.decoder_layers > 0), value_error,
             who, ": tgt_vocab (", c.tgt_vocab, "), tgt_block (", c.tgt_block,
             ") and decoder_layers (", c.decoder_layers, ") must be positive");
  ATTN_CHECK(c.dropout >= 0 && c.dropout < 1, value_error, who, ": dropout ", c.dropout,
             " outside [0, 1)");
  ATTN_CHECK(c.init_std > 0, value_error, who, ": init_std must be positive, got ", c.init_std);
  ATTN_CHECK(c.init != InitScheme::mingpt, value_error, who,
             ": InitScheme::mingpt is minGPT's GPT initialisation, for nn::GPT only");
}

}  // namespace detail

// Embeddings, `encoder_layers` pre-LN TransformerBlock<Attn> and a final LayerNorm:
// ids [B, T] -> [B, T, D]. With Attn's mask mask::None (or Padding) every position sees every
// (valid) other one: without positions the encoder is permutation-equivariant.
template <AttentionModule Attn>
class TransformerEncoder {
 public:
  using T = typename Attn::value_type;
  using Mask = typename Attn::mask_type;
  using Block = TransformerBlock<Attn>;

  explicit TransformerEncoder(const Seq2SeqConfig& c) : TransformerEncoder(c, Rng(c.seed)) {}
  TransformerEncoder(const Seq2SeqConfig& c, Rng&& rng) : TransformerEncoder(c, rng) {}

  // Draws the weights from `rng` (EncoderDecoder continues with the same stream).
  TransformerEncoder(const Seq2SeqConfig& c, Rng& rng) : config_(c) {
    detail::check_seq2seq_config(c, false, "nn::TransformerEncoder");
    embed = TokenEmbedding<T>(c.src_vocab, c.src_block, c.d_model, c.positions, c.init_std, rng,
                              detail::embedding_scale(c));
    const double proj_std = c.init_std / std::sqrt(2.0 * double(c.encoder_layers));
    blocks.reserve(static_cast<std::size_t>(c.encoder_layers));
    for (index_t l = 0; l < c.encoder_layers; ++l)
      blocks.emplace_back(detail::block_attention_config(c, c.src_block, rng), true, proj_std, rng);
    ln_f = LayerNorm<T>(c.d_model);
    emb_drop = Dropout(c.dropout, rng.split());
  }

  const Seq2SeqConfig& config() const { return config_; }

  void set_training(bool on) {
    training_ = on;
    for (Block& b : blocks) b.set_training(on);
  }
  void reseed(std::uint64_t seed) {
    Rng r(seed);
    emb_drop.rng.reseed(r.split());
    for (Block& b : blocks) b.reseed(r.split());
  }

  // ids [B, T] (T <= src_block) -> [B, T, D].
  Var<T> operator()(Tape<T>& tape, const Tensor<std::int32_t>& ids, const Mask& mask = {}) {
    Var<T> x = emb_drop(embed(tape, ids), training_);
    for (Block& b : blocks) x = b(x, mask);
    return ln_f(x);
  }

  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    embed.for_each_parameter(f, prefix);
    for (std::size_t l = 0; l < blocks.size(); ++l)
      blocks[l].for_each_parameter(f, join_name(prefix, "blocks." + std::to_string(l)));
    ln_f.for_each_parameter(f, join_name(prefix, "ln_f"));
  }

  TokenEmbedding<T> embed;
  std::vector<Block> blocks;
  LayerNorm<T> ln_f;
  Dropout emb_drop;

 private:
  Seq2SeqConfig config_;
  bool training_ = true;
};

// A pre-LN decoder block:
//     h = x + SelfAttn(LN₁(x))                       (causal: position i sees the targets ≤ i)
//     h = h + CrossAttn(LN₂(h), memory)               (every valid source position)
//     y = h + MLP(LN₃(h))
template <AttentionModule SelfAttn, CrossAttentionModule CrossAttn>
requires std::same_as<typename SelfAttn::value_type, typename CrossAttn::value_type>
struct DecoderBlock {
  using T = typename SelfAttn::value_type;
  using SelfMask = typename SelfAttn::mask_type;
  using CrossMask = typename CrossAttn::mask_type;

  LayerNorm<T> ln1, ln2, ln3;
  SelfAttn self_attn;
  CrossAttn cross_attn;
  MLP<T> mlp;
  Dropout self_drop, cross_drop, mlp_drop;  // on the residual branches

  DecoderBlock(const MultiHeadConfig& self_config, const MultiHeadConfig& cross_config,
               double proj_std, Rng& rng)
      : ln1(self_config.d_model),
        ln2(self_config.d_model),
        ln3(self_config.d_model),
        self_attn(self_config),
        cross_attn(cross_config),
        mlp(self_config.d_model, 4 * self_config.d_model, self_config.bias, self_config.init_std,
            proj_std, rng),
        self_drop(self_config.dropout, rng.split()),
        cross_drop(self_config.dropout, rng.split()),
        mlp_drop(self_config.dropout, rng.split()) {
    // Projections that write into the residual stream start smaller (GPT-2), as in
    // TransformerBlock.
    scale(self_attn.out_proj.weight.value, proj_std / self_config.init_std);
    scale(cross_attn.out_proj.weight.value, proj_std / cross_config.init_std);
  }

  void set_training(bool on) {
    training_ = on;
    self_attn.training = on;
    cross_attn.training = on;
  }
  void reseed(std::uint64_t seed) {
    Rng r(seed);
    self_attn.reseed(r.split());
    cross_attn.reseed(r.split());
    self_drop.rng.reseed(r.split());
    cross_drop.rng.reseed(r.split());
    mlp_drop.rng.reseed(r.split());
  }

  // x [B, Tt, D], memory [B, Ts, D] -> [B, Tt, D]; cross_weights receives [B, H, Tt, Ts].
  Var<T> operator()(const Var<T>& x, const Var<T>& memory, const SelfMask& self_mask = {},
                    const CrossMask& cross_mask = {}, Tensor<T>* cross_weights = nullptr) {
    Var<T> h = x + self_drop(self_attn(ln1(x), self_mask), training_);
    h = h + cross_drop(cross_attn(ln2(h), memory, cross_mask, cross_weights), training_);
    return h + mlp_drop(mlp(ln3(h)), training_);
  }

  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    ln1.for_each_parameter(f, join_name(prefix, "ln1"));
    self_attn.for_each_parameter(f, join_name(prefix, "self_attn"));
    ln2.for_each_parameter(f, join_name(prefix, "ln2"));
    cross_attn.for_each_parameter(f, join_name(prefix, "cross_attn"));
    ln3.for_each_parameter(f, join_name(prefix, "ln3"));
    mlp.for_each_parameter(f, join_name(prefix, "mlp"));
  }

 private:
  static void scale(Tensor<T>& t, double factor) {
    for (T& v : t) v = T(double(v) * factor);
  }

  bool training_ = true;
};

// The encoder–decoder Transformer: logits[b, i] = head(LN(decoder(embed(tgt[b, ≤ i]),
// encoder(src[b])))). EncAttn's mask covers the source (mask::Padding for padded batches),
// SelfAttn's the target (mask::Causal), CrossAttn's the source seen from the target
// (mask::Padding). Training feeds tgt_in = [BOS, y₀, …, y_{n−2}] against targets y (teacher
// forcing); decoding calls decode() on the growing prefix.
template <AttentionModule EncAttn, AttentionModule SelfAttn, CrossAttentionModule CrossAttn>
requires std::same_as<typename EncAttn::value_type, typename SelfAttn::value_type>
class EncoderDecoder {
 public:
  using T = typename EncAttn::value_type;
  using EncMask = typename EncAttn::mask_type;
  using SelfMask = typename SelfAttn::mask_type;
  using CrossMask = typename CrossAttn::mask_type;
  using Block = DecoderBlock<SelfAttn, CrossAttn>;

  explicit EncoderDecoder(const Seq2SeqConfig& c) : EncoderDecoder(c, Rng(c.seed)) {}

  const Seq2SeqConfig& config() const { return encoder.config(); }

  void set_training(bool on) {
    training_ = on;
    encoder.set_training(on);
    for (Block& b : decoder) b.set_training(on);
  }
  void reseed(std::uint64_t seed) {
    Rng r(seed);
    encoder.reseed(r.split());
    tgt_drop.rng.reseed(r.split());
    for (Block& b : decoder) b.reseed(r.split());
  }

  // src [B, Ts] -> memory [B, Ts, D].
  Var<T> encode(Tape<T>& tape, const Tensor<std::int32_t>& src, const EncMask& mask = {}) {
    return encoder(tape, src, mask);
  }

  // Logits [B, Tt, V] of the next target token at every position of tgt_in [B, Tt], given the
  // encoder's memory. cross_weights, when given, receives one [B, H, Tt, Ts] tensor per block.
  Var<T> decode(Tape<T>& tape, const Var<T>& memory, const Tensor<std::int32_t>& tgt_in,
                const CrossMask& cross_mask = {}, std::vector<Tensor<T>>* cross_weights = nullptr) {
    ATTN_CHECK(
        memory.shape().rank() == 3 && tgt_in.rank() == 2 && memory.shape()[0] == tgt_in.shape()[0],
        shape_error, "EncoderDecoder::decode: memory ", memory.shape(), " and tgt_in ",
        tgt_in.shape(), " must be [B, Ts, D] and [B, Tt]");
    if (cross_weights) cross_weights->resize(decoder.size());
    Var<T> x = tgt_drop(tgt_embed(tape, tgt_in), training_);
    for (std::size_t l = 0; l < decoder.size(); ++l)
      x = decoder[l](x, memory, SelfMask{}, cross_mask,
                     cross_weights ? &(*cross_weights)[l] : nullptr);
    return head(ln_f(x));
  }

  // Teacher-forced logits [B, Tt, V] for src [B, Ts] and tgt_in [B, Tt].
  Var<T> operator()(Tape<T>& tape, const Tensor<std::int32_t>& src,
                    const Tensor<std::int32_t>& tgt_in, const EncMask& enc_mask = {},
                    const CrossMask& cross_mask = {}) {
    return decode(tape, encode(tape, src, enc_mask), tgt_in, cross_mask);
  }

  // encoder.* (tok_emb, pos_emb, blocks.<l>, ln_f), decoder.tok_emb, decoder.pos_emb,
  // decoder.blocks.<l>.*, decoder.ln_f.*, head.weight.
  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    encoder.for_each_parameter(f, join_name(prefix, "encoder"));
    const std::string dec = join_name(prefix, "decoder");
    tgt_embed.for_each_parameter(f, dec);
    for (std::size_t l = 0; l < decoder.size(); ++l)
      decoder[l].for_each_parameter(f, join_name(dec, "blocks." + std::to_string(l)));
    ln_f.for_each_parameter(f, join_name(dec, "ln_f"));
    head.for_each_parameter(f, join_name(prefix, "head"));
  }

  TransformerEncoder<EncAttn> encoder;
  TokenEmbedding<T> tgt_embed;
  std::vector<Block> decoder;
  LayerNorm<T> ln_f;
  Linear<T> head;
  Dropout tgt_drop;

 private:
  EncoderDecoder(const Seq2SeqConfig& c, Rng&& rng) : encoder(checked(c), rng) {
    tgt_embed = TokenEmbedding<T>(c.tgt_vocab, c.tgt_block, c.d_model, c.positions, c.init_std, rng,
                                  detail::embedding_scale(c));
    const double proj_std = c.init_std / std::sqrt(2.0 * double(c.decoder_layers));
    decoder.reserve(static_cast<std::size_t>(c.decoder_layers));
    for (index_t l = 0; l < c.decoder_layers; ++l) {
      const MultiHeadConfig self_config = detail::block_attention_config(c, c.tgt_block, rng);
      const MultiHeadConfig cross_config = detail::block_attention_config(c, c.src_block, rng);
      decoder.emplace_back(self_config, cross_config, proj_std, rng);
    }
    ln_f = LayerNorm<T>(c.d_model);
    head = Linear<T>(c.d_model, c.tgt_vocab, false, c.init_std, rng);
    tgt_drop = Dropout(c.dropout, rng.split());
  }

  static const Seq2SeqConfig& checked(const Seq2SeqConfig& c) {
    detail::check_seq2seq_config(c, true, "nn::EncoderDecoder");
    return c;
  }

  bool training_ = true;
};

}  // namespace attn::nn
