// Attention: thread-count independence, dropout on the weights, and input errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <attn/attn.hpp>
#include <cmath>
#include <string>
#include <tuple>

using attn::Tensor;
namespace kernel = attn::kernel;
namespace mask = attn::mask;
namespace score = attn::score;

TEST_CASE("attention results and gradients do not depend on the thread count") {
  attn::Rng rng(8);
  const Tensor<float> q = Tensor<float>::randn({1, 2, 200, 16}, rng),
                      k = Tensor<float>::randn({1, 2, 200, 16}, rng),
                      v = Tensor<float>::randn({1, 2, 200, 16}, rng);
  auto run = [&](int threads) {
    attn::set_num_threads(threads);
    attn::Tape<float> tape;
    auto qv = tape.leaf(q, true), kv = tape.leaf(k, true), vv = tape.leaf(v, true);
    attn::Attention<score::ScaledDot, kernel::Softmax, mask::Causal> op;
    op.dropout = {0.1, 3};
    auto o = op(qv, kv, vv);
    tape.backward(attn::sum(o * o));
    return std::tuple{Tensor<float>(o.value()), Tensor<float>(qv.grad()), Tensor<float>(kv.grad())};
  };
  const int saved = attn::num_threads();
  const auto [o1, q1, k1] = run(1);
  const auto [o2, q2, k2] = run(2);
  attn::set_num_threads(saved);
  CHECK(attn::max_abs_diff(o1, o2) == 0.0);
  CHECK(attn::max_abs_diff(q1, q2) == 0.0);
  CHECK(attn::max_abs_diff(k1, k2) == 0.0);
}

TEST_CASE(
    "dropout on the weights: fused and materialised paths agree, gradients by finite differences") {
  attn::Rng rng(9);
  const Tensor<double> q = Tensor<double>::randn({1, 2, 70, 3}, rng),
                       k = Tensor<double>::randn({1, 2, 70, 3}, rng),
                       v = Tensor<double>::randn({1, 2, 70, 4}, rng),
                       r = Tensor<double>::randn({1, 2, 70, 4}, rng);
  attn::Attention<score::ScaledDot, kernel::Softmax, mask::Causal> fused;
  fused.dropout = {0.3, 11};
  auto slow = [&](const auto&... in) { return fused.materialized(in...); };
  attn::Tape<double> tape;
  auto a = fused(tape.leaf(q), tape.leaf(k), tape.leaf(v));
  auto b = slow(tape.leaf(q), tape.leaf(k), tape.leaf(v));
  fused.dropout.p = 0;
  auto c = fused(tape.leaf(q), tape.leaf(k), tape.leaf(v));
  CHECK(attn::max_abs_diff(a.value(), b.value()) < 1e-12);
  CHECK(attn::max_abs_diff(a.value(), c.value()) > 0.1);  // dropout did something
  fused.dropout.p = 0.3;
  auto check = [&](const auto& op) {
    auto f = [&](const std::vector<attn::Var<double>>& x) {
      return attn::sum(op(x[0], x[1], x[2]) * x[0].tape().leaf(r));
    };
    const attn::GradientCheck g = attn::check_gradient(f, {q, k, v}, 1e-6, 1e-5);
    CHECK_MESSAGE(g.ok, g.report());
  };
  check(fused);
  check(slow);
}

TEST_CASE(
    "dropout on the weights keeps weight (b, h, i, j) iff hash_uniform(seed, position) >= p") {
  // The reference: the undropped weights from the same operator, the mask written out with
  // hash_uniform at position ((b·H + h)·Tq + i)·Tk + j, and O = (W ∘ M / (1 − p)) V by loops.
  attn::Rng rng(10);
  constexpr attn::index_t B = 2, H = 2, T = 37, D = 3, Dv = 2;
  const Tensor<double> q = Tensor<double>::randn({B, H, T, D}, rng),
                       k = Tensor<double>::randn({B, H, T, D}, rng),
                       v = Tensor<double>::randn({B, H, T, Dv}, rng);
  attn::Attention<score::ScaledDot, kernel::Softmax, mask::Causal> op;
  attn::Tape<double> tape;
  Tensor<double> w;
  (void)op(tape.leaf(q), tape.leaf(k), tape.leaf(v), &w);
  const double p = 0.4;
  const std::uint64_t seed = 21;
  op.dropout = {p, seed};
  const auto fused = op(tape.leaf(q), tape.leaf(k), tape.leaf(v));
  const auto plain = op.materialized(tape.leaf(q), tape.leaf(k), tape.leaf(v));
  double worst = 0;
  int dropped = 0;
  for (attn::index_t b = 0; b < B; ++b)
    for (attn::index_t h = 0; h < H; ++h)
      for (attn::index_t i = 0; i < T; ++i)
        for (attn::index_t d = 0; d < Dv; ++d) {
          double o = 0;
          for (attn::index_t j = 0; j < T; ++j) {
            const auto pos = static_cast<std::uint64_t>(((b * H + h) * T + i) * T + j);
            const bool kept = attn::hash_uniform(seed, pos) >= p;
            dropped += !kept && d == 0;
            if (kept) o += w(b, h, i, j) / (1 - p) * v(b, h, j, d);
          }
          worst = std::max({worst, std::abs(fused.value()(b, h, i, d) - o),
                            std::abs(plain.value()(b, h, i, d) - o)});
        }
  CHECK(worst < 1e-12);
  CHECK(dropped > 0.3 * B * H * T * T);  // about p of them
  op.dropout.p = 1.5;
  CHECK_THROWS_AS(op(tape.leaf(q), tape.leaf(k), tape.leaf(v)), attn::value_error);
  op.dropout.p = -0.1;
  CHECK_THROWS_AS(op(tape.leaf(q), tape.leaf(k), tape.leaf(v)), attn::value_error);
}

TEST_CASE("attention rejects mismatched shapes and unusable masks, naming them") {
  attn::Tape<float> tape;
  auto q = tape.leaf(Tensor<float>({1, 2, 4, 8}));
  auto k = tape.leaf(Tensor<float>({1, 2, 5, 8}));
  auto v = tape.leaf(Tensor<float>({1, 2, 5, 3}));
  auto bad_k = tape.leaf(Tensor<float>({1, 2, 5, 7}));
  auto three_heads = tape.leaf(Tensor<float>({1, 3, 5, 8}));
  attn::Attention<> op;
  CHECK_NOTHROW(op(q, k, v));
  try {
    op(q, bad_k, v);
    FAIL("no exception");
  } catch (const attn::shape_error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("[1, 2, 4, 8]") != std::string::npos);
    CHECK(msg.find("[1, 2, 5, 7]") != std::string::npos);
  }
  CHECK_THROWS_AS(op(q, three_heads, three_heads), attn::shape_error);
  CHECK_THROWS_AS(op(tape.leaf(Tensor<float>({2, 4, 8})), k, v), attn::shape_error);
  attn::Attention<score::ScaledDot, kernel::Softmax, mask::Padding> padded{
      {}, {}, mask::Padding({9})};
  CHECK_THROWS_AS(padded(q, k, v), attn::value_error);
  attn::Attention<score::ScaledDot, kernel::Softmax, mask::Padding> wrong_batch{
      {}, {}, mask::Padding({1, 2})};
  CHECK_THROWS_AS(wrong_batch(q, k, v), attn::shape_error);
  attn::Attention<score::ScaledDot, kernel::Softmax, mask::Custom> custom{
      {}, {}, mask::Custom(Tensor<std::uint8_t>({4, 4}))};
  CHECK_THROWS_AS(custom(q, k, v), attn::shape_error);
}
