// MultiHeadAttention: gradients of every parameter by finite differences, decoding with the
// key/value cache equals running the whole sequence, configuration errors.
#include <doctest/doctest.h>

#include <attn/attention/multi_head.hpp>
#include <attn/attention/reference.hpp>
#include <attn/attn.hpp>
#include <string>

#include "../module_gradients.hpp"
#include "../test_util.hpp"

using attn::index_t;
using attn::Tensor;
namespace kernel = attn::kernel;
namespace mask = attn::mask;
namespace score = attn::score;

namespace {

template <class Mha>
void check_parameter_gradients(Mha& mha, const Tensor<double>& x, const Tensor<double>& memory,
                               bool cross) {
  attn::Rng rng(12);
  const Tensor<double> r = Tensor<double>::randn(x.shape(), rng);
  attn::test::check_module_gradients(
      mha,
      [&](attn::Tape<double>& tape) {
        auto xv = tape.leaf(x);
        auto y = cross ? mha(xv, tape.leaf(memory), {}) : mha(xv);
        return attn::sum(y * tape.leaf(r));
      },
      5);
}

}  // namespace

TEST_CASE("MultiHeadAttention: every parameter's gradient by finite differences") {
  attn::Rng rng(1);
  attn::MultiHeadConfig c;
  c.d_model = 12;
  c.heads = 3;
  c.init_std = 0.3;
  const Tensor<double> x = Tensor<double>::randn({2, 7, 12}, rng),
                       memory = Tensor<double>::randn({2, 5, 12}, rng);
  attn::MultiHeadAttention<score::ScaledDot, kernel::Softmax, mask::Causal, attn::Heads<3>,
                           attn::projection::Separate, double>
      causal(c);
  check_parameter_gradients(causal, x, memory, false);
  attn::MultiHeadAttention<score::NegSqEuclidean, kernel::Softmax, mask::None,
                           attn::Heads<attn::dynamic>, attn::projection::Separate, double>
      cross(c);
  check_parameter_gradients(cross, x, memory, true);
  attn::MultiHeadAttention<score::ScaledDot, kernel::Softmax, mask::Causal, attn::Heads<3>,
                           attn::projection::Tied, double>
      tied(c);
  check_parameter_gradients(tied, x, memory, false);
  c.kv_heads = 1;
  attn::MultiHeadAttention<score::ScaledDot, kernel::EluPlusOne, mask::Causal, attn::Heads<3>,
                           attn::projection::Separate, double>
      grouped(c);
  check_parameter_gradients(grouped, x, memory, false);
}

TEST_CASE("decoding with the key/value cache equals running the full sequence") {
  attn::Rng rng(2);
  attn::MultiHeadConfig c;
  c.d_model = 16;
  c.heads = 4;
  c.kv_heads = 2;
  c.init_std = 0.3;
  const index_t T = 70;
  const Tensor<float> x = Tensor<float>::randn({2, T, 16}, rng);
  auto check = [&](auto& mha) {
    mha.training = false;
    attn::Tape<float> tape;
    attn::NoGrad<float> ng(tape);
    const Tensor<float> full = mha(tape.leaf(x), mask::Causal{}).value();
    attn::KVCache<float> cache;
    double worst = 0;
    for (index_t t = 0; t < T; ++t) {
      tape.clear();
      Tensor<float> step({2, 1, 16});
      for (index_t b = 0; b < 2; ++b)
        for (index_t d = 0; d < 16; ++d) step(b, 0, d) = x(b, t, d);
      const auto y = mha.decode(tape.leaf(step), cache, mask::Causal{});
      for (index_t b = 0; b < 2; ++b)
        for (index_t d = 0; d < 16; ++d)
          worst = std::max(worst, double(std::abs(y.value()(b, 0, d) - full(b, t, d))));
    }
    CHECK(cache.length() == T);
    CHECK(worst < 1e-5);
  };
  attn::MultiHeadAttention<score::ScaledDot, kernel::Softmax, mask::Causal> separate(c);
  check(separate);
  // The cache read in place (capacity doubling past 70 positions) by the materialised path, and
  // by the fused path with ALiBi's distances.
  attn::MultiHeadAttention<score::ScaledDot, kernel::Polynomial<2>, mask::Causal> poly(c);
  check(poly);
  attn::MultiHeadAttention<score::Alibi, kernel::Softmax, mask::Causal> alibi(c);
  check(alibi);
  c.kv_heads = 0;
  attn::MultiHeadAttention<score::ScaledDot, kernel::Softmax, mask::Causal, attn::Heads<4>,
                           attn::projection::Tied>
      tied(c);
  check(tied);
}

TEST_CASE("MultiHeadAttention: configuration and input errors") {
  attn::MultiHeadConfig c;
  c.d_model = 10;
  c.heads = 3;
  using Mha = attn::MultiHeadAttention<>;
  try {
    Mha bad(c);
    FAIL("no exception");
  } catch (const attn::value_error& e) {
    CHECK(std::string(e.what()).find("divisible") != std::string::npos);
  }
  c.heads = 0;
  CHECK_THROWS_AS(Mha{c}, attn::value_error);
  c.d_model = 12;
  c.heads = 4;
  CHECK_THROWS_AS(
      (attn::MultiHeadAttention<score::ScaledDot, kernel::Softmax, mask::None, attn::Heads<3>>(c)),
      attn::value_error);
  c.kv_heads = 3;
  CHECK_THROWS_AS(Mha{c}, attn::value_error);
  c.kv_heads = 0;
  c.dropout = 1.0;
  CHECK_THROWS_AS(Mha{c}, attn::value_error);
  c.dropout = 0.1;
  Mha ok(c);
  attn::Tape<float> tape;
  CHECK_THROWS_AS(ok(tape.leaf(Tensor<float>({2, 5, 10}))), attn::shape_error);
  CHECK(ok(tape.leaf(Tensor<float>({2, 5, 12}))).shape() == attn::Shape{2, 5, 12});
  int count = 0;
  ok.for_each_parameter([&](const std::string& name, attn::Parameter<float>&) {
    ++count;
    CHECK(name.find("_proj.") != std::string::npos);
  });
  CHECK(count == 8);
}

TEST_CASE(
    "MultiHeadAttention: an evaluation probe sees the exact heads and may replace the output") {
  attn::Rng rng(5);
  attn::MultiHeadConfig c;
  c.d_model = 12;
  c.heads = 4;
  c.kv_heads = 2;
  c.init_std = 0.4;
  attn::MultiHeadAttention<score::NegSqEuclidean, kernel::Softmax, mask::Causal> mha(c);
  mha.training = false;
  const Tensor<double> x64 = Tensor<double>::randn({2, 7, 12}, rng);
  Tensor<float> x({2, 7, 12});
  for (index_t i = 0; i < x.numel(); ++i) x[i] = float(x64[i]);

  attn::Tape<float> tape;
  const Tensor<float> plain = mha(tape.leaf(x), mask::Causal{}).value();

  int calls = 0;
  attn::AttentionStep<float> seen;
  mha.probe = [&](attn::AttentionStep<float>& s) {
    ++calls;
    seen = s;
  };
  tape.clear();
  mha(tape.leaf(x), mask::Causal{});  // gradients recorded: the probe stays silent
  CHECK(calls == 0);

  attn::NoGrad<float> no_grad(tape);
  tape.clear();
  const Tensor<float> probed = mha(tape.leaf(x), mask::Causal{}).value();
  REQUIRE(calls == 1);
  CHECK(attn::max_abs_diff(probed, plain) == 0.0);
  CHECK(seen.q.shape() == attn::Shape{2, 4, 7, 3});
  CHECK(seen.k.shape() == attn::Shape{2, 2, 7, 3});
  CHECK(seen.weights.shape() == attn::Shape{2, 4, 7, 7});
  // The weights and output it was shown are the reference formula's on the q, k, v it was shown.
  const auto ref = attn::reference_attention(seen.q, seen.k, seen.v, score::NegSqEuclidean{},
                                             kernel::Softmax{}, mask::Causal{});
  // Float against the double reference: the fused path forms the scores as 2 q·k − ‖k‖² (‖q‖²
  // cancels in softmax), which round at the scale of the scores, not of the output; the output
  // was 5e-7 to 1.1e-6 from the reference here, old and new tile kernels, by build flags.
  CHECK(attn::max_abs_diff(seen.weights, ref.weights) < 1e-6);
  CHECK(attn::max_abs_diff(seen.output, ref.out) < 4e-6);

  // Replacing the heads' output by zeros leaves only the output projection's bias.
  for (index_t i = 0; i < mha.out_proj.bias.value.numel(); ++i)
    mha.out_proj.bias.value[i] = float(i) + 0.5f;
  mha.probe = [](attn::AttentionStep<float>& s) { s.output.fill(0.0f); };
  tape.clear();
  const Tensor<float> zeroed = mha(tape.leaf(x), mask::Causal{}).value();
  for (index_t i = 0; i < zeroed.numel(); ++i) REQUIRE(zeroed[i] == float(i % 12) + 0.5f);

  mha.probe = [](attn::AttentionStep<float>& s) { s.output = Tensor<float>({1, 2, 3}); };
  tape.clear();
  const std::string message =
      attn::test::message_of<attn::shape_error>([&] { mha(tape.leaf(x), mask::Causal{}); });
  CHECK(message.find("probe changed the output shape") != std::string::npos);
}
