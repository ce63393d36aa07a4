// The models of the teaching examples: nn::GRUCell and nn::GRU (the gate formula, padding,
// both directions, finite-difference gradients), the seq2seq example's three attention scores and
// the nn::EncoderDecoder (gradients, masks, causality), the dates task, and the permutation
// equivariance of self-attention without positions (and its loss with positions).
#include <doctest/doctest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "../../examples/seq2seq/models.hpp"
#include "../module_gradients.hpp"

namespace {

using attn::index_t;
using attn::Tensor;
using attn::Var;
namespace nn = attn::nn;

double sigmoid(double x) {
  return 1 / (1 + std::exp(-x));
}

// h' of one GRU step by the formula, in plain loops: the gate order (r, z, n) of torch.nn.GRUCell.
std::vector<double> gru_step_by_hand(const nn::GRUCell<double>& c, const std::vector<double>& x,
                                     const std::vector<double>& h) {
  const index_t H = c.hidden_size(), I = c.input_size();
  const auto gate = [&](index_t row) {  // (W_i x + b_i)[row], (W_h h + b_h)[row]
    double gi = c.bias_ih.value[row], gh = c.bias_hh.value[row];
    for (index_t j = 0; j < I; ++j) gi += c.weight_ih.value(row, j) * x[std::size_t(j)];
    for (index_t j = 0; j < H; ++j) gh += c.weight_hh.value(row, j) * h[std::size_t(j)];
    return std::pair{gi, gh};
  };
  std::vector<double> out(static_cast<std::size_t>(H));
  for (index_t k = 0; k < H; ++k) {
    const auto [ir, hr] = gate(k);
    const auto [iz, hz] = gate(H + k);
    const auto [in, hn] = gate(2 * H + k);
    const double r = sigmoid(ir + hr), z = sigmoid(iz + hz), n = std::tanh(in + r * hn);
    out[std::size_t(k)] = (1 - z) * n + z * h[std::size_t(k)];
  }
  return out;
}

Tensor<double> rows_of(const Var<double>& v, index_t b, index_t t0, index_t t1) {
  const index_t W = v.shape().last(), T = v.shape()[1];
  Tensor<double> out({t1 - t0, W});
  for (index_t t = t0; t < t1; ++t)
    for (index_t j = 0; j < W; ++j) out(t - t0, j) = v.value()[(b * T + t) * W + j];
  return out;
}

}  // namespace

TEST_CASE("nn::GRUCell computes torch.nn.GRUCell's formula") {
  attn::Rng rng(1);
  nn::GRUCell<double> cell(3, 4, rng);
  attn::Tape<double> tape;
  const auto x = Tensor<double>::randn({2, 3}, rng), h = Tensor<double>::randn({2, 4}, rng);
  const Var<double> y = cell(tape.leaf(x), tape.leaf(h));
  REQUIRE(y.shape() == attn::Shape{2, 4});
  for (index_t b = 0; b < 2; ++b) {
    const auto ref =
        gru_step_by_hand(cell, {x(b, 0), x(b, 1), x(b, 2)}, {h(b, 0), h(b, 1), h(b, 2), h(b, 3)});
    for (index_t k = 0; k < 4; ++k)
      CHECK(y.value()(b, k) == doctest::Approx(ref[std::size_t(k)]).epsilon(1e-13));
  }
  CHECK_THROWS_AS(cell(tape.leaf(h), tape.leaf(h)), attn::shape_error);
  CHECK_THROWS_AS(cell.step(tape.leaf(x), tape.leaf(h)), attn::shape_error);
}

TEST_CASE("nn::GRUCell gradients match finite differences (inputs and parameters)") {
  attn::Rng rng(2);
  nn::GRUCell<double> cell(3, 4, rng);
  const auto x = Tensor<double>::randn({2, 3}, rng), h = Tensor<double>::randn({2, 4}, rng);
  const auto g = Tensor<double>::randn({2, 4}, rng);
  const auto inputs = attn::check_gradient(
      [&](const std::vector<Var<double>>& v) {
        return attn::sum(cell(v[0], v[1]) * v[0].tape().leaf(g));
      },
      {x, h});
  INFO(inputs.report());
  CHECK(inputs.ok);
  attn::test::check_module_gradients(cell, [&](attn::Tape<double>& tape) {
    return attn::sum(cell(tape.leaf(x), tape.leaf(h)) * tape.leaf(g));
  });
}

TEST_CASE("nn::GRU: padding leaves every valid state as in the unpadded sequence, both ways") {
  attn::Rng rng(3);
  nn::GRU<double> gru(2, 3, true, rng);
  const index_t T = 5;
  const auto x = Tensor<double>::randn({2, T, 2}, rng);
  const std::vector<index_t> lengths{3, 5};
  attn::Tape<double> tape;
  const nn::GRUOutput<double> padded = gru(tape.leaf(x), lengths);
  REQUIRE(padded.states.shape() == attn::Shape{2, T, 6});
  REQUIRE(padded.last.shape() == attn::Shape{2, 6});
  for (index_t b = 0; b < 2; ++b) {
    const index_t L = lengths[std::size_t(b)];
    Tensor<double> alone({1, L, 2});
    for (index_t t = 0; t < L; ++t)
      for (index_t j = 0; j < 2; ++j) alone(0, t, j) = x(b, t, j);
    const nn::GRUOutput<double> one = gru(tape.leaf(alone));
    CHECK(attn::max_abs_diff(rows_of(padded.states, b, 0, L), rows_of(one.states, 0, 0, L)) <
          1e-14);
    for (index_t j = 0; j < 6; ++j)
      CHECK(padded.last.value()(b, j) == doctest::Approx(one.last.value()(0, j)).epsilon(1e-14));
  }
  // The backward direction is the backward cell run forwards over the reversed sequence.
  Tensor<double> reversed({1, T, 2});
  for (index_t t = 0; t < T; ++t)
    for (index_t j = 0; j < 2; ++j) reversed(0, t, j) = x(1, T - 1 - t, j);
  Var<double> h = tape.leaf(Tensor<double>::zeros({1, 3}));
  for (index_t t = 0; t < T; ++t) {
    h = gru.backward_cell(attn::reshape(attn::slice(tape.leaf(reversed), t, t + 1, 1), {1, 2}), h);
    for (index_t j = 0; j < 3; ++j)
      CHECK(h.value()(0, j) ==
            doctest::Approx(padded.states.value()(1, T - 1 - t, 3 + j)).epsilon(1e-14));
  }
  CHECK_THROWS_AS(gru(tape.leaf(x), {3}), attn::shape_error);
  CHECK_THROWS_AS(gru(tape.leaf(x), {0, 5}), attn::value_error);
  CHECK_THROWS_AS(gru(tape.leaf(x), {3, 6}), attn::value_error);
}

TEST_CASE("nn::GRU gradients match finite differences (bidirectional, padded, with h0)") {
  attn::Rng rng(4);
  nn::GRU<double> gru(2, 3, true, rng);
  const auto x = Tensor<double>::randn({2, 4, 2}, rng), h0 = Tensor<double>::randn({2, 6}, rng);
  const auto g = Tensor<double>::randn({2, 4, 6}, rng), gl = Tensor<double>::randn({2, 6}, rng);
  const auto loss = [&](attn::Tape<double>& tape) {
    const Var<double> h = tape.leaf(h0);
    const nn::GRUOutput<double> o = gru(tape.leaf(x), {2, 4}, &h);
    return Var<double>(attn::sum(o.states * tape.leaf(g)) + attn::sum(o.last * tape.leaf(gl)));
  };
  attn::test::check_module_gradients(gru, loss);
  std::vector<std::string> names;
  gru.for_each_parameter(
      [&](const std::string& n, attn::Parameter<double>&) { names.push_back(n); });
  CHECK(names == std::vector<std::string>{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0",
                                          "bias_hh_l0", "weight_ih_l0_reverse",
                                          "weight_hh_l0_reverse", "bias_ih_l0_reverse",
                                          "bias_hh_l0_reverse"});
}

// ---- the dates task
// ------------------------------------------------------------------------------

TEST_CASE("dates: calendar, formats, the held-out split and batches") {
  CHECK(dates::weekday({2000, 1, 1}) == 5);    // a Saturday
  CHECK(dates::weekday({1969, 7, 20}) == 6);   // a Sunday
  CHECK(dates::weekday({2024, 2, 29}) == 3);   // a Thursday
  CHECK(dates::days_in_month(1900, 2) == 28);  // not a leap year
  CHECK(dates::days_in_month(2000, 2) == 29);
  const dates::Date d{1987, 9, 23};
  CHECK(dates::human(d, 4) == "the twenty-third of september 1987");
  CHECK(dates::human(d, 3) == "wednesday, september 23, 1987");
  CHECK(dates::human(d, 7) == "23.09.1987");
  CHECK(dates::human({2001, 3, 12}, 5) == "12th march 2001");
  CHECK(dates::iso(d) == "1987-09-23");
  CHECK(dates::ordinal_word(30) == "thirtieth");
  CHECK(dates::ordinal_word(31) == "thirty-first");

  attn::Rng rng(5);
  int held = 0;
  for (int i = 0; i < 3000; ++i) {
    const dates::Example train = dates::draw(rng, false), test = dates::draw(rng, true);
    const auto parse = [](const std::string& s) {
      return dates::Date{std::stoi(s.substr(0, 4)), std::stoi(s.substr(5, 2)),
                         std::stoi(s.substr(8, 2))};
    };
    REQUIRE(!dates::held_out(parse(train.target)));
    REQUIRE(dates::held_out(parse(test.target)));
    REQUIRE(index_t(train.source.size()) <= dates::max_source);
    held += dates::held_out({1900 + i % 200, 1 + i % 12, 1 + i % 28});
  }
  CHECK(held > 200);  // about one date in ten
  CHECK(held < 400);

  const dates::Batch b =
      dates::make_batch({{"5 mar 1987", "1987-03-05", 2}, {"05.03.1987", "1987-03-05", 7}});
  CHECK(b.src.shape() == attn::Shape{2, 10});
  CHECK(b.src_lengths == std::vector<index_t>{10, 10});
  CHECK(b.tgt_in(0, 0) == dates::bos);
  CHECK(b.tgt(0, 10) == dates::eos);
  CHECK(b.tgt_in(0, 1) == b.tgt(0, 0));
  CHECK(seq2seq::to_strings(b.tgt) == std::vector<std::string>{"1987-03-05", "1987-03-05"});
  CHECK_THROWS_AS(dates::make_batch({{"5 MAR 1987", "1987-03-05", 2}}), attn::value_error);
}

// ---- the seq2seq models
// --------------------------------------------------------------------------

namespace {

dates::Batch tiny_batch() {
  return dates::make_batch(
      {{"5 mar 1987", "1987-03-05", 2}, {"the first of may 2001", "2001-05-01", 4}});
}

}  // namespace

namespace {

template <template <class> class Score, class Tweak>
void check_rnn_gradients(Tweak&& tweak) {
  const dates::Batch batch = tiny_batch();
  seq2seq::RnnSeq2Seq<Score, double> model({.embed = 3, .hidden = 4, .seed = 1});
  tweak(model);
  INFO("score " << Score<double>::name);
  attn::test::check_module_gradients(
      model, [&](attn::Tape<double>& tape) { return model.loss(tape, batch); }, 3);
}

}  // namespace

TEST_CASE("seq2seq: the GRU model's gradients match finite differences, for every score") {
  check_rnn_gradients<seq2seq::DotScore>([](auto&) {});
  check_rnn_gradients<seq2seq::BilinearScore>([](auto& model) {
    attn::Rng rng(9);  // away from the identity, where the bilinear form is the dot product
    model.score.weight.value = Tensor<double>::randn({4, 4}, rng);
  });
  check_rnn_gradients<seq2seq::AdditiveScore>([](auto&) {});
}

TEST_CASE("seq2seq: alignments are distributions over the valid source characters") {
  const dates::Batch batch = tiny_batch();  // lengths 10 and 21: the first is padded
  const auto check = [&](auto& model) {
    attn::Tape<float> tape;
    Tensor<float> w;
    model.logits(tape, batch, &w);
    REQUIRE(w.shape() == attn::Shape{2, 1, 11, 21});
    for (index_t b = 0; b < 2; ++b)
      for (index_t t = 0; t < 11; ++t) {
        double sum = 0;
        for (index_t k = 0; k < 21; ++k) {
          const float a = w(b, 0, t, k);
          if (k >= batch.src_lengths[std::size_t(b)]) CHECK(a == 0.0f);
          sum += a;
        }
        CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));
      }
  };
  seq2seq::RnnSeq2Seq<seq2seq::DotScore> dot({.seed = 2});
  seq2seq::RnnSeq2Seq<seq2seq::BilinearScore> bilinear({.seed = 2});
  seq2seq::RnnSeq2Seq<seq2seq::AdditiveScore> additive({.seed = 2});
  check(dot);
  check(bilinear);
  check(additive);

  // Bilinear with W = I (its initial value) is the dot score: same seed, same logits.
  attn::Tape<float> tape;
  const Tensor<float> a = dot.logits(tape, batch).value(), b = bilinear.logits(tape, batch).value();
  CHECK(attn::max_abs_diff(a, b) < 1e-6);

  // Greedy decoding gives ten characters per date and one alignment row per character.
  tape.clear();
  const seq2seq::Decoded d = additive.greedy(tape, batch);
  CHECK(d.alignment.shape() == attn::Shape{2, 10, 21});
  for (const std::string& s : d.outputs) CHECK(s.size() <= 11);
}

namespace {

template <class Mask>
using Mha =
    attn::MultiHeadAttention<attn::score::ScaledDot, attn::kernel::Softmax, Mask,
                             attn::Heads<attn::dynamic>, attn::projection::Separate, double>;
using EncDec =
    nn::EncoderDecoder<Mha<attn::mask::Padding>, Mha<attn::mask::Causal>, Mha<attn::mask::Padding>>;

nn::Seq2SeqConfig tiny_config() {
  nn::Seq2SeqConfig c;
  c.src_vocab = 7, c.tgt_vocab = 5, c.src_block = 6, c.tgt_block = 4;
  c.encoder_layers = 1, c.decoder_layers = 2, c.heads = 2, c.d_model = 4;
  c.init_std = 0.5, c.seed = 3;
  return c;
}

}  // namespace

TEST_CASE("nn::EncoderDecoder: gradients, padding, causality") {
  EncDec model(tiny_config());
  const Tensor<std::int32_t> src({2, 5}, {1, 2, 3, 0, 0, 4, 5, 6, 1, 2});
  const Tensor<std::int32_t> tgt_in({2, 4}, {0, 1, 2, 3, 0, 4, 4, 1});
  const Tensor<std::int32_t> tgt({2, 4}, {1, 2, 3, 4, 4, 4, 1, 2});
  const attn::mask::Padding mask(std::vector<index_t>{3, 5});
  attn::test::check_module_gradients(
      model,
      [&](attn::Tape<double>& tape) {
        return attn::cross_entropy(model(tape, src, tgt_in, mask, mask), tgt);
      },
      2);

  attn::Tape<double> tape;
  const Tensor<double> base = model(tape, src, tgt_in, mask, mask).value();  // [2, 4, 5]
  // Padding: the source tokens past a sequence's length change nothing.
  Tensor<std::int32_t> src2 = src;
  src2(0, 3) = 6, src2(0, 4) = 5;
  CHECK(attn::max_abs_diff(model(tape, src2, tgt_in, mask, mask).value(), base) < 1e-14);
  // Causality: changing target position 2 changes no logit before it, and some logit after.
  Tensor<std::int32_t> tgt2 = tgt_in;
  tgt2(1, 2) = 2;
  const Tensor<double> changed = model(tape, src, tgt2, mask, mask).value();
  double before = 0, after = 0;
  for (index_t t = 0; t < 4; ++t)
    for (index_t v = 0; v < 5; ++v) {
      const double d = std::abs(changed(1, t, v) - base(1, t, v));
      (t < 2 ? before : after) = std::max(t < 2 ? before : after, d);
    }
  CHECK(before == 0);
  CHECK(after > 1e-6);

  std::vector<Tensor<double>> cross;
  const Var<double> memory = model.encode(tape, src, mask);
  model.decode(tape, memory, tgt_in, mask, &cross);
  REQUIRE(cross.size() == 2);
  CHECK(cross[1].shape() == attn::Shape{2, 2, 4, 5});
  for (index_t h = 0; h < 2; ++h)
    for (index_t t = 0; t < 4; ++t) CHECK(cross[1](0, h, t, 4) == 0.0);  // a padded key

  nn::Seq2SeqConfig bad = tiny_config();
  bad.decoder_layers = 0;
  CHECK_THROWS_AS(EncDec{bad}, attn::value_error);
  bad = tiny_config();
  bad.init = nn::InitScheme::mingpt;  // minGPT's scheme is a GPT's
  CHECK_THROWS_WITH_AS(EncDec{bad}, doctest::Contains("InitScheme::mingpt"), attn::value_error);
}

// ---- positions
// ------------------------------------------------------------------------------------

TEST_CASE("self-attention without positions is permutation-equivariant; with positions it is not") {
  using Encoder = nn::TransformerEncoder<Mha<attn::mask::None>>;
  const Tensor<std::int32_t> ids({1, 6}, {3, 1, 4, 1, 5, 2});
  const std::vector<index_t> perm{4, 2, 0,
                                  5, 1, 3};  // position i of the permuted input holds ids[perm[i]]
  Tensor<std::int32_t> permuted({1, 6});
  for (index_t i = 0; i < 6; ++i) permuted(0, i) = ids(0, perm[std::size_t(i)]);
  const auto gap = [&](nn::PositionEncoding p, nn::InitScheme init = nn::InitScheme::normal) {
    nn::Seq2SeqConfig c = tiny_config();
    c.src_vocab = 6, c.src_block = 6, c.encoder_layers = 2, c.d_model = 8, c.positions = p;
    c.init = init;
    Encoder enc(c);
    attn::Tape<double> tape;
    const Tensor<double> y = enc(tape, ids).value(), yp = enc(tape, permuted).value();  // [1, 6, 8]
    double worst = 0;  // f(P x) against P f(x)
    for (index_t i = 0; i < 6; ++i)
      for (index_t j = 0; j < 8; ++j)
        worst = std::max(worst, std::abs(yp(0, i, j) - y(0, perm[std::size_t(i)], j)));
    return worst;
  };
  CHECK(gap(nn::PositionEncoding::none) < 1e-12);
  CHECK(gap(nn::PositionEncoding::none, nn::InitScheme::scaled_embedding) < 1e-12);
  CHECK(gap(nn::PositionEncoding::sinusoidal) > 1e-3);
  CHECK(gap(nn::PositionEncoding::learned) > 1e-3);
}
