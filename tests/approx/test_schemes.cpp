// approx/ practical schemes and the evaluation-time replacement: LSH candidate sets
// against a brute-force reading of their definition, LSH attention against the reference
// attention restricted to those sets, random features against the reference, the probe inside
// MultiHeadAttention and a GPT, and LinformerAttention (finite differences, decoding, causality,
// its two paths against each other).
#include <doctest/doctest.h>

#include <algorithm>
#include <attn/approx/approx.hpp>
#include <attn/attention/reference.hpp>
#include <attn/attn.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "../module_gradients.hpp"
#include "../test_util.hpp"

using attn::index_t;
using attn::Rng;
using attn::Shape;
using attn::Tape;
using attn::Tensor;
using attn::Var;
namespace approx = attn::approx;
namespace mask = attn::mask;
namespace kernel = attn::kernel;
namespace score = attn::score;

static_assert(attn::nn::AttentionModule<approx::LinformerAttention<4, mask::Causal>>);
// Which modules' steps the approximations can replace: q·k scores without a position bias.
template <class S>
using CausalMha = attn::MultiHeadAttention<S, kernel::Softmax, mask::Causal>;
static_assert(approx::approximable<CausalMha<score::ScaledDot>>);
static_assert(approx::approximable<CausalMha<score::Rotary>>);  // on the rotated q, k
static_assert(!approx::approximable<CausalMha<score::Alibi>>);
static_assert(!approx::approximable<CausalMha<score::Additive>>);
static_assert(!approx::approximable<approx::LinformerAttention<4, mask::Causal>>);
static_assert(attn::nn::AttentionModule<approx::LinformerAttention<8, mask::None>>);

namespace {

// The LSH key sets by the definition, computed differently from the library: each item's rank
// in the (bucket, position) order by counting the items before it, O(n²).
std::vector<std::vector<index_t>> lsh_by_definition(const Tensor<double>& q,
                                                    const Tensor<double>& k,
                                                    const approx::LshConfig& c, index_t h,
                                                    bool causal) {
  const index_t tq = q.shape()[2], tk = k.shape()[2], d = q.shape()[3];
  const index_t buckets = c.buckets > 0 ? c.buckets : 2 * ((tk + c.chunk - 1) / c.chunk);
  std::vector<std::vector<index_t>> keys(static_cast<std::size_t>(tq));
  for (index_t t = 0; t < c.rounds; ++t) {
    const Eigen::MatrixXd r = approx::detail::lsh_rotation(c, t, h, buckets / 2, d);
    const auto bucket = [&](const Tensor<double>& x, index_t i) {
      index_t best = 0;
      double best_v = -std::numeric_limits<double>::infinity();
      for (index_t a = 0; a < buckets; ++a) {  // [−Rx; Rx]
        double p = 0;
        for (index_t e = 0; e < d; ++e) p += r(a % (buckets / 2), e) * x(0, h, i, e);
        if (a < buckets / 2) p = -p;
        if (p > best_v) best_v = p, best = a;
      }
      return best;
    };
    const auto ranks = [&](const Tensor<double>& x, index_t n) {
      std::vector<index_t> bk(static_cast<std::size_t>(n)), rank(static_cast<std::size_t>(n), 0);
      for (index_t i = 0; i < n; ++i) bk[static_cast<std::size_t>(i)] = bucket(x, i);
      for (index_t i = 0; i < n; ++i)
        for (index_t j = 0; j < n; ++j)
          if (bk[std::size_t(j)] < bk[std::size_t(i)] ||
              (bk[std::size_t(j)] == bk[std::size_t(i)] && j < i))
            ++rank[std::size_t(i)];
      return rank;
    };
    const auto rq = ranks(q, tq), rk = ranks(k, tk);
    for (index_t i = 0; i < tq; ++i)
      for (index_t j = 0; j < tk; ++j) {
        const index_t cq = rq[std::size_t(i)] / c.chunk, ck = rk[std::size_t(j)] / c.chunk;
        if ((ck == cq || ck == cq - 1) && (!causal || j <= i)) keys[std::size_t(i)].push_back(j);
      }
  }
  for (auto& s : keys) {
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
  }
  return keys;
}

// Reference attention of head (0, h) with the mask "key j in keys[i]".
template <class Kernel>
Tensor<double> reference_on(const Tensor<double>& q, const Tensor<double>& k,
                            const Tensor<double>& v, index_t h,
                            const std::vector<std::vector<index_t>>& keys) {
  const index_t tq = q.shape()[2], tk = k.shape()[2];
  Tensor<std::uint8_t> allowed(Shape{tq, tk});
  for (index_t i = 0; i < tq; ++i)
    for (const index_t j : keys[std::size_t(i)]) allowed(i, j) = 1;
  const auto one = [&](const Tensor<double>& x) {
    Tensor<double> y(Shape{1, 1, x.shape()[2], x.shape()[3]});
    for (index_t i = 0; i < y.numel(); ++i) y[i] = x[h * y.numel() + i];
    return y;
  };
  return attn::reference_attention(one(q), one(k), one(v), score::ScaledDot{}, Kernel{},
                                   mask::Custom(allowed))
      .out;
}

// Head h of out [1, H, T, D].
Tensor<double> head_of(const Tensor<double>& out, index_t h) {
  const index_t n = out.shape()[2] * out.shape()[3];
  Tensor<double> y(Shape{1, 1, out.shape()[2], out.shape()[3]});
  for (index_t i = 0; i < n; ++i) y[i] = out[h * n + i];
  return y;
}

template <class Kernel>
void check_lsh(const char* name) {
  INFO(name);
  Rng rng(21);
  const index_t H = 2, T = 37, D = 5;
  const Tensor<double> q = Tensor<double>::randn({1, H, T, D}, rng),
                       k = Tensor<double>::randn({1, H, T, D}, rng),
                       v = Tensor<double>::randn({1, H, T, D}, rng);
  for (const approx::LshConfig c : {approx::LshConfig{4, 1, 0, 3}, approx::LshConfig{4, 3, 0, 4},
                                    approx::LshConfig{8, 2, 6, 5}}) {
    const Tensor<double> got =
        approx::lsh_attention(q, k, v, score::ScaledDot{}, Kernel{}, mask::Causal{}, c);
    for (index_t h = 0; h < H; ++h) {
      const auto keys = approx::lsh_candidates(q, k, 0, h, c, mask::Causal{});
      CHECK(keys == lsh_by_definition(q, k, c, h, true));
      const Tensor<double> want = reference_on<Kernel>(q, k, v, h, keys);
      CHECK(attn::max_abs_diff(head_of(got, h), want) < 1e-12);
    }
  }
  // One chunk holding every key: exact causal attention.
  const Tensor<double> all = approx::lsh_attention(q, k, v, score::ScaledDot{}, Kernel{},
                                                   mask::Causal{}, approx::LshConfig{T, 1, 0, 1});
  const auto exact =
      attn::reference_attention(q, k, v, score::ScaledDot{}, Kernel{}, mask::Causal{});
  CHECK(attn::max_abs_diff(all, exact.out) < 1e-12);
}

attn::MultiHeadConfig small_config() {
  attn::MultiHeadConfig c;
  c.d_model = 16;
  c.heads = 2;
  c.init_std = 0.5;
  c.seed = 3;
  c.max_length = 12;
  return c;
}

attn::nn::GPTConfig gpt_config(index_t vocab, index_t block, index_t layers, index_t d_model,
                               double init_std, std::uint64_t seed) {
  attn::nn::GPTConfig c;
  c.vocab_size = vocab;
  c.block_size = block;
  c.layers = layers;
  c.heads = 2;
  c.d_model = d_model;
  c.init_std = init_std;
  c.seed = seed;
  return c;
}

}  // namespace

TEST_CASE("LSH: candidate sets by their definition, attention against the reference") {
  check_lsh<kernel::Softmax>("softmax");
  check_lsh<kernel::Polynomial<2>>("polynomial 2");
  check_lsh<kernel::EluPlusOne>("elu + 1");
}

TEST_CASE("LSH: more rounds see a superset of the keys; bad configurations throw") {
  Rng rng(22);
  const Tensor<double> q = Tensor<double>::randn({2, 1, 50, 4}, rng),
                       k = Tensor<double>::randn({2, 1, 50, 4}, rng);
  const auto one = approx::lsh_candidates(q, k, 1, 0, approx::LshConfig{5, 1, 0, 9});
  const auto four = approx::lsh_candidates(q, k, 1, 0, approx::LshConfig{5, 4, 0, 9});
  std::size_t total1 = 0, total4 = 0;
  for (std::size_t i = 0; i < one.size(); ++i) {
    CHECK(std::includes(four[i].begin(), four[i].end(), one[i].begin(), one[i].end()));
    CHECK(one[i].size() <= 10);  // own chunk and the previous one, B = 5 each
    total1 += one[i].size();
    total4 += four[i].size();
  }
  CHECK(total4 > total1);
  using attn::test::message_of;
  CHECK(message_of<attn::value_error>([&] {
          approx::lsh_candidates(q, k, 0, 0, approx::LshConfig{4, 1, 3, 0});
        }).find("LshConfig: need chunk >= 1, rounds >= 1 and an even buckets") !=
        std::string::npos);
  CHECK(message_of<attn::value_error>([&] {
          approx::lsh_candidates(q, k, 2, 0, approx::LshConfig{});
        }).find("lsh_candidates: head (2, 0)") != std::string::npos);
}

TEST_CASE("the evaluation probe: each method against its definition, inside MultiHeadAttention") {
  using Mha = attn::MultiHeadAttention<score::ScaledDot, kernel::Softmax, mask::Causal>;
  Mha mha(small_config());
  mha.training = false;
  Rng rng(23);
  const Tensor<float> x = Tensor<float>::randn({2, 12, 16}, rng);
  Tape<float> tape;
  attn::NoGrad<float> no_grad(tape);
  attn::AttentionStep<float> seen;
  mha.probe = [&](attn::AttentionStep<float>& s) { seen = s; };
  const Tensor<float> exact = mha(tape.leaf(x), mask::Causal{}).value();

  const auto run = [&](const approx::Approximation& a, approx::ErrorTally* tally = nullptr) {
    approx::approximate(mha, a, tally);
    tape.clear();
    return mha(tape.leaf(x), mask::Causal{}).value();
  };
  // Carathéodory (d + 1 = 9 keys at most) reproduces the exact output; so does top_r with r = T.
  approx::ErrorTally cara;
  CHECK(attn::max_abs_diff(run({approx::Method::caratheodory}, &cara), exact) < 1e-5);
  CHECK(cara.rows == 2 * 2 * 12);
  CHECK(cara.relative_error() < 1e-6);
  CHECK(cara.mean_keys() <= 9);
  CHECK(attn::max_abs_diff(run({approx::Method::top_r, 12}), exact) < 1e-5);
  // OVO-1 and OVA-1 replace each head's row by one value: errors, and OVA-1's is the smaller.
  approx::ErrorTally ovo, ova;
  const Tensor<float> y_ovo = run({approx::Method::top_r, 1}, &ovo);
  const Tensor<float> y_ova = run({approx::Method::value_aware_1}, &ova);
  CHECK(attn::max_abs_diff(y_ovo, exact) > 1e-3);
  CHECK(ova.squared_error < ovo.squared_error);
  CHECK(ovo.mean_keys() == 1);
  // A tally from position 6 on counts the last 6 queries of each head's 12: a causal window of 4
  // keys then has all 4 everywhere (over every row, the first 3 have fewer: 1, 2, 3).
  approx::ErrorTally all_rows, later;
  later.first_position = 6;
  run({approx::Method::sliding_window, 4}, &all_rows);
  run({approx::Method::sliding_window, 4}, &later);
  CHECK(all_rows.rows == 2 * 2 * 12);
  CHECK(later.rows == 2 * 2 * 6);
  CHECK(later.mean_keys() == 4);
  CHECK(all_rows.mean_keys() == doctest::Approx((1 + 2 + 3 + 4 * 9) / 12.0));
  CHECK(later.squared_norm < all_rows.squared_norm);
  // Per row, the module's heads are exactly what the per-query functions give on its weights.
  const index_t T = 12, Dh = 8;
  for (const auto& a : {approx::Approximation{approx::Method::top_r, 3},
                        approx::Approximation{approx::Method::value_aware_r, 3},
                        approx::Approximation{approx::Method::sliding_window, 4}}) {
    INFO(a.name());
    attn::AttentionStep<float> step = seen;
    approx::make_probe(a, score::ScaledDot{}, kernel::Softmax{}, mask::Causal{})(step);
    for (index_t row = 0; row < 2 * 2 * T; ++row) {
      const index_t i = row % T, b = row / (2 * T), h = (row / T) % 2;
      const approx::HeadValues<float> values(seen.v.data() + (b * 2 + h) * T * Dh, T, Dh);
      const std::span<const float> alpha(seen.weights.data() + row * T, std::size_t(T));
      const approx::Sparse s = a.method == approx::Method::top_r ? approx::top_r(alpha, 3)
                               : a.method == approx::Method::value_aware_r
                                   ? approx::value_aware_r(alpha, values, 3)
                                   : approx::sliding_window_r(alpha, i, 4);
      float want[Dh];
      approx::combine(s, values.v, want);
      for (index_t c = 0; c < Dh; ++c) CHECK(step.output[row * Dh + c] == want[c]);
    }
  }
  // LSH: the step's heads through lsh_attention.
  {
    const approx::Approximation a{approx::Method::lsh, 1, approx::LshConfig{3, 2, 0, 7}};
    attn::AttentionStep<float> step = seen;
    approx::make_probe(a, score::ScaledDot{}, kernel::Softmax{}, mask::Causal{})(step);
    const Tensor<float> want = approx::lsh_attention(seen.q, seen.k, seen.v, score::ScaledDot{},
                                                     kernel::Softmax{}, mask::Causal{}, a.lsh);
    CHECK(attn::max_abs_diff(step.output, want) == 0);
  }
  // Random features: the reference attention with kernel::RandomFeatures on the step's heads.
  {
    const approx::Approximation a{approx::Method::random_features, 1, {}, 64, 5};
    attn::AttentionStep<float> step = seen;
    approx::make_probe(a, score::ScaledDot{}, kernel::Softmax{}, mask::Causal{})(step);
    const auto ref = attn::reference_attention(seen.q, seen.k, seen.v, score::ScaledDot{},
                                               kernel::RandomFeatures{64, 5}, mask::Causal{});
    CHECK(attn::max_abs_diff(step.output, ref.out) < 1e-4);
  }
  // Back to exact: the probe is removed.
  approx::approximate(mha, approx::Approximation{});
  CHECK(!mha.probe);
  using attn::test::message_of;
  CHECK(message_of<attn::value_error>([&] {
          approx::make_probe(approx::Approximation{approx::Method::random_features},
                             score::ScaledDot{}, kernel::Polynomial<2>{}, mask::Causal{});
        })
            .find("random features estimate the exponential kernel; this model's kernel is "
                  "polynomial") != std::string::npos);
}

TEST_CASE("the evaluation probe refuses negative weights (an odd polynomial kernel)") {
  attn::MultiHeadAttention<score::ScaledDot, kernel::Polynomial<3>, mask::Causal> mha(
      small_config());
  mha.training = false;
  Rng rng(27);
  const Tensor<float> x = Tensor<float>::randn({1, 12, 16}, rng);
  Tape<float> tape;
  attn::NoGrad<float> no_grad(tape);
  approx::approximate(mha, {approx::Method::top_r, 2});
  CHECK(attn::test::message_of<attn::value_error>([&] {
          mha(tape.leaf(x), mask::Causal{});
        }).find("OVO-2 needs attention weights that are finite and >= 0") != std::string::npos);
}

TEST_CASE("random features approach exact softmax attention as F grows") {
  Rng rng(24);
  const Tensor<double> q = Tensor<double>::randn({1, 2, 40, 8}, rng, 0.0, 0.5),
                       k = Tensor<double>::randn({1, 2, 40, 8}, rng, 0.0, 0.5),
                       v = Tensor<double>::randn({1, 2, 40, 8}, rng);
  const auto exact =
      attn::reference_attention(q, k, v, score::ScaledDot{}, kernel::Softmax{}, mask::Causal{});
  // ‖õ − o‖ / ‖o‖ over every output, averaged over 4 draws (the estimate is random).
  double norm = 0;
  for (const double o : exact.out) norm += o * o;
  double previous = 1e9;
  for (const index_t f : {8, 64, 1024}) {
    double err = 0;
    for (std::uint64_t seed = 0; seed < 4; ++seed) {
      Tape<double> tape;
      const attn::Attention<score::ScaledDot, kernel::RandomFeatures, mask::Causal> op{
          {}, kernel::RandomFeatures{f, seed}, {}};
      const Tensor<double> y = op(tape.leaf(q), tape.leaf(k), tape.leaf(v)).value();
      double e2 = 0;
      for (index_t i = 0; i < y.numel(); ++i) e2 += (y[i] - exact.out[i]) * (y[i] - exact.out[i]);
      err += std::sqrt(e2 / norm) / 4;
    }
    MESSAGE("random features, F = " << f << ": relative error " << err);
    CHECK(err < previous);
    previous = err;
  }
  CHECK(previous < 0.07);
}

TEST_CASE("drop-in replacement in a trained-shape GPT: Caratheodory keeps the logits, OVO-1 not") {
  using Mha = attn::MultiHeadAttention<score::ScaledDot, kernel::Polynomial<2>, mask::Causal>;
  attn::nn::GPT<Mha> gpt(gpt_config(11, 16, 2, 8, 0.3, 4));
  gpt.set_training(false);
  Tensor<std::int32_t> ids(Shape{2, 16});
  for (index_t i = 0; i < ids.numel(); ++i) ids[i] = std::int32_t((i * 7 + 3) % 11);
  Tape<float> tape;
  attn::NoGrad<float> no_grad(tape);
  const auto logits_with = [&](const approx::Approximation& a) {
    for (auto& block : gpt.blocks) approx::approximate(block.attn, a);
    tape.clear();
    return gpt(tape, ids).value();
  };
  const Tensor<float> exact = logits_with({});
  CHECK(attn::max_abs_diff(logits_with({approx::Method::caratheodory}), exact) < 1e-4);
  CHECK(attn::max_abs_diff(logits_with({approx::Method::top_r, 1}), exact) > 1e-3);
}

TEST_CASE("LinformerAttention: finite differences, both masks, every parameter and the input") {
  Rng rng(25);
  attn::MultiHeadConfig c;
  c.d_model = 6;
  c.heads = 2;
  c.init_std = 0.4;
  c.seed = 8;
  c.max_length = 7;
  const Tensor<double> x = Tensor<double>::randn({2, 6, 6}, rng);
  approx::LinformerAttention<3, mask::Causal, attn::Heads<attn::dynamic>, double> causal(c);
  attn::test::check_gradients(causal, x, [&](const Var<double>& v) { return causal(v); });
  approx::LinformerAttention<3, mask::None, attn::Heads<attn::dynamic>, double> none(c);
  attn::test::check_gradients(none, x, [&](const Var<double>& v) { return none(v); });
}

TEST_CASE("LinformerAttention: the projected path equals the masked path; causality; decoding") {
  Rng rng(26);
  attn::MultiHeadConfig c = small_config();
  const Tensor<double> x = Tensor<double>::randn({2, 6, 16}, rng);
  using Dyn = attn::Heads<attn::dynamic>;
  approx::LinformerAttention<4, mask::None, Dyn, double> none(c);
  approx::LinformerAttention<4, mask::Custom, Dyn, double> custom(c);  // same seed, same weights
  Tape<double> tape;
  Tensor<std::uint8_t> ones(Shape{6, 6}, 1);
  Tensor<double> w_none, w_custom;
  const Tensor<double> y_none = none(tape.leaf(x), {}, &w_none).value();
  const Tensor<double> y_custom = custom(tape.leaf(x), mask::Custom(ones), &w_custom).value();
  CHECK(attn::max_abs_diff(y_none, y_custom) < 1e-12);
  CHECK(w_none.shape() == Shape{2, 2, 6, 4});
  CHECK(attn::max_abs_diff(w_none, w_custom) < 1e-12);

  // Causal: changing the last position changes no earlier output.
  approx::LinformerAttention<4, mask::Causal, Dyn, double> causal(c);
  Tensor<double> x2 = x;
  for (index_t b = 0; b < 2; ++b)
    for (index_t d = 0; d < 16; ++d) x2(b, 5, d) += 1.0;
  const Tensor<double> y1 = causal(tape.leaf(x)).value(), y2 = causal(tape.leaf(x2)).value();
  double early = 0, last = 0;
  for (index_t b = 0; b < 2; ++b)
    for (index_t i = 0; i < 6; ++i)
      for (index_t d = 0; d < 16; ++d)
        (i < 5 ? early : last) =
            std::max(i < 5 ? early : last, std::abs(y1(b, i, d) - y2(b, i, d)));
  CHECK(early < 1e-12);
  CHECK(last > 1e-6);
  attn::test::check_decode(causal, x);

  using attn::test::message_of;
  CHECK(message_of<attn::shape_error>([&] {
          causal(tape.leaf(Tensor<double>::randn({1, 13, 16}, rng)));
        }).find("LinformerAttention: 13 positions exceed config.max_length = 12") !=
        std::string::npos);
  c.max_length = 0;
  CHECK(message_of<attn::value_error>([&] {
          approx::LinformerAttention<4, mask::Causal, Dyn, double> bad(c);
        }).find("config.max_length must be positive") != std::string::npos);
}

TEST_CASE("nn::GPT<LinformerAttention> learns a periodic sequence") {
  attn::nn::GPT<approx::LinformerAttention<4, mask::Causal>> gpt(gpt_config(5, 12, 1, 16, 0.02, 2));
  Tensor<std::int32_t> ids(Shape{4, 12}), targets(Shape{4, 12});
  for (index_t b = 0; b < 4; ++b)
    for (index_t i = 0; i < 12; ++i) {
      ids(b, i) = std::int32_t((b + i) % 5);
      targets(b, i) = std::int32_t((b + i + 1) % 5);
    }
  auto params = attn::optim::parameters_of<float>(gpt);
  attn::optim::AdamConfig ac;
  ac.lr = 1e-2;
  attn::optim::AdamW<float> opt(params, ac);
  Tape<float> tape;
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    tape.clear();
    const Var<float> loss = gpt.loss(tape, ids, targets);
    tape.backward(loss);
    opt.step();
    opt.zero_grad();
    (step == 0 ? first : last) = loss.item();
  }
  INFO("loss " << first << " -> " << last);
  CHECK(last < 0.1 * first);
}
