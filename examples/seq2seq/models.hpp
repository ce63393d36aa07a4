// examples/seq2seq/models.hpp: two encoder-decoders for the dates task, with one interface (loss
// on a batch, greedy decoding with the alignment): RnnSeq2Seq<Score>, a bidirectional-GRU encoder
// and a GRU decoder with Luong's global attention whose score function is a compile-time choice
// (DotScore, BilinearScore, AdditiveScore: the three of the lecture), and TransformerSeq2Seq, the
// nn::EncoderDecoder with multi-head cross-attention.
// Does not batch beams or feed the attention back into the decoder's input (Luong's "input
// feeding"): the decoder GRU runs on its own, so teacher forcing scores all steps in one call.
#pragma once

#include <attn/attn.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "dates.hpp"

namespace seq2seq {

using attn::index_t;
using attn::Tensor;
using attn::Var;
namespace nn = attn::nn;

// ---- the three score functions
// -------------------------------------------------------------------- Each maps decoder states s
// [B, Td, H] and encoder states h [B, Ts, H] to the context
//     c_t = Σ_k a_tk h_k,   a_t = softmax_k(score(s_t, h_k))   over the valid source positions,
// writing the weights a [B, 1, Td, Ts] when asked. They are compile-time choices of RnnSeq2Seq.

// score(s, h) = sᵀh (Luong's "dot"): no parameters.
template <class T = float>
struct DotScore {
  static constexpr const char* name = "dot";
  DotScore(index_t, attn::Rng&) {}

  Var<T> context(const Var<T>& s, const Var<T>& h, const attn::mask::Padding& mask,
                 Tensor<T>* weights) {
    const Shape4 g = shapes(s, h);
    const Var<T> q = attn::reshape(s, {g.B, 1, g.Td, g.H}),
                 k = attn::reshape(h, {g.B, 1, g.Ts, g.H});
    return attn::reshape(attn::attention<attn::score::Dot>(q, k, k, mask, weights),
                         {g.B, g.Td, g.H});
  }

  template <class F>
  void for_each_parameter(F&&, std::string_view = "") {}

 protected:
  struct Shape4 {
    index_t B, Td, Ts, H;
  };
  static Shape4 shapes(const Var<T>& s, const Var<T>& h) {
    return {s.shape()[0], s.shape()[1], h.shape()[1], h.shape()[2]};
  }
};

// score(s, h) = sᵀ W h (Luong's "general", bilinear), W [H, H] starting at the identity (so it
// starts as DotScore). Computed as the dot score against W h: the same sum, regrouped.
template <class T = float>
struct BilinearScore : DotScore<T> {
  static constexpr const char* name = "bilinear";
  attn::Parameter<T> weight;  // W [H, H]

  BilinearScore(index_t hidden, attn::Rng& rng) : DotScore<T>(hidden, rng) {
    Tensor<T> eye = Tensor<T>::zeros({hidden, hidden});
    for (index_t i = 0; i < hidden; ++i) eye(i, i) = T(1);
    weight = attn::Parameter<T>(std::move(eye));
  }

  Var<T> context(const Var<T>& s, const Var<T>& h, const attn::mask::Padding& mask,
                 Tensor<T>* weights) {
    const auto g = this->shapes(s, h);
    const Var<T> wh = attn::matmul(h, s.tape().param(weight), false, true);  // [B, Ts, H]: W h_k
    const Var<T> q = attn::reshape(s, {g.B, 1, g.Td, g.H});
    const Var<T> k = attn::reshape(wh, {g.B, 1, g.Ts, g.H}),
                 v = attn::reshape(h, {g.B, 1, g.Ts, g.H});
    return attn::reshape(attn::attention<attn::score::Dot>(q, k, v, mask, weights),
                         {g.B, g.Td, g.H});
  }

  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    f(nn::join_name(prefix, "weight"), weight);
  }
};

// score(s, h) = w₂ᵀ tanh(W₁[s; h]) = w₂ᵀ tanh(W_s s + b + W_h h) (Bahdanau's additive / "MLP"
// score, W₁ = [W_s W_h] split by the halves it multiplies), hidden width A.
template <class T = float>
struct AdditiveScore : DotScore<T> {
  static constexpr const char* name = "additive";
  nn::Linear<T> query;    // W_s, b: [A, H]
  nn::Linear<T> key;      // W_h: [A, H], no bias
  attn::Parameter<T> w2;  // [1, A]

  AdditiveScore(index_t hidden, attn::Rng& rng)
      : DotScore<T>(hidden, rng),
        query(hidden, hidden, true, 1 / std::sqrt(double(hidden)), rng),
        key(hidden, hidden, false, 1 / std::sqrt(double(hidden)), rng),
        w2(Tensor<T>::randn({1, hidden}, rng, 0.0, 1 / std::sqrt(double(hidden)))) {}

  Var<T> context(const Var<T>& s, const Var<T>& h, const attn::mask::Padding& mask,
                 Tensor<T>* weights) {
    const auto g = this->shapes(s, h);
    const index_t A = w2.value.shape()[1];
    const Var<T> a = attn::reshape(query(s), {g.B, 1, g.Td, A});                  // W_s s_t + b
    const Var<T> c = attn::reshape(key(h), {g.B, 1, g.Ts, A});                    // W_h h_k
    const Var<T> scores = attn::additive_scores(a, c, s.tape().param(w2), mask);  // [B,1,Td,Ts]
    const Var<T> alpha = attn::masked_softmax(scores, mask);
    if (weights) *weights = alpha.value();
    const Var<T> v = attn::reshape(h, {g.B, 1, g.Ts, g.H});
    return attn::reshape(attn::matmul(alpha, v), {g.B, g.Td, g.H});
  }

  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    query.for_each_parameter(f, nn::join_name(prefix, "query"));
    key.for_each_parameter(f, nn::join_name(prefix, "key"));
    f(nn::join_name(prefix, "w2"), w2);
  }
};

// ---- greedy decoding's result
// -----------------------------------------------------------------------

struct Decoded {
  std::vector<std::string> outputs;  // one predicted ISO string per example
  Tensor<float> alignment;           // [B, 10, Ts]: the weights on the source while emitting
                                     // each output character (heads averaged)
};

// Turns predicted ids [B, 11] into strings (up to the first end token).
inline std::vector<std::string> to_strings(const Tensor<std::int32_t>& ids) {
  std::vector<std::string> out;
  for (index_t b = 0; b < ids.shape()[0]; ++b) {
    std::string s;
    for (index_t t = 0; t < ids.shape()[1] && ids(b, t) != dates::eos; ++t)
      s += dates::target_vocab.character(ids(b, t));
    out.push_back(s);
  }
  return out;
}

// The most likely id of row `row` of logits [R, V] (ties: the lowest id).
template <class T>
std::int32_t argmax_row(const Tensor<T>& logits, index_t row) {
  const index_t V = logits.shape().last();
  const T* p = logits.data() + row * V;
  return std::int32_t(std::max_element(p, p + V) - p);
}

// ---- the GRU encoder-decoder with Luong attention
// -------------------------------------------------------

struct RnnConfig {
  index_t embed = 32;    // character embedding width
  index_t hidden = 128;  // H: the decoder state; each encoder direction has H / 2
  std::uint64_t seed = 1;
};

// encoder: h = BiGRU(E_src x) [B, Ts, H];   decoder: s_t = GRU(E_tgt y_{t−1}, s_{t−1}),
// s_0 = tanh(W_b [→h_last; ←h_first] + b_b);   c_t = Score-attention(s_t, h);
// h̃_t = tanh(W_c [c_t; s_t] + b_c);   p(y_t) = softmax(W_o h̃_t + b_o)   (Luong et al. 2015).
template <template <class> class Score, class T = float>
class RnnSeq2Seq {
 public:
  using value_type = T;
  static constexpr const char* name = Score<T>::name;

  explicit RnnSeq2Seq(const RnnConfig& c)
      : rng_(c.seed),
        src_emb(dates::source_vocab.size(), c.embed, 1.0, rng_),
        encoder(c.embed, c.hidden / 2, true, rng_),
        bridge(c.hidden, c.hidden, true, 1 / std::sqrt(double(c.hidden)), rng_),
        tgt_emb(dates::target_vocab.size(), c.embed, 1.0, rng_),
        decoder(c.embed, c.hidden, false, rng_),
        score(c.hidden, rng_),
        combine(2 * c.hidden, c.hidden, true, 1 / std::sqrt(2.0 * double(c.hidden)), rng_),
        out(c.hidden, dates::target_vocab.size(), true, 1 / std::sqrt(double(c.hidden)), rng_) {
    ATTN_CHECK(c.hidden > 0 && c.hidden % 2 == 0 && c.embed > 0, attn::value_error,
               "RnnSeq2Seq: hidden (", c.hidden, ") must be even and positive, embed (", c.embed,
               ") positive");
  }

  void set_training(bool) {}  // no dropout

  // Mean cross-entropy of the targets under teacher forcing.
  Var<T> loss(attn::Tape<T>& tape, const dates::Batch& batch) {
    return attn::cross_entropy(logits(tape, batch), batch.tgt);
  }

  // Teacher-forced logits [B, 11, V]; `weights` receives the alignment [B, 1, 11, Ts].
  Var<T> logits(attn::Tape<T>& tape, const dates::Batch& batch, Tensor<T>* weights = nullptr) {
    const Encoded e = encode(tape, batch);
    const Var<T> states = decoder(tgt_emb(tape, batch.tgt_in), {}, &e.init).states;  // [B, 11, H]
    return readout(states, e, weights);
  }

  // Greedy decoding: each step feeds back the most likely character.
  Decoded greedy(attn::Tape<T>& tape, const dates::Batch& batch) {
    attn::NoGrad<T> no_grad(tape);
    const Encoded e = encode(tape, batch);
    const index_t B = batch.src.shape()[0], Ts = batch.src.shape()[1], L = dates::target_length;
    Tensor<std::int32_t> prev({B, 1}, std::int32_t{dates::bos});
    Tensor<std::int32_t> ids({B, L});
    Decoded d{{}, Tensor<float>::zeros({B, L - 1, Ts})};
    Var<T> h = e.init;
    Tensor<T> w;
    for (index_t t = 0; t < L; ++t) {
      const Var<T> x = attn::reshape(tgt_emb(tape, prev), {B, tgt_emb.weight.value.shape()[1]});
      h = decoder.forward_cell(x, h);
      const Var<T> logit = readout(attn::reshape(h, {B, 1, h.shape()[1]}), e, &w);  // [B, 1, V]
      for (index_t b = 0; b < B; ++b) {
        ids(b, t) = prev(b, 0) = argmax_row(logit.value(), b);
        if (t < L - 1)
          for (index_t k = 0; k < Ts; ++k) d.alignment(b, t, k) = float(w[b * Ts + k]);
      }
    }
    d.outputs = to_strings(ids);
    return d;
  }

  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    src_emb.for_each_parameter(f, nn::join_name(prefix, "src_emb"));
    encoder.for_each_parameter(f, nn::join_name(prefix, "encoder"));
    bridge.for_each_parameter(f, nn::join_name(prefix, "bridge"));
    tgt_emb.for_each_parameter(f, nn::join_name(prefix, "tgt_emb"));
    decoder.for_each_parameter(f, nn::join_name(prefix, "decoder"));
    score.for_each_parameter(f, nn::join_name(prefix, "score"));
    combine.for_each_parameter(f, nn::join_name(prefix, "combine"));
    out.for_each_parameter(f, nn::join_name(prefix, "out"));
  }

 private:
  attn::Rng rng_;  // first: the modules below draw their weights from it

 public:
  nn::Embedding<T> src_emb;
  nn::GRU<T> encoder;  // bidirectional, H/2 per direction
  nn::Linear<T> bridge;
  nn::Embedding<T> tgt_emb;
  nn::GRU<T> decoder;  // one direction, H
  Score<T> score;
  nn::Linear<T> combine, out;

 private:
  struct Encoded {
    Var<T> states;  // [B, Ts, H]
    Var<T> init;    // [B, H]: the decoder's first state
    attn::mask::Padding mask;
  };

  Encoded encode(attn::Tape<T>& tape, const dates::Batch& batch) {
    const nn::GRUOutput<T> enc = encoder(src_emb(tape, batch.src), batch.src_lengths);
    return {enc.states, attn::tanh(bridge(enc.last)), attn::mask::Padding(batch.src_lengths)};
  }

  // Decoder states s [B, t, H] -> logits [B, t, V] (attention, combine, output layer).
  Var<T> readout(const Var<T>& s, const Encoded& e, Tensor<T>* weights) {
    const Var<T> c = score.context(s, e.states, e.mask, weights);  // [B, t, H]
    return out(attn::tanh(combine(attn::concat({c, s}, -1))));
  }
};

// ---- the Transformer encoder-decoder
// -----------------------------------------------------------------

struct TransformerConfig {
  index_t layers = 2;  // encoder and decoder each
  index_t heads = 4;
  index_t d_model = 64;
  std::uint64_t seed = 1;
};

template <class T = float>
class TransformerSeq2Seq {
 public:
  using value_type = T;
  static constexpr const char* name = "transformer";
  template <class Mask>
  using Mha = attn::MultiHeadAttention<attn::score::ScaledDot, attn::kernel::Softmax, Mask,
                                       attn::Heads<attn::dynamic>, attn::projection::Separate, T>;
  using Model = nn::EncoderDecoder<Mha<attn::mask::Padding>, Mha<attn::mask::Causal>,
                                   Mha<attn::mask::Padding>>;

  explicit TransformerSeq2Seq(const TransformerConfig& c) : model(config(c)) {}

  void set_training(bool on) { model.set_training(on); }

  Var<T> loss(attn::Tape<T>& tape, const dates::Batch& batch) {
    const attn::mask::Padding mask(batch.src_lengths);
    return attn::cross_entropy(model(tape, batch.src, batch.tgt_in, mask, mask), batch.tgt);
  }

  // Greedy decoding, recomputing the decoder on the growing prefix; the alignment is the last
  // block's cross-attention weights (heads averaged) on the final prefix, which are those of
  // every step (the decoder is causal).
  Decoded greedy(attn::Tape<T>& tape, const dates::Batch& batch) {
    attn::NoGrad<T> no_grad(tape);
    const attn::mask::Padding mask(batch.src_lengths);
    const index_t B = batch.src.shape()[0], Ts = batch.src.shape()[1], L = dates::target_length;
    const Var<T> memory = model.encode(tape, batch.src, mask);
    Tensor<std::int32_t> ids({B, L});
    Tensor<std::int32_t> prefix({B, 1}, std::int32_t{dates::bos});
    std::vector<Tensor<T>> cross;
    for (index_t t = 0; t < L; ++t) {
      const bool last = t == L - 1;
      const Var<T> logits = model.decode(tape, memory, prefix, mask, last ? &cross : nullptr);
      Tensor<std::int32_t> next({B, t + 2});
      for (index_t b = 0; b < B; ++b) {
        ids(b, t) = argmax_row(logits.value(), b * (t + 1) + t);
        for (index_t i = 0; i <= t; ++i) next(b, i) = prefix(b, i);
        next(b, t + 1) = ids(b, t);
      }
      if (!last) prefix = std::move(next);
    }
    Decoded d{to_strings(ids), Tensor<float>::zeros({B, L - 1, Ts})};
    const Tensor<T>& w = cross.back();  // [B, H, L, Ts]
    const index_t H = w.shape()[1];
    for (index_t b = 0; b < B; ++b)
      for (index_t t = 0; t < L - 1; ++t)
        for (index_t k = 0; k < Ts; ++k) {
          double sum = 0;
          for (index_t h = 0; h < H; ++h) sum += double(w(b, h, t, k));
          d.alignment(b, t, k) = float(sum / double(H));
        }
    return d;
  }

  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    model.for_each_parameter(f, prefix);
  }

  Model model;

 private:
  static nn::Seq2SeqConfig config(const TransformerConfig& c) {
    nn::Seq2SeqConfig s;
    s.src_vocab = dates::source_vocab.size();
    s.tgt_vocab = dates::target_vocab.size();
    s.src_block = dates::max_source;
    s.tgt_block = dates::target_length;
    s.encoder_layers = s.decoder_layers = c.layers;
    s.heads = c.heads;
    s.d_model = c.d_model;
    s.positions = nn::PositionEncoding::sinusoidal;
    s.seed = c.seed;
    return s;
  }
};

}  // namespace seq2seq
