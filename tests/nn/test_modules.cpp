// nn modules: gradients of every parameter by finite differences (double), the tiny GPT's full
// backward, parameter names, decoding with the cache against the full forward pass, sampling.
#include <doctest/doctest.h>

#include <algorithm>
#include <attn/attn.hpp>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "../module_gradients.hpp"
#include "../test_util.hpp"

using attn::index_t;
using attn::Shape;
using attn::Tape;
using attn::Tensor;
using attn::Var;
namespace nn = attn::nn;

namespace {

using CausalMha =
    attn::MultiHeadAttention<attn::score::ScaledDot, attn::kernel::Softmax, attn::mask::Causal,
                             attn::Heads<attn::dynamic>, attn::projection::Separate, double>;
using TiedMha =
    attn::MultiHeadAttention<attn::score::ScaledDot, attn::kernel::Softmax, attn::mask::Causal,
                             attn::Heads<attn::dynamic>, attn::projection::Tied, double>;
using LinearMha =
    attn::MultiHeadAttention<attn::score::ScaledDot, attn::kernel::EluPlusOne, attn::mask::Causal,
                             attn::Heads<attn::dynamic>, attn::projection::Separate, double>;
using RotaryMha =
    attn::MultiHeadAttention<attn::score::Rotary, attn::kernel::Softmax, attn::mask::Causal,
                             attn::Heads<attn::dynamic>, attn::projection::Separate, double>;

// A GPT of Llama's architecture: RMSNorm, SwiGLU of width 12, no biases, rotary positions in
// GPT-NeoX's half-split layout with Llama 3's base, 4 query heads sharing 2 key/value heads,
// untied head.
nn::GPTConfig llama_config(nn::GPTConfig c) {
  c.heads = 4;
  c.kv_heads = 2;
  c.bias = false;
  c.positions = nn::PositionEncoding::none;
  c.norm = nn::NormKind::rms;
  c.norm_eps = 1e-6;
  c.feed_forward = nn::FeedForwardKind::swiglu;
  c.hidden = 12;
  return c;
}

nn::GPT<RotaryMha> llama_gpt(const nn::GPTConfig& c) {
  return nn::GPT<RotaryMha>(c, [](const attn::MultiHeadConfig& mc) {
    RotaryMha a(mc);
    a.score.pairs = attn::RotaryPairs::halves;
    a.score.base = 500000.0;
    return a;
  });
}

// sum(module(x) ⊙ r) for a fixed random r: every output element reaches the loss.
template <class F>
auto weighted_sum(const Tensor<double>& x, const Shape& out_shape, F&& module) {
  attn::Rng rng(99);
  const Tensor<double> r = Tensor<double>::randn(out_shape, rng);
  return [x, r, module](Tape<double>& tape) mutable {
    return attn::sum(module(tape.leaf(x)) * tape.leaf(r));
  };
}

nn::GPTConfig tiny_config() {
  nn::GPTConfig c;
  c.vocab_size = 7;
  c.block_size = 6;
  c.layers = 2;
  c.heads = 2;
  c.d_model = 8;
  c.init_std = 0.3;  // larger than 0.02 so that every path carries a visible gradient
  c.seed = 5;
  return c;
}

Tensor<std::int32_t> ids_of(const Shape& s, std::vector<std::int32_t> v) {
  return Tensor<std::int32_t>(s, std::span<const std::int32_t>(v));
}

}  // namespace

TEST_CASE("nn::Linear, nn::LayerNorm, nn::MLP: parameter gradients by finite differences") {
  attn::Rng rng(1);
  const Tensor<double> x = Tensor<double>::randn({2, 3, 5}, rng);
  SUBCASE("Linear") {
    nn::Linear<double> lin(5, 4, true, 0.5, rng);
    attn::test::check_module_gradients(
        lin, weighted_sum(x, {2, 3, 4}, [&](const Var<double>& v) { return lin(v); }));
  }
  SUBCASE("LayerNorm") {
    nn::LayerNorm<double> ln(5);
    ln.weight.value = Tensor<double>::randn({5}, rng);
    ln.bias.value = Tensor<double>::randn({5}, rng);
    attn::test::check_module_gradients(
        ln, weighted_sum(x, {2, 3, 5}, [&](const Var<double>& v) { return ln(v); }));
  }
  SUBCASE("MLP") {
    nn::MLP<double> mlp(5, 20, true, 0.5, 0.3, rng);
    attn::test::check_module_gradients(
        mlp, weighted_sum(x, {2, 3, 5}, [&](const Var<double>& v) { return mlp(v); }), 3);
  }
}

TEST_CASE("nn::RMSNorm, nn::SwiGLU: parameter gradients by finite differences") {
  attn::Rng rng(3);
  const Tensor<double> x = Tensor<double>::randn({2, 3, 5}, rng);
  SUBCASE("RMSNorm") {
    nn::RMSNorm<double> norm(5, 1e-5);
    norm.weight.value = Tensor<double>::randn({5}, rng);
    attn::test::check_module_gradients(
        norm, weighted_sum(x, {2, 3, 5}, [&](const Var<double>& v) { return norm(v); }));
  }
  SUBCASE("SwiGLU") {
    nn::SwiGLU<double> mlp(5, 7, 0.5, 0.3, rng);
    attn::test::check_module_gradients(
        mlp, weighted_sum(x, {2, 3, 5}, [&](const Var<double>& v) { return mlp(v); }), 3);
    // Its parameters: three bias-free projections, named as they are visited.
    std::vector<std::string> names;
    mlp.for_each_parameter([&](const std::string& n, auto&) { names.push_back(n); }, "mlp");
    CHECK(names == std::vector<std::string>{"mlp.gate.weight", "mlp.up.weight", "mlp.down.weight"});
    // Its value: the formula, element by element.
    Tape<double> tape;
    const Tensor<double> y = mlp(tape.leaf(x)).value();
    const auto& Wg = mlp.gate.weight.value;
    const auto& Wu = mlp.up.weight.value;
    const auto& Wd = mlp.down.weight.value;
    for (index_t r = 0; r < 6; ++r)
      for (index_t o = 0; o < 5; ++o) {
        double want = 0;
        for (index_t h = 0; h < 7; ++h) {
          double g = 0, u = 0;
          for (index_t i = 0; i < 5; ++i)
            g += Wg(h, i) * x[r * 5 + i], u += Wu(h, i) * x[r * 5 + i];
          want += Wd(o, h) * (g / (1 + std::exp(-g))) * u;
        }
        CHECK(y[r * 5 + o] == doctest::Approx(want).epsilon(1e-12));
      }
  }
}

TEST_CASE("nn::TransformerBlock: pre-LN and post-LN gradients by finite differences") {
  attn::Rng rng(2);
  const Tensor<double> x = Tensor<double>::randn({2, 4, 8}, rng);
  const attn::MultiHeadConfig mc{8, 2, 0, 0.0, true, 0.4, 11};
  for (const bool pre_ln : {true, false}) {
    CAPTURE(pre_ln);
    nn::TransformerBlock<CausalMha> block(mc, pre_ln, 0.2, rng);
    attn::test::check_module_gradients(
        block, weighted_sum(x, {2, 4, 8}, [&](const Var<double>& v) { return block(v); }), 7);
  }
}

TEST_CASE("nn::GPT: the full backward of a tiny model against finite differences") {
  const auto ids = ids_of({2, 5}, {1, 2, 3, 4, 5, 6, 0, 1, 2, 3});
  const auto targets = ids_of({2, 5}, {2, 3, 4, 5, 6, 0, 1, 2, 3, -100});
  auto check = [&](nn::GPTConfig c) {
    nn::GPT<CausalMha> gpt(c);
    attn::test::check_module_gradients(
        gpt, [&](Tape<double>& tape) { return gpt.loss(tape, ids, targets); }, 5);
  };
  SUBCASE("learned positions, pre-LN") {
    check(tiny_config());
  }
  SUBCASE("sinusoidal positions, tied head, scaled embedding, post-LN") {
    nn::GPTConfig c = tiny_config();
    c.positions = nn::PositionEncoding::sinusoidal;
    c.tie_weights = true;
    c.init = nn::InitScheme::scaled_embedding;
    c.init_std = 0.1;
    c.pre_ln = false;
    check(c);
  }
}

TEST_CASE("nn::GPT of GPT-2's and Llama's architectures: the full backward by finite differences") {
  const auto ids = ids_of({2, 5}, {1, 2, 3, 4, 5, 6, 0, 1, 2, 3});
  const auto targets = ids_of({2, 5}, {2, 3, 4, 5, 6, 0, 1, 2, 3, -100});
  SUBCASE("GPT-2: tanh GELU, tied head, learned positions") {
    nn::GPTConfig c = tiny_config();
    c.feed_forward = nn::FeedForwardKind::gelu_tanh;
    c.tie_weights = true;
    nn::GPT<CausalMha> gpt(c);
    attn::test::check_module_gradients(
        gpt, [&](Tape<double>& tape) { return gpt.loss(tape, ids, targets); }, 5);
  }
  SUBCASE("Llama: RMSNorm, SwiGLU, rotary halves, grouped-query heads, no biases") {
    nn::GPT<RotaryMha> gpt = llama_gpt(llama_config(tiny_config()));
    attn::test::check_module_gradients(
        gpt, [&](Tape<double>& tape) { return gpt.loss(tape, ids, targets); }, 3);
  }
}

TEST_CASE("nn::GPT: a block's norm and feed-forward network are the modules they stand for") {
  // The Llama block's parts, called on the same input, are nn::RMSNorm and nn::SwiGLU with the
  // same weights; GPT-2's tanh GELU is gelu_tanh.
  nn::GPT<RotaryMha> gpt = llama_gpt(llama_config(tiny_config()));
  attn::Rng rng(4);
  const Tensor<double> x = Tensor<double>::randn({2, 3, 8}, rng);
  auto& block = gpt.blocks[0];
  block.ln1.weight.value = Tensor<double>::randn({8}, rng);
  nn::RMSNorm<double> rms(8, 1e-6);
  rms.weight.value = block.ln1.weight.value;
  nn::SwiGLU<double> swiglu = block.mlp.swiglu;
  Tape<double> tape;
  const Tensor<double> a = block.ln1(tape.leaf(x)).value(), b = rms(tape.leaf(x)).value();
  const Tensor<double> c = block.mlp(tape.leaf(x)).value(), d = swiglu(tape.leaf(x)).value();
  for (index_t i = 0; i < a.numel(); ++i) CHECK(a[i] == b[i]);
  for (index_t i = 0; i < c.numel(); ++i) CHECK(c[i] == d[i]);
  nn::MLP<double> mlp(8, 16, true, 0.3, 0.3, rng, nn::GeluForm::tanh);
  const Tensor<double> e = mlp(tape.leaf(x)).value();
  const Tensor<double> f = mlp.proj(Var<double>(attn::gelu_tanh(mlp.fc(tape.leaf(x))))).value();
  for (index_t i = 0; i < e.numel(); ++i) CHECK(e[i] == f[i]);
  // tanh GELU is not the exact one (a control: the forms differ where |x| is moderate).
  nn::MLP<double> exact = mlp;
  exact.gelu_form = nn::GeluForm::exact;
  const Tensor<double> g = exact(tape.leaf(x)).value();
  double most = 0;
  for (index_t i = 0; i < e.numel(); ++i) most = std::max(most, std::abs(e[i] - g[i]));
  CHECK(most > 1e-6);
}

TEST_CASE("nn::GPT of Llama's architecture: parameter names, counts, and its errors") {
  nn::GPTConfig c = llama_config(tiny_config());
  c.layers = 1;
  nn::GPT<RotaryMha> gpt = llama_gpt(c);
  std::vector<std::string> names;
  gpt.for_each_parameter(
      [&](const std::string& n, attn::Parameter<double>&) { names.push_back(n); });
  const std::vector<std::string> expected{"tok_emb.weight",
                                          "blocks.0.ln1.weight",
                                          "blocks.0.attn.q_proj.weight",
                                          "blocks.0.attn.k_proj.weight",
                                          "blocks.0.attn.v_proj.weight",
                                          "blocks.0.attn.out_proj.weight",
                                          "blocks.0.ln2.weight",
                                          "blocks.0.mlp.gate.weight",
                                          "blocks.0.mlp.up.weight",
                                          "blocks.0.mlp.down.weight",
                                          "ln_f.weight",
                                          "head.weight"};
  CHECK(names == expected);
  // 7·8 + block (8 + q 8·8 + k, v 4·8 each (2 key/value heads of 2) + out 8·8 + 8 + 3·(12·8))
  // + 8 + 8·7.
  CHECK(nn::parameter_count(gpt) == 56 + (8 + 64 + 32 + 32 + 64 + 8 + 288) + 8 + 56);
  nn::GPTConfig bad = c;
  bad.bias = true;
  CHECK(attn::test::message_of([&] { llama_gpt(bad); }).find("SwiGLU network has no biases") !=
        std::string::npos);
  bad = c;
  bad.norm_eps = 0;
  CHECK(attn::test::message_of([&] { llama_gpt(bad); }).find("norm_eps (0) positive") !=
        std::string::npos);
}

TEST_CASE("nn::GPT: parameter names and counts") {
  nn::GPTConfig c = tiny_config();
  c.layers = 1;
  std::vector<std::string> names;
  nn::GPT<CausalMha> gpt(c);
  gpt.for_each_parameter(
      [&](const std::string& n, attn::Parameter<double>&) { names.push_back(n); });
  const std::vector<std::string> expected{"tok_emb.weight",
                                          "pos_emb.weight",
                                          "blocks.0.ln1.weight",
                                          "blocks.0.ln1.bias",
                                          "blocks.0.attn.q_proj.weight",
                                          "blocks.0.attn.q_proj.bias",
                                          "blocks.0.attn.k_proj.weight",
                                          "blocks.0.attn.k_proj.bias",
                                          "blocks.0.attn.v_proj.weight",
                                          "blocks.0.attn.v_proj.bias",
                                          "blocks.0.attn.out_proj.weight",
                                          "blocks.0.attn.out_proj.bias",
                                          "blocks.0.ln2.weight",
                                          "blocks.0.ln2.bias",
                                          "blocks.0.mlp.fc.weight",
                                          "blocks.0.mlp.fc.bias",
                                          "blocks.0.mlp.proj.weight",
                                          "blocks.0.mlp.proj.bias",
                                          "ln_f.weight",
                                          "ln_f.bias",
                                          "head.weight"};
  CHECK(names == expected);
  // 7·8 + 6·8 + block (2·8 + 4·(8·8 + 8) + 2·8 + (8·32 + 32) + (32·8 + 8)) + 2·8 + 8·7
  CHECK(nn::parameter_count(gpt) == 56 + 48 + (16 + 288 + 16 + 288 + 264) + 16 + 56);
  // Tied query/key: one projection fewer per block, a third of the attention's q/k/v weights.
  nn::GPT<TiedMha> tied(c);
  CHECK(nn::parameter_count(gpt) - nn::parameter_count(tied) == 8 * 8 + 8);
}

TEST_CASE("nn::GPT initialisations: GPT-2's scales the residual projections, minGPT's does not") {
  // Two layers of width 64: 4096 weights per matrix estimate a standard deviation within ~2 %.
  nn::GPTConfig c;
  c.vocab_size = 50, c.block_size = 64, c.layers = 2, c.heads = 4, c.d_model = 64, c.seed = 3;
  std::map<std::string, Tensor<double>> weights[2];
  for (int k = 0; k < 2; ++k) {
    c.init = k == 0 ? nn::InitScheme::normal : nn::InitScheme::mingpt;
    nn::GPT<CausalMha> gpt(c);
    gpt.for_each_parameter(
        [&](const std::string& n, attn::Parameter<double>& p) { weights[k][n] = p.value; });
  }
  const auto sd = [](const Tensor<double>& t) {
    double s = 0;
    for (double v : t) s += v * v;
    return std::sqrt(s / double(t.numel()));
  };
  for (const char* name : {"blocks.1.attn.out_proj.weight", "blocks.1.mlp.proj.weight"}) {
    INFO(name);
    CHECK(sd(weights[0][name]) == doctest::Approx(0.02 / 2).epsilon(0.04));  // 0.02 / √(2·2)
    CHECK(sd(weights[1][name]) == doctest::Approx(0.02).epsilon(0.04));
  }
  for (const char* name : {"blocks.1.attn.q_proj.weight", "blocks.1.mlp.fc.weight"}) {
    CHECK(sd(weights[0][name]) == doctest::Approx(0.02).epsilon(0.04));
    CHECK(std::equal(weights[0][name].begin(), weights[0][name].end(), weights[1][name].begin()));
  }
  CHECK(sd(weights[0]["pos_emb.weight"]) == doctest::Approx(0.02).epsilon(0.04));
  CHECK(sd(weights[1]["pos_emb.weight"]) == 0);  // minGPT's position table starts at zero
}

TEST_CASE("nn::GPT: decoding with the key/value cache equals the full forward pass") {
  const auto ids = ids_of({2, 6}, {1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5});
  auto check = [&](auto& gpt) {
    gpt.set_training(false);
    Tape<double> tape;
    const Tensor<double> full = gpt(tape, ids).value();  // [2, 6, 7]
    auto caches = gpt.make_caches();
    // Feed 3 positions, then 1, then 2: each chunk's logits are the matching rows of `full`.
    index_t done = 0;
    for (const index_t chunk : {3, 1, 2}) {
      Tensor<std::int32_t> part(Shape{2, chunk});
      for (index_t b = 0; b < 2; ++b)
        for (index_t i = 0; i < chunk; ++i) part[b * chunk + i] = ids[b * 6 + done + i];
      const Tensor<double> got = gpt.decode(tape, part, caches).value();
      for (index_t b = 0; b < 2; ++b)
        for (index_t i = 0; i < chunk; ++i)
          for (index_t v = 0; v < 7; ++v)
            CHECK(got[(b * chunk + i) * 7 + v] ==
                  doctest::Approx(full[(b * 6 + done + i) * 7 + v]).epsilon(1e-12));
      done += chunk;
    }
    CHECK(caches[0].length() == 6);
    Tensor<std::int32_t> one(Shape{2, 1}, std::int32_t{1});
    CHECK(attn::test::message_of([&] {
            gpt.decode(tape, one, caches);
          }).find("exceed the block size 6") != std::string::npos);
  };
  nn::GPT<CausalMha> standard(tiny_config());
  check(standard);
  nn::GPT<TiedMha> tied(tiny_config());
  check(tied);
  nn::GPTConfig c = tiny_config();
  c.positions = nn::PositionEncoding::sinusoidal;
  nn::GPT<LinearMha> linear(c);
  check(linear);
  nn::GPT<RotaryMha> llama = llama_gpt(llama_config(tiny_config()));
  check(llama);
}

TEST_CASE("nn::generate: the cached and the uncached sampler draw the same tokens") {
  nn::GPTConfig c = tiny_config();
  c.block_size = 24;
  nn::GPT<CausalMha> gpt(c);
  const std::vector<std::int32_t> prompt{3, 1, 4};
  for (const double temperature : {0.0, 0.8}) {
    nn::SampleConfig s;
    s.max_tokens = 21;  // prompt + new tokens fill the block exactly: no restart
    s.temperature = temperature;
    s.top_k = 4;
    s.seed = 17;
    const auto cached = nn::generate(gpt, prompt, s);
    s.use_cache = false;
    const auto uncached = nn::generate(gpt, prompt, s);
    CHECK(cached.size() == 21);
    CHECK(cached == uncached);
  }
  CHECK(gpt.training());  // restored after sampling
  nn::SampleConfig s;
  s.max_tokens = 60;  // past the block: the cached sampler restarts from half a block
  s.seed = 3;
  CHECK(nn::generate(gpt, prompt, s).size() == 60);
  const auto full = nn::generate(gpt, prompt, s);
  // A stop request (a trainer's Ctrl-C) ends the sample where it is asked, as a prefix of the
  // sample it cuts short.
  int asked = 0;
  s.stop_requested = [&] { return ++asked > 7; };
  const auto cut = nn::generate(gpt, prompt, s);
  CHECK(cut.size() == 7);
  CHECK(std::equal(cut.begin(), cut.end(), full.begin()));
  s.stop_requested = nullptr;
  s.stop_token = full[4];
  CHECK(nn::generate(gpt, prompt, s).size() <= 5);
}

TEST_CASE("nn::sample_token: top-p keeps the nucleus, as transformers' TopPLogitsWarper") {
  // Probabilities 0.5, 0.3, 0.2 (logits log p). transformers removes the tokens whose ascending
  // cumulative probability is <= 1 - top_p: at 0.6 it keeps 0.5 and 0.3, at 0.5 only 0.5, at
  // 0.81 all three; 1 filters nothing (the control).
  const std::vector<double> logits{std::log(0.2), std::log(0.5), std::log(0.3)};
  const auto draws = [&](double top_p, index_t top_k) {
    nn::SampleConfig s;
    s.top_p = top_p;
    s.top_k = top_k;
    attn::Rng rng(3);
    std::vector<int> counts(3);
    for (int i = 0; i < 4000; ++i) ++counts[std::size_t(nn::sample_token<double>(logits, s, rng))];
    return counts;
  };
  std::vector<int> c = draws(0.6, 0);
  CHECK(c[0] == 0);
  CHECK(c[1] / 4000.0 == doctest::Approx(0.625).epsilon(0.05));  // 0.5 / 0.8
  c = draws(0.5, 0);
  CHECK(c[1] == 4000);
  c = draws(0.81, 0);
  CHECK(c[0] > 0);
  c = draws(1.0, 0);
  CHECK(c[0] / 4000.0 == doctest::Approx(0.2).epsilon(0.1));
  // After top-k = 2 the candidates are 0.625 and 0.375: top_p 0.6 keeps only the first.
  c = draws(0.6, 2);
  CHECK(c[1] == 4000);
  nn::SampleConfig bad;
  bad.top_p = 0;
  attn::Rng rng(1);
  CHECK(attn::test::message_of([&] { nn::sample_token<double>(logits, bad, rng); }) ==
        "sample_token: top_p must be in (0, 1], got 0");
}

TEST_CASE("nn::sample_token: temperature 0 is argmax; top-k keeps the k best") {
  const std::vector<float> logits{0.1f, 3.0f, -1.0f, 2.9f, 0.0f};
  attn::Rng rng(1);
  nn::SampleConfig s;
  s.temperature = 0;
  CHECK(nn::sample_token<float>(logits, s, rng) == 1);
  s.temperature = 1;
  s.top_k = 2;
  int counts[5] = {};
  for (int i = 0; i < 2000; ++i) ++counts[nn::sample_token<float>(logits, s, rng)];
  CHECK(counts[0] + counts[2] + counts[4] == 0);
  // p(1) / p(3) = e^0.1: about 0.525 of the draws.
  CHECK(counts[1] / 2000.0 == doctest::Approx(0.525).epsilon(0.06));
  const std::vector<float> bad{0.0f, std::numeric_limits<float>::quiet_NaN()};
  CHECK(attn::test::message_of([&] {
          nn::sample_token<float>(bad, s, rng);
        }).find("logit 1 is not finite") != std::string::npos);
}

TEST_CASE("nn: sinusoidal positions and configuration errors") {
  const Tensor<double> pe = nn::sinusoidal_positions<double>(3, 4);
  CHECK(pe[0] == 0.0);
  CHECK(pe[1] == 1.0);
  CHECK(pe[4 + 0] == doctest::Approx(std::sin(1.0)));
  CHECK(pe[4 + 3] == doctest::Approx(std::cos(1.0 / 100.0)));
  nn::GPTConfig c = tiny_config();
  c.d_model = 9;
  CHECK(attn::test::message_of([&] { nn::GPT<CausalMha> g(c); }).find("divisible") !=
        std::string::npos);
  c = tiny_config();
  c.layers = 0;
  CHECK(attn::test::message_of([&] { nn::GPT<CausalMha> g(c); }).find("layers (0)") !=
        std::string::npos);
  nn::GPT<CausalMha> gpt(tiny_config());
  Tape<double> tape;
  CHECK(attn::test::message_of([&] {
          gpt(tape, ids_of({1, 7}, {0, 1, 2, 3, 4, 5, 6}));
        }).find("exceed the block size") != std::string::npos);
  CHECK(attn::test::message_of([&] {
          gpt(tape, ids_of({1, 2}, {0, 7}));
        }).find("outside") != std::string::npos);
}

namespace {

// Same shape, same values, bit for bit.
bool identical(const Tensor<double>& a, const Tensor<double>& b) {
  if (a.shape() != b.shape()) return false;
  for (index_t i = 0; i < a.numel(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

}  // namespace

TEST_CASE("nn::AnyAttention: a GPT built through it is the GPT of the module it holds") {
  using Any = nn::AnyAttention<double, attn::mask::Causal>;
  static_assert(nn::AttentionModule<Any>);
  using RotaryMha =
      attn::MultiHeadAttention<attn::score::Rotary, attn::kernel::Softmax, attn::mask::Causal,
                               attn::Heads<attn::dynamic>, attn::projection::Separate, double>;
  const auto ids = ids_of({2, 6}, {1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5});
  const auto targets = ids_of({2, 6}, {2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6});
  auto check = [&]<class Attn>(nn::GPTConfig c) {
    CAPTURE(Attn::score_type::name);
    c.dropout = 0.25;  // the training flag and the dropout streams must reach the held module
    nn::GPT<Attn> direct(c);
    nn::GPT<Any> erased(c, &Any::make<Attn>);
    // The same parameters, in the same order, with the same values (GPT-2's scaled out_proj too).
    std::vector<std::string> names_direct, names_erased;
    std::vector<Tensor<double>> values;
    direct.for_each_parameter([&](const std::string& n, attn::Parameter<double>& p) {
      names_direct.push_back(n);
      values.push_back(p.value);
    });
    std::size_t at = 0;
    erased.for_each_parameter([&](const std::string& n, attn::Parameter<double>& p) {
      names_erased.push_back(n);
      REQUIRE(at < values.size());
      CHECK(identical(p.value, values[at++]));
    });
    CHECK(names_erased == names_direct);
    // Training (dropout on, both reseeded alike): the same loss and gradients, bit for bit.
    direct.reseed(11);
    erased.reseed(11);
    Tape<double> t1, t2;
    const Var<double> l1 = direct.loss(t1, ids, targets), l2 = erased.loss(t2, ids, targets);
    CHECK(l1.item() == l2.item());
    t1.backward(l1);
    t2.backward(l2);
    std::vector<Tensor<double>> grads;
    direct.for_each_parameter(
        [&](const std::string&, attn::Parameter<double>& p) { grads.push_back(p.grad); });
    at = 0;
    erased.for_each_parameter([&](const std::string&, attn::Parameter<double>& p) {
      CHECK(identical(p.grad, grads[at++]));
    });
    // Evaluation: dropout off in the held module too, and decoding with the cache.
    direct.set_training(false);
    erased.set_training(false);
    Tape<double> t3, t4;
    CHECK(identical(direct(t3, ids).value(), erased(t4, ids).value()));
    Tape<double> t5;
    CHECK(direct.loss(t5, ids, targets).item() != l1.item());  // dropout was on while training
    auto c1 = direct.make_caches();
    auto c2 = erased.make_caches();
    CHECK(identical(direct.decode(t3, ids, c1).value(), erased.decode(t4, ids, c2).value()));
  };
  check.operator()<CausalMha>(tiny_config());
  check.operator()<TiedMha>(tiny_config());
  check.operator()<LinearMha>(tiny_config());
  nn::GPTConfig c = tiny_config();
  c.positions = nn::PositionEncoding::none;
  check.operator()<RotaryMha>(c);
}
