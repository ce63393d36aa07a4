// Learned score functions: SynthesizerAttention, BilinearAttention, AdditiveAttention
// and their ops masked_softmax and additive_scores. Each module against a plain-loop reference of
// its formula, every gradient against finite differences, decoding with the cache against the full
// forward pass, empty rows, configuration errors, and a tiny GPT built on each.
#include <doctest/doctest.h>

#include <algorithm>
#include <attn/attention/learned_scores.hpp>
#include <attn/attention/synthesizer.hpp>
#include <attn/attn.hpp>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "../module_gradients.hpp"
#include "../test_util.hpp"

using attn::index_t;
using attn::Shape;
using attn::Tape;
using attn::Tensor;
using attn::Var;
namespace mask = attn::mask;
namespace nn = attn::nn;
using Dyn = attn::Heads<attn::dynamic>;

template <class M>
using Synth = attn::SynthesizerAttention<M, Dyn, double>;
template <class M>
using Bilinear = attn::BilinearAttention<M, Dyn, double>;
template <class M>
using Additive = attn::AdditiveAttention<M, Dyn, double>;

static_assert(nn::AttentionModule<attn::SynthesizerAttention<>>);
static_assert(nn::AttentionModule<attn::BilinearAttention<>>);
static_assert(nn::AttentionModule<attn::AdditiveAttention<>>);
static_assert(nn::AttentionModule<Synth<mask::None>>);
static_assert(nn::AttentionModule<attn::BilinearAttention<mask::Causal, attn::Heads<4>, double>>);
static_assert(nn::AttentionModule<attn::AdditiveAttention<mask::Padding, Dyn, float>>);

namespace {

constexpr double ninf = -std::numeric_limits<double>::infinity();

using attn::test::check_decode;
using attn::test::check_gradients;

// ---- plain-loop references ------------------------------------------------------------------

// p.weight · row + p.bias for one input row (PyTorch's Linear), by loops.
std::vector<double> affine(const attn::ProjectionWeights<double>& p, const double* row) {
  const Tensor<double>& w = p.weight.value;
  const index_t out = w.shape()[0], in = w.shape()[1];
  std::vector<double> y(static_cast<std::size_t>(out));
  for (index_t o = 0; o < out; ++o) {
    double acc = p.has_bias ? p.bias.value[o] : 0.0;
    for (index_t k = 0; k < in; ++k) acc += w(o, k) * row[k];
    y[static_cast<std::size_t>(o)] = acc;
  }
  return y;
}

const double* row_of(const Tensor<double>& x, index_t b, index_t i) {
  return x.data() + (b * x.shape()[1] + i) * x.shape()[2];
}

// The attention formula by loops: for every (b, h, i), the scores s_j = score(b, h, i, j) of the
// allowed keys, w = softmax(s) (all 0 when no key is allowed), o_h = Σ_j w_j v_j with
// v_j = v_proj(m_j) restricted to head h, heads side by side, then out_proj.
template <class Mask, class Score>
Tensor<double> reference(const Tensor<double>& x, const Tensor<double>& m, index_t H,
                         const Mask& mask, Score&& score,
                         const attn::ProjectionWeights<double>& v_proj,
                         const attn::ProjectionWeights<double>& out_proj, Tensor<double>& weights) {
  const index_t B = x.shape()[0], Tq = x.shape()[1], D = x.shape()[2], Tk = m.shape()[1];
  const index_t Dh = D / H;
  Tensor<double> y(Shape{B, Tq, D});
  weights = Tensor<double>(Shape{B, H, Tq, Tk});
  for (index_t b = 0; b < B; ++b)
    for (index_t i = 0; i < Tq; ++i) {
      std::vector<double> merged(static_cast<std::size_t>(D), 0.0);
      for (index_t h = 0; h < H; ++h) {
        std::vector<double> s(static_cast<std::size_t>(Tk), ninf);
        double mx = ninf;
        for (index_t j = 0; j < Tk; ++j)
          if (mask.allowed(b, i, j, Tq, Tk)) {
            s[static_cast<std::size_t>(j)] = score(b, h, i, j);
            mx = std::max(mx, s[static_cast<std::size_t>(j)]);
          }
        if (mx == ninf) continue;  // no allowed key: weights and output 0
        double z = 0;
        for (index_t j = 0; j < Tk; ++j) z += std::exp(s[static_cast<std::size_t>(j)] - mx);
        for (index_t j = 0; j < Tk; ++j) {
          const double w = std::exp(s[static_cast<std::size_t>(j)] - mx) / z;
          weights(b, h, i, j) = w;
          const std::vector<double> v = affine(v_proj, row_of(m, b, j));
          for (index_t d = 0; d < Dh; ++d)
            merged[static_cast<std::size_t>(h * Dh + d)] +=
                w * v[static_cast<std::size_t>(h * Dh + d)];
        }
      }
      const std::vector<double> out = affine(out_proj, merged.data());
      for (index_t d = 0; d < D; ++d) y(b, i, d) = out[static_cast<std::size_t>(d)];
    }
  return y;
}

// Synthesizer: s = Σ_d ReLU(w1(x_i))[h·Dh + d] w2[h, d, j] + b2[j].
template <class M>
auto synthesizer_score(Synth<M>& mod, const Tensor<double>& x) {
  return [&mod, &x](index_t b, index_t h, index_t i, index_t j) {
    const index_t dh = mod.head_dim();
    const std::vector<double> a = affine(mod.w1, row_of(x, b, i));
    double s = mod.config().bias ? mod.b2.value[j] : 0.0;
    for (index_t d = 0; d < dh; ++d)
      s += std::max(0.0, a[static_cast<std::size_t>(h * dh + d)]) * mod.w2.value(h, d, j);
    return s;
  };
}

// Bilinear: s = Σ_{d,e} q_i[d] W_h[d, e] k_j[e] / √Dh.
template <class M>
auto bilinear_score(Bilinear<M>& mod, const Tensor<double>& x, const Tensor<double>& m) {
  return [&mod, &x, &m](index_t b, index_t h, index_t i, index_t j) {
    const index_t dh = mod.head_dim();
    const std::vector<double> q = affine(mod.q_proj, row_of(x, b, i));
    const std::vector<double> k = affine(mod.k_proj, row_of(m, b, j));
    double s = 0;
    for (index_t d = 0; d < dh; ++d)
      for (index_t e = 0; e < dh; ++e)
        s += q[static_cast<std::size_t>(h * dh + d)] * mod.bilinear_weight.value(h, d, e) *
             k[static_cast<std::size_t>(h * dh + e)];
    return s / std::sqrt(double(dh));
  };
}

// Additive: s = Σ_d w_h[d] tanh(a_i[d] + c_j[d]), a = q_proj(x_i), c = k_proj(m_j) per head.
template <class M>
auto additive_score(Additive<M>& mod, const Tensor<double>& x, const Tensor<double>& m) {
  return [&mod, &x, &m](index_t b, index_t h, index_t i, index_t j) {
    const index_t dh = mod.head_dim();
    const std::vector<double> a = affine(mod.q_proj, row_of(x, b, i));
    const std::vector<double> c = affine(mod.k_proj, row_of(m, b, j));
    double s = 0;
    for (index_t d = 0; d < dh; ++d)
      s += mod.score_weight.value(h, d) * std::tanh(a[static_cast<std::size_t>(h * dh + d)] +
                                                    c[static_cast<std::size_t>(h * dh + d)]);
    return s;
  };
}

// ---- helpers ----------------------------------------------------------------------------------

attn::MultiHeadConfig config(index_t d, index_t h, index_t max_length = 0, double std = 0.5) {
  attn::MultiHeadConfig c;
  c.d_model = d;
  c.heads = h;
  c.init_std = std;
  c.seed = 3;
  c.max_length = max_length;
  return c;
}

// Every parameter (biases and the identity W_h too) ~ N(0, scale²), so no term of a formula hides.
template <class Module>
void randomize(Module& mod, std::uint64_t seed, double scale = 0.5) {
  attn::Rng rng(seed);
  mod.for_each_parameter([&](const std::string&, attn::Parameter<double>& p) {
    p.value = Tensor<double>::randn(p.value.shape(), rng, 0.0, scale);
  });
}

template <class Module>
std::vector<std::string> names_of(Module& mod) {
  std::vector<std::string> names;
  mod.for_each_parameter(
      [&](const std::string& n, attn::Parameter<double>&) { names.push_back(n); });
  return names;
}

// The module's output and weights next to the reference's, compared to 1e-10.
// Cross = true: queries from x, keys and values from m; otherwise self-attention on x (m = x).
template <bool Cross = false, class Module, class Mask, class Score>
void check_reference(Module& mod, const Tensor<double>& x, const Tensor<double>& m,
                     const Mask& mask, Score&& score) {
  Tape<double> tape;
  Tensor<double> weights, ref_weights;
  Tensor<double> got;
  if constexpr (Cross)
    got = mod(tape.leaf(x), tape.leaf(m), mask, &weights).value();
  else
    got = mod(tape.leaf(x), mask, &weights).value();
  const Tensor<double> want =
      reference(x, m, mod.heads(), mask, score, mod.v_proj, mod.out_proj, ref_weights);
  CHECK(attn::max_abs_diff(got, want) < 1e-10);
  CHECK(attn::max_abs_diff(weights, ref_weights) < 1e-10);
}

}  // namespace

// ---- the ops --------------------------------------------------------------------------------

TEST_CASE("masked_softmax: values, empty rows, gradients by finite differences") {
  attn::Rng rng(1);
  const Tensor<double> s = Tensor<double>::randn({2, 2, 3, 4}, rng, 0.0, 2.0);
  const Tensor<double> r = Tensor<double>::randn({2, 2, 3, 4}, rng);
  auto check = [&](const auto& m) {
    Tape<double> tape;
    const Tensor<double> y = attn::masked_softmax(tape.leaf(s), m).value();
    for (index_t b = 0; b < 2; ++b)
      for (index_t h = 0; h < 2; ++h)
        for (index_t i = 0; i < 3; ++i) {
          double mx = ninf, z = 0;
          for (index_t j = 0; j < 4; ++j)
            if (m.allowed(b, i, j, 3, 4)) mx = std::max(mx, s(b, h, i, j));
          for (index_t j = 0; j < 4; ++j)
            if (m.allowed(b, i, j, 3, 4)) z += std::exp(s(b, h, i, j) - mx);
          for (index_t j = 0; j < 4; ++j) {
            const double want = m.allowed(b, i, j, 3, 4) ? std::exp(s(b, h, i, j) - mx) / z : 0.0;
            CHECK(y(b, h, i, j) == doctest::Approx(want).epsilon(1e-14));
          }
        }
    const attn::GradientCheck gc = attn::check_gradient(
        [&](const std::vector<Var<double>>& v) {
          return attn::sum(attn::masked_softmax(v[0], m) * v[0].tape().leaf(r));
        },
        {s});
    INFO(gc.report());
    CHECK(gc.ok);
  };
  check(mask::None{});
  check(mask::Causal{});  // Tq = 3, Tk = 4, end-aligned: row i sees keys 0 .. i + 1
  check(mask::SlidingWindow{1, 0});

  SUBCASE("a row with no allowed key is 0 and passes no gradient") {
    const mask::Padding pad(std::vector<index_t>{3, 0});  // batch entry 1: every key is padding
    Tape<double> tape;
    const Var<double> x = tape.leaf(s, true);
    const Var<double> y = attn::masked_softmax(x, pad);
    tape.backward(attn::sum(y * tape.leaf(r)));
    for (index_t k = 0; k < 24; ++k) {
      CHECK(y.value()[24 + k] == 0.0);
      CHECK(x.grad()[24 + k] == 0.0);
    }
    for (index_t k = 0; k < 48; ++k) CHECK(std::isfinite(x.grad()[k]));
    check(pad);
  }
  SUBCASE("rank 2 and bad shapes") {
    Tape<double> tape;
    const Tensor<double> m2(Shape{2, 2}, {1.0, 2.0, 3.0, 4.0});
    const Tensor<double> y = attn::masked_softmax(tape.leaf(m2), mask::CausalTopLeft{}).value();
    CHECK(y[0] == 1.0);
    CHECK(y[1] == 0.0);
    CHECK(y[2] == doctest::Approx(1.0 / (1.0 + std::exp(1.0))));
    CHECK(attn::test::message_of<attn::shape_error>([&] {
            attn::masked_softmax(tape.leaf(Tensor<double>({4})), mask::None{});
          }).find("masked_softmax: scores must be") != std::string::npos);
    CHECK(attn::test::message_of<attn::shape_error>([&] {
            attn::masked_softmax(tape.leaf(s), mask::Padding(std::vector<index_t>{1}));
          }).find("1 lengths for a batch of 2") != std::string::npos);
  }
}

TEST_CASE("additive_scores: values and gradients by finite differences") {
  attn::Rng rng(2);
  const Tensor<double> a = Tensor<double>::randn({2, 2, 3, 4}, rng);
  const Tensor<double> c = Tensor<double>::randn({2, 2, 5, 4}, rng);
  const Tensor<double> w = Tensor<double>::randn({2, 4}, rng);
  const Tensor<double> r = Tensor<double>::randn({2, 2, 3, 5}, rng);
  auto check = [&](const auto& m) {
    Tape<double> tape;
    const Tensor<double> s =
        attn::additive_scores(tape.leaf(a), tape.leaf(c), tape.leaf(w), m).value();
    CHECK(s.shape() == Shape{2, 2, 3, 5});
    for (index_t b = 0; b < 2; ++b)
      for (index_t h = 0; h < 2; ++h)
        for (index_t i = 0; i < 3; ++i)
          for (index_t j = 0; j < 5; ++j) {
            double want = 0;
            if (m.allowed(b, i, j, 3, 5))
              for (index_t d = 0; d < 4; ++d)
                want += w(h, d) * std::tanh(a(b, h, i, d) + c(b, h, j, d));
            CHECK(std::abs(s(b, h, i, j) - want) < 1e-14);
          }
    const attn::GradientCheck gc = attn::check_gradient(
        [&](const std::vector<Var<double>>& v) {
          return attn::sum(attn::additive_scores(v[0], v[1], v[2], m) * v[0].tape().leaf(r));
        },
        {a, c, w});
    INFO(gc.report());
    CHECK(gc.ok);
  };
  check(attn::detail::AllPairs{});
  check(mask::Causal{});
  Tape<double> tape;
  CHECK(attn::test::message_of<attn::shape_error>([&] {
          attn::additive_scores(tape.leaf(a), tape.leaf(c), tape.leaf(Tensor<double>({2, 3})));
        }).find("additive_scores: shapes do not fit together") != std::string::npos);
}

// ---- the modules against their formulas ------------------------------------------------------

TEST_CASE("each module equals a plain-loop reference of its formula") {
  attn::Rng rng(4);
  const Tensor<double> x = Tensor<double>::randn({2, 5, 6}, rng);
  const Tensor<double> m = Tensor<double>::randn({2, 4, 6}, rng);
  const mask::Padding pad(std::vector<index_t>{3, 5});
  SUBCASE("SynthesizerAttention") {
    Synth<mask::Causal> causal(config(6, 2, 7));
    randomize(causal, 10);
    check_reference(causal, x, x, mask::Causal{}, synthesizer_score(causal, x));
    Synth<mask::None> none(config(6, 3, 5));
    randomize(none, 11);
    check_reference(none, x, x, mask::None{}, synthesizer_score(none, x));
    Synth<mask::Padding> padded(config(6, 2, 9));
    randomize(padded, 12);
    check_reference(padded, x, x, pad, synthesizer_score(padded, x));
    attn::MultiHeadConfig c = config(6, 2, 5);
    c.bias = false;
    Synth<mask::Causal> plain(c);
    randomize(plain, 13);
    check_reference(plain, x, x, mask::Causal{}, synthesizer_score(plain, x));
  }
  SUBCASE("BilinearAttention") {
    Bilinear<mask::Causal> causal(config(6, 2));
    randomize(causal, 20);
    check_reference(causal, x, x, mask::Causal{}, bilinear_score(causal, x, x));
    Bilinear<mask::None> cross(config(6, 3));
    randomize(cross, 21);
    check_reference<true>(cross, x, m, mask::None{}, bilinear_score(cross, x, m));
    Bilinear<mask::Padding> padded(config(6, 2));
    randomize(padded, 22);
    check_reference(padded, x, x, pad, bilinear_score(padded, x, x));
  }
  SUBCASE("AdditiveAttention") {
    Additive<mask::Causal> causal(config(6, 2));
    randomize(causal, 30);
    check_reference(causal, x, x, mask::Causal{}, additive_score(causal, x, x));
    Additive<mask::None> cross(config(6, 3));
    randomize(cross, 31);
    check_reference<true>(cross, x, m, mask::None{}, additive_score(cross, x, m));
    Additive<mask::Padding> padded(config(6, 2));
    randomize(padded, 32);
    check_reference(padded, x, x, pad, additive_score(padded, x, x));
  }
}

TEST_CASE("BilinearAttention with W_h = I (its initialisation) is scaled-dot MultiHeadAttention") {
  attn::Rng rng(5);
  const Tensor<double> x = Tensor<double>::randn({2, 7, 8}, rng);
  const attn::MultiHeadConfig c = config(8, 2);
  Bilinear<mask::Causal> bilinear(c);
  attn::MultiHeadAttention<attn::score::ScaledDot, attn::kernel::Softmax, mask::Causal, Dyn,
                           attn::projection::Separate, double>
      mha(c);
  Tape<double> tape;
  CHECK(attn::max_abs_diff(bilinear(tape.leaf(x)).value(), mha(tape.leaf(x)).value()) < 1e-12);
}

// ---- gradients ------------------------------------------------------------------------------

TEST_CASE("every parameter's gradient (and the input's) by finite differences") {
  attn::Rng rng(6);
  const Tensor<double> x = Tensor<double>::randn({2, 4, 4}, rng);
  const Tensor<double> m = Tensor<double>::randn({2, 3, 4}, rng);
  SUBCASE("SynthesizerAttention") {
    // max_length 5 > T = 4: the unused column of w2 and b2 must get gradient 0.
    Synth<mask::Causal> causal(config(4, 2, 5));
    randomize(causal, 40);
    check_gradients(causal, x, [&](const Var<double>& v) { return causal(v); });
    Synth<mask::None> none(config(4, 1, 4));
    randomize(none, 41);
    check_gradients(none, x, [&](const Var<double>& v) { return none(v); });
  }
  SUBCASE("BilinearAttention") {
    Bilinear<mask::Causal> causal(config(4, 2));
    randomize(causal, 42);
    check_gradients(causal, x, [&](const Var<double>& v) { return causal(v); });
    Bilinear<mask::None> cross(config(4, 2));
    randomize(cross, 43);
    check_gradients(cross, x,
                    [&](const Var<double>& v) { return cross(v, v.tape().leaf(m), mask::None{}); });
  }
  SUBCASE("AdditiveAttention") {
    Additive<mask::Causal> causal(config(4, 2));
    randomize(causal, 44);
    check_gradients(causal, x, [&](const Var<double>& v) { return causal(v); });
    Additive<mask::None> cross(config(4, 2));
    randomize(cross, 45);
    check_gradients(cross, x,
                    [&](const Var<double>& v) { return cross(v, v.tape().leaf(m), mask::None{}); });
  }
}

TEST_CASE("a query with no allowed key gives output 0 and gradient 0, never NaN") {
  attn::Rng rng(7);
  const Tensor<double> x = Tensor<double>::randn({2, 3, 4}, rng);
  const mask::Padding pad(std::vector<index_t>{3, 0});  // batch entry 1 sees no key at all
  attn::MultiHeadConfig c = config(4, 2, 3);
  c.bias = false;  // so that "attention output 0" is "module output 0"
  auto check = [&](auto& mod) {
    Tape<double> tape;
    const Var<double> xv = tape.leaf(x, true);
    Tensor<double> weights;
    const Var<double> y = mod(xv, pad, &weights);
    tape.backward(attn::sum(y * y + y));
    for (index_t k = 12; k < 24; ++k) {
      CHECK(y.value()[k] == 0.0);
      CHECK(xv.grad()[k] == 0.0);
    }
    for (index_t k = 18; k < 36; ++k) CHECK(weights[k] == 0.0);
    for (index_t k = 0; k < 24; ++k) CHECK(std::isfinite(xv.grad()[k]));
    mod.for_each_parameter([&](const std::string& name, attn::Parameter<double>& p) {
      INFO(name);
      for (const double g : p.grad) CHECK(std::isfinite(g));
    });
  };
  Synth<mask::Padding> synth(c);
  check(synth);
  Bilinear<mask::Padding> bilinear(c);
  check(bilinear);
  Additive<mask::Padding> additive(c);
  check(additive);
}

// ---- decoding -------------------------------------------------------------------------------

TEST_CASE("decoding with the cache equals the last rows of the full forward pass") {
  attn::Rng rng(8);
  const Tensor<double> x = Tensor<double>::randn({2, 6, 6}, rng);
  SUBCASE("SynthesizerAttention: no keys, cache.k is [B, H, L, 0]") {
    Synth<mask::Causal> synth(config(6, 3, 8));
    randomize(synth, 50);
    check_decode(synth, x);
    attn::KVCache<double> cache;
    Tape<double> tape;
    synth.decode(tape.leaf(x), cache);
    CHECK(cache.k.shape() == Shape{2, 3, 6, 0});
    CHECK(cache.v.shape() == Shape{2, 3, 6, 2});
    CHECK(cache.length() == 6);
    CHECK(attn::test::message_of<attn::shape_error>([&] {
            synth.decode(tape.leaf(Tensor<double>(Shape{2, 3, 6})), cache);
          }).find("positions 6..8 exceed config.max_length = 8") != std::string::npos);
  }
  SUBCASE("BilinearAttention") {
    Bilinear<mask::Causal> bilinear(config(6, 2));
    randomize(bilinear, 51);
    check_decode(bilinear, x);
  }
  SUBCASE("AdditiveAttention") {
    Additive<mask::Causal> additive(config(6, 2));
    randomize(additive, 52);
    check_decode(additive, x);
  }
}

// ---- configuration ----------------------------------------------------------------------------

TEST_CASE("configuration and input errors name the problem") {
  using attn::test::message_of;
  attn::MultiHeadConfig c = config(6, 2, 0);
  CHECK(message_of<attn::value_error>([&] {
          Synth<mask::Causal> s(c);
        }).find("config.max_length must be positive") != std::string::npos);
  c.max_length = 4;
  Synth<mask::Causal> synth(c);
  Tape<double> tape;
  CHECK(message_of<attn::shape_error>([&] {
          synth(tape.leaf(Tensor<double>(Shape{1, 5, 6})));
        }).find("has 5 positions, more than config.max_length = 4") != std::string::npos);
  CHECK(message_of<attn::shape_error>([&] {
          synth(tape.leaf(Tensor<double>(Shape{1, 3, 5})));
        }).find("x must be [B, T, 6]") != std::string::npos);
  c.d_model = 7;
  CHECK(message_of<attn::value_error>([&] {
          Synth<mask::Causal> s(c);
        }).find("d_model 7 must be divisible by the head count 2") != std::string::npos);
  CHECK(message_of<attn::value_error>([&] {
          Bilinear<mask::None> s(c);
        }).find("BilinearAttention: d_model 7 must be divisible") != std::string::npos);
  CHECK(message_of<attn::value_error>([&] {
          Additive<mask::None> s(c);
        }).find("AdditiveAttention: d_model 7 must be divisible") != std::string::npos);
  c = config(6, 2, 4);
  CHECK(message_of<attn::value_error>([&] {
          attn::SynthesizerAttention<mask::Causal, attn::Heads<3>, double> s(c);
        }).find("the type fixes 3 heads") != std::string::npos);
  c.heads = 0;
  attn::SynthesizerAttention<mask::Causal, attn::Heads<3>, double> fixed(c);  // heads from the type
  CHECK(fixed.heads() == 3);
  CHECK(fixed.w2.shape() == Shape{3, 2, 4});
  CHECK(message_of<attn::value_error>([&] {
          Bilinear<mask::None> s(c);
        }).find("head count must be positive") != std::string::npos);
  c.heads = 2;
  c.kv_heads = 1;
  CHECK(message_of<attn::value_error>([&] {
          Additive<mask::None> s(c);
        }).find("grouped key/value heads are not supported") != std::string::npos);
  c.kv_heads = 0;
  c.dropout = 1.0;
  CHECK(message_of<attn::value_error>([&] {
          Bilinear<mask::None> s(c);
        }).find("dropout 1 outside [0, 1)") != std::string::npos);
  c.dropout = 0;
  Bilinear<mask::None> bilinear(c);
  CHECK(message_of<attn::shape_error>([&] {
          bilinear(tape.leaf(Tensor<double>(Shape{2, 3, 6})),
                   tape.leaf(Tensor<double>(Shape{1, 3, 6})), mask::None{});
        }).find("differ in batch size") != std::string::npos);
  // A cache from another module does not fit.
  attn::KVCache<double> cache;
  bilinear.decode(tape.leaf(Tensor<double>(Shape{2, 1, 6})), cache);
  CHECK(message_of<attn::shape_error>([&] {
          synth.decode(tape.leaf(Tensor<double>(Shape{2, 1, 6})), cache);
        }).find("does not fit the new positions") != std::string::npos);
}

TEST_CASE("parameter names, shapes and dropout") {
  const attn::MultiHeadConfig c = config(6, 2, 5);
  Synth<mask::Causal> synth(c);
  CHECK(names_of(synth) == std::vector<std::string>{"w1.weight", "w1.bias", "w2", "b2",
                                                    "v_proj.weight", "v_proj.bias",
                                                    "out_proj.weight", "out_proj.bias"});
  CHECK(synth.w1.weight.shape() == Shape{6, 6});
  CHECK(synth.w2.shape() == Shape{2, 3, 5});
  CHECK(synth.b2.shape() == Shape{5});
  attn::MultiHeadConfig nb = c;
  nb.bias = false;
  Synth<mask::Causal> synth_nb(nb);
  CHECK(names_of(synth_nb) ==
        std::vector<std::string>{"w1.weight", "w2", "v_proj.weight", "out_proj.weight"});
  Bilinear<mask::None> bilinear(c);
  CHECK(names_of(bilinear) ==
        std::vector<std::string>{"q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias",
                                 "bilinear_weight", "v_proj.weight", "v_proj.bias",
                                 "out_proj.weight", "out_proj.bias"});
  CHECK(bilinear.bilinear_weight.shape() == Shape{2, 3, 3});
  Additive<mask::None> additive(c);
  CHECK(names_of(additive) == std::vector<std::string>{"q_proj.weight", "q_proj.bias",
                                                       "k_proj.weight", "score_weight",
                                                       "v_proj.weight", "v_proj.bias",
                                                       "out_proj.weight", "out_proj.bias"});
  CHECK(additive.score_weight.shape() == Shape{2, 3});

  // Dropout on the weights: only while training, reproducible after reseed.
  attn::MultiHeadConfig dc = c;
  dc.dropout = 0.5;
  attn::Rng rng(9);
  const Tensor<double> x = Tensor<double>::randn({1, 5, 6}, rng);
  auto run = [&](auto& mod) {
    Tape<double> tape;
    return mod(tape.leaf(x)).value();
  };
  auto check = [&](auto& mod) {
    mod.reseed(1);
    const Tensor<double> a = run(mod);
    mod.reseed(1);
    CHECK(attn::max_abs_diff(a, run(mod)) == 0.0);
    mod.training = false;
    const Tensor<double> e = run(mod);
    CHECK(attn::max_abs_diff(a, e) > 1e-6);
    CHECK(attn::max_abs_diff(e, run(mod)) == 0.0);
  };
  Synth<mask::Causal> synth_d(dc);
  check(synth_d);
  Bilinear<mask::Causal> bilinear_d(dc);
  check(bilinear_d);
  Additive<mask::Causal> additive_d(dc);
  check(additive_d);
}

// ---- inside a GPT -----------------------------------------------------------------------------

namespace {

nn::GPTConfig tiny_gpt() {
  nn::GPTConfig c;
  c.vocab_size = 7;
  c.block_size = 6;
  c.layers = 2;
  c.heads = 2;
  c.d_model = 8;
  c.init_std = 0.3;
  c.seed = 5;
  return c;
}

Tensor<std::int32_t> ids_of(const Shape& s, std::vector<std::int32_t> v) {
  return Tensor<std::int32_t>(s, std::span<const std::int32_t>(v));
}

template <class Gpt>
void check_gpt_decode(Gpt& gpt) {
  const auto ids = ids_of({2, 6}, {1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5});
  gpt.set_training(false);
  Tape<double> tape;
  const Tensor<double> full = gpt(tape, ids).value();  // [2, 6, 7]
  auto caches = gpt.make_caches();
  index_t done = 0;
  double worst = 0;
  for (const index_t chunk : {3, 1, 2}) {
    Tensor<std::int32_t> part(Shape{2, chunk});
    for (index_t b = 0; b < 2; ++b)
      for (index_t i = 0; i < chunk; ++i) part[b * chunk + i] = ids[b * 6 + done + i];
    const Tensor<double> got = gpt.decode(tape, part, caches).value();
    for (index_t b = 0; b < 2; ++b)
      for (index_t i = 0; i < chunk; ++i)
        for (index_t v = 0; v < 7; ++v)
          worst = std::max(
              worst, std::abs(got[(b * chunk + i) * 7 + v] - full[(b * 6 + done + i) * 7 + v]));
    done += chunk;
  }
  CHECK(worst < 1e-12);
  CHECK(caches[0].length() == 6);
}

}  // namespace

TEST_CASE("nn::GPT<SynthesizerAttention>: the full backward against finite differences") {
  nn::GPT<Synth<mask::Causal>> gpt(tiny_gpt());
  const auto ids = ids_of({2, 5}, {1, 2, 3, 4, 5, 6, 0, 1, 2, 3});
  const auto targets = ids_of({2, 5}, {2, 3, 4, 5, 6, 0, 1, 2, 3, -100});
  attn::test::check_module_gradients(
      gpt, [&](Tape<double>& tape) { return gpt.loss(tape, ids, targets); }, 5);
  std::vector<std::string> names = names_of(gpt);
  CHECK(std::find(names.begin(), names.end(), "blocks.1.attn.w2") != names.end());
  CHECK(std::find(names.begin(), names.end(), "blocks.0.attn.out_proj.weight") != names.end());
}

TEST_CASE("nn::GPT with each learned score: decoding equals the full forward pass") {
  nn::GPT<Synth<mask::Causal>> synth(tiny_gpt());
  check_gpt_decode(synth);
  nn::GPT<Bilinear<mask::Causal>> bilinear(tiny_gpt());
  check_gpt_decode(bilinear);
  nn::GPT<Additive<mask::Causal>> additive(tiny_gpt());
  check_gpt_decode(additive);
}
