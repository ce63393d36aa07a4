// Forward values of the primitive operations against plain loops, numerical stability at
// extreme inputs, and the errors bad input gets.
#include <doctest/doctest.h>

#include <attn/attn.hpp>
#include <cmath>
#include <limits>
#include <string>

#include "../test_util.hpp"

using attn::test::message_of;

using attn::index_t;
using attn::Shape;
using attn::Tensor;

namespace {

// C[b] = op(A[b]) op(B[b]) by the definition, in double.
Tensor<double> naive_matmul(const Tensor<double>& a, const Tensor<double>& b, bool ta, bool tb,
                            index_t batch, index_t m, index_t n, index_t k, bool shared_a,
                            bool shared_b) {
  Tensor<double> c({batch, m, n});
  for (index_t z = 0; z < batch; ++z)
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) {
        double s = 0;
        for (index_t p = 0; p < k; ++p) {
          const double av = a[(shared_a ? 0 : z * m * k) + (ta ? p * m + i : i * k + p)];
          const double bv = b[(shared_b ? 0 : z * k * n) + (tb ? j * k + p : p * n + j)];
          s += av * bv;
        }
        c(z, i, j) = s;
      }
  return c;
}

}  // namespace

TEST_CASE("matmul equals the definition for every layout") {
  attn::Rng rng(11);
  attn::Tape<double> tape;
  const index_t B = 3, m = 70, n = 33, k = 129;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const Tensor<double> a3 = Tensor<double>::randn(ta ? Shape{B, k, m} : Shape{B, m, k}, rng);
      const Tensor<double> b3 = Tensor<double>::randn(tb ? Shape{B, n, k} : Shape{B, k, n}, rng);
      const Tensor<double> a2 = Tensor<double>::randn(ta ? Shape{k, m} : Shape{m, k}, rng);
      const Tensor<double> b2 = Tensor<double>::randn(tb ? Shape{n, k} : Shape{k, n}, rng);
      auto batched = attn::matmul(tape.leaf(a3), tape.leaf(b3), ta, tb);
      CHECK(attn::max_abs_diff(batched.value(),
                               naive_matmul(a3, b3, ta, tb, B, m, n, k, false, false)) < 1e-10);
      auto shared_b = attn::matmul(tape.leaf(a3), tape.leaf(b2), ta, tb);
      CHECK(attn::max_abs_diff(shared_b.value(),
                               naive_matmul(a3, b2, ta, tb, B, m, n, k, false, true)) < 1e-10);
      auto shared_a = attn::matmul(tape.leaf(a2), tape.leaf(b3), ta, tb);
      CHECK(attn::max_abs_diff(shared_a.value(),
                               naive_matmul(a2, b3, ta, tb, B, m, n, k, true, false)) < 1e-10);
      auto plain = attn::matmul(tape.leaf(a2), tape.leaf(b2), ta, tb);
      CHECK(attn::max_abs_diff(plain.value().reshaped({1, m, n}),
                               naive_matmul(a2, b2, ta, tb, 1, m, n, k, true, true)) < 1e-10);
    }
}

TEST_CASE("matmul shape errors name the operation and both shapes") {
  attn::Tape<float> tape;
  auto a = tape.leaf(Tensor<float>({4, 3}));
  auto b = tape.leaf(Tensor<float>({5, 2}));
  const std::string msg = message_of([&] { attn::matmul(a, b); });
  CHECK(msg.find("matmul: inner dimensions differ") != std::string::npos);
  CHECK(msg.find("[4, 3]") != std::string::npos);
  CHECK(msg.find("[5, 2]") != std::string::npos);
  CHECK_THROWS_AS(attn::matmul(a, b), attn::shape_error);
  CHECK_THROWS_AS(
      attn::matmul(tape.leaf(Tensor<float>({2, 4, 3})), tape.leaf(Tensor<float>({3, 3, 2}))),
      attn::shape_error);
  CHECK_THROWS_AS(attn::matmul(tape.leaf(Tensor<float>({3})), tape.leaf(Tensor<float>({3, 2}))),
                  attn::shape_error);
}

TEST_CASE("softmax, log_softmax and cross_entropy stay finite and exact for logits of ±1e4") {
  attn::Tape<float> tape;
  // Rows: huge positive, huge negative, a huge spread, and ordinary values.
  const Tensor<float> x({4, 3}, {1e4f, 1e4f - 1, 1e4f - 2, -1e4f, -1e4f - 1, -1e4f - 2, 1e4f, 0,
                                 -1e4f, 0.5f, -0.5f, 0});
  auto xv = tape.leaf(x, true);
  auto p = attn::softmax(xv);
  auto lp = attn::log_softmax(xv);
  // Rows 0, 1 and 3 are shifts of (0, -1, -2) or (0.5, -0.5, 0): compare with the small-number
  // formula.
  const double e0 = 1 + std::exp(-1.0) + std::exp(-2.0);
  for (int r : {0, 1}) {
    CHECK(p.value()(r, 0) == doctest::Approx(1 / e0));
    CHECK(p.value()(r, 2) == doctest::Approx(std::exp(-2.0) / e0));
    CHECK(lp.value()(r, 1) == doctest::Approx(-1 - std::log(e0)));
  }
  CHECK(p.value()(2, 0) == 1.0f);
  CHECK(p.value()(2, 2) == 0.0f);
  CHECK(lp.value()(2, 2) == doctest::Approx(-2e4f));
  Tensor<std::int32_t> t({4}, {2, 0, 2, 1});
  auto loss = attn::cross_entropy(xv, t);
  const double expected = ((2 + std::log(e0)) + std::log(e0) + 2e4 +
                           (1 + std::log(std::exp(0.5) + std::exp(-0.5) + 1) - 0.5)) /
                          4;
  CHECK(loss.item() == doctest::Approx(expected).epsilon(1e-5));
  tape.backward(loss);
  for (const float g : xv.grad()) CHECK(std::isfinite(g));
  // Row 2's target has probability e^-2e4: its gradient is (p − onehot)/4 = (1, 0, -1)/4.
  CHECK(xv.grad()(2, 0) == doctest::Approx(0.25f));
  CHECK(xv.grad()(2, 2) == doctest::Approx(-0.25f));
}

TEST_CASE("softmax of a fully masked row is zero, not NaN") {
  attn::Tape<double> tape;
  const double inf = std::numeric_limits<double>::infinity();
  auto x = tape.leaf(Tensor<double>({2, 3}, {-inf, -inf, -inf, 0, -inf, 0}), true);
  auto p = attn::softmax(x);
  CHECK(p.value()(0, 0) == 0.0);
  CHECK(p.value()(1, 0) == 0.5);
  CHECK(p.value()(1, 1) == 0.0);
  tape.backward(attn::sum(p * p));
  for (const double g : x.grad()) CHECK(std::isfinite(g));
}

TEST_CASE("cross_entropy ignores targets, and gives 0 when every target is ignored") {
  attn::Tape<double> tape;
  auto x = tape.leaf(Tensor<double>({2, 2}, {1, 2, 3, 4}), true);
  auto loss = attn::cross_entropy(x, Tensor<std::int32_t>({2}, {1, -100}));
  CHECK(loss.item() == doctest::Approx(std::log(std::exp(1.0) + std::exp(2.0)) - 2));
  auto none = attn::cross_entropy(x, Tensor<std::int32_t>({2}, {-1, -1}), -1);
  CHECK(none.item() == 0.0);
  tape.backward(none);
  CHECK(attn::max_abs_diff(x.grad(), Tensor<double>({2, 2})) == 0.0);
  CHECK_THROWS_AS(attn::cross_entropy(x, Tensor<std::int32_t>({2}, {0, 2})), attn::value_error);
  CHECK_THROWS_AS(attn::cross_entropy(x, Tensor<std::int32_t>({3}, {0, 1, 1})), attn::shape_error);
}

TEST_CASE("layer_norm normalises each row") {
  attn::Rng rng(5);
  attn::Tape<double> tape;
  auto x = tape.leaf(Tensor<double>::randn({7, 33}, rng, 3.0, 5.0));
  auto y = attn::layer_norm(x, tape.leaf(Tensor<double>::ones({33})),
                            tape.leaf(Tensor<double>::zeros({33})), 0.0);
  for (index_t r = 0; r < 7; ++r) {
    double mu = 0, var = 0;
    for (index_t j = 0; j < 33; ++j) mu += y.value()(r, j) / 33;
    for (index_t j = 0; j < 33; ++j) var += (y.value()(r, j) - mu) * (y.value()(r, j) - mu) / 33;
    CHECK(mu == doctest::Approx(0).epsilon(1e-12).scale(1));
    CHECK(var == doctest::Approx(1.0));
  }
  CHECK_THROWS_AS(
      attn::layer_norm(x, tape.leaf(Tensor<double>({32})), tape.leaf(Tensor<double>({33}))),
      attn::shape_error);
}

TEST_CASE("rms_norm divides each row by its root mean square, then scales it") {
  attn::Rng rng(6);
  attn::Tape<double> tape;
  const Tensor<double> xv = Tensor<double>::randn({5, 17}, rng, 1.0, 3.0);
  const Tensor<double> gv = Tensor<double>::randn({17}, rng);
  const double eps = 0.25;
  auto y = attn::rms_norm(tape.leaf(xv), tape.leaf(gv), eps);
  for (index_t r = 0; r < 5; ++r) {
    double ms = 0;  // the formula, summed plainly
    for (index_t j = 0; j < 17; ++j) ms += xv(r, j) * xv(r, j);
    const double rms = std::sqrt(ms / 17 + eps);
    for (index_t j = 0; j < 17; ++j)
      CHECK(y.value()(r, j) == doctest::Approx(gv[j] * xv(r, j) / rms).epsilon(1e-14));
  }
  // eps = 0, γ = 1: every row's mean square is 1.
  auto unit = attn::rms_norm(tape.leaf(xv), tape.leaf(Tensor<double>::ones({17})), 0.0);
  for (index_t r = 0; r < 5; ++r) {
    double ms = 0;
    for (index_t j = 0; j < 17; ++j) ms += unit.value()(r, j) * unit.value()(r, j) / 17;
    CHECK(ms == doctest::Approx(1.0).epsilon(1e-14));
  }
  CHECK(attn::test::message_of([&] {
          (void)attn::rms_norm(tape.leaf(xv), tape.leaf(Tensor<double>({16})));
        }).find("rms_norm: gamma [16] must have the last dimension of x [5, 17]") == 0);
  CHECK_THROWS_AS(attn::rms_norm(tape.leaf(xv), tape.leaf(gv), -1.0), attn::value_error);
}

TEST_CASE("embedding picks rows and rejects ids outside the table") {
  attn::Tape<float> tape;
  auto w = tape.leaf(Tensor<float>({3, 2}, {0, 1, 10, 11, 20, 21}));
  auto y = attn::embedding(w, Tensor<std::int32_t>({2, 2}, {2, 0, 1, 2}));
  CHECK(y.shape() == Shape{2, 2, 2});
  CHECK(y.value()(0, 0, 1) == 21);
  CHECK(y.value()(1, 0, 0) == 10);
  const std::string msg = message_of([&] {
    attn::embedding(w, Tensor<std::int32_t>({2}, {1, 3}));
  });
  CHECK(msg.find("embedding: id 3") != std::string::npos);
  CHECK_THROWS_AS(attn::embedding(w, Tensor<std::int32_t>({1}, {-1})), attn::value_error);
}

TEST_CASE("dropout: deterministic per seed, the right fraction, scaled, identity when off") {
  attn::Tape<float> tape;
  auto x = tape.leaf(Tensor<float>::ones({1000, 100}));
  attn::Rng r1(9), r2(9);
  auto a = attn::dropout(x, 0.25, r1);
  auto b = attn::dropout(x, 0.25, r2);
  CHECK(attn::max_abs_diff(a.value(), b.value()) == 0.0);
  index_t zeros = 0;
  for (const float v : a.value()) {
    if (v == 0)
      ++zeros;
    else
      CHECK(v == doctest::Approx(1 / 0.75f));
  }
  CHECK(static_cast<double>(zeros) / 1e5 == doctest::Approx(0.25).epsilon(0.02));
  auto off = attn::dropout(x, 0.25, r1, false);
  CHECK(off.index() == x.index());
  CHECK_THROWS_AS(attn::dropout(x, 1.5, r1), attn::value_error);
  auto all = attn::dropout(x, 1.0, r1);
  CHECK(attn::max_abs_diff(all.value(), Tensor<float>({1000, 100})) == 0.0);
}

TEST_CASE("reshape, slice, concat and transpose move the right elements") {
  attn::Tape<float> tape;
  auto x = tape.leaf(Tensor<float>({2, 3}, {0, 1, 2, 3, 4, 5}));
  auto t = attn::transpose(x);
  CHECK(t.shape() == Shape{3, 2});
  CHECK(t.value()(2, 1) == 5);
  auto s = attn::slice(x, 1, 3);
  CHECK(s.value()(1, 0) == 4);
  auto c = attn::concat({s, x});
  CHECK(c.shape() == Shape{2, 5});
  CHECK(c.value()(1, 2) == 3);
  auto r = attn::reshape(x, {3, 2});
  CHECK(r.value()(2, 0) == 4);
  CHECK_THROWS_AS(attn::reshape(x, {4, 2}), attn::shape_error);
  CHECK_THROWS_AS(attn::slice(x, 2, 4), attn::value_error);
  CHECK_THROWS_AS(attn::concat({x, t}), attn::shape_error);
  auto q = tape.leaf(Tensor<float>::ones({2, 3, 4, 5}));
  CHECK(attn::transpose(q, 1, 2).shape() == Shape{2, 4, 3, 5});
  CHECK_THROWS_AS(attn::transpose(q, 1, 4), attn::value_error);
}

TEST_CASE("sum and mean") {
  attn::Tape<double> tape;
  auto x = tape.leaf(Tensor<double>({2, 3}, {1, 2, 3, 4, 5, 6}));
  CHECK(attn::sum(x).item() == 21);
  CHECK(attn::mean(x).item() == 3.5);
  auto s0 = attn::sum(x, 0);
  CHECK(s0.shape() == Shape{3});
  CHECK(s0.value()[2] == 9);
  auto m1 = attn::mean(x, -1, true);
  CHECK(m1.shape() == Shape{2, 1});
  CHECK(m1.value()[1] == 5);
}

TEST_CASE("linear equals matmul with the transposed weight plus the bias, and checks shapes") {
  attn::Rng rng(12);
  attn::Tape<float> tape;
  const auto x = tape.leaf(Tensor<float>::randn({2, 5, 7}, rng));
  const auto w = tape.leaf(Tensor<float>::randn({3, 7}, rng));
  const auto b = tape.leaf(Tensor<float>::randn({3}, rng));
  const attn::Var<float> want = attn::matmul(x, w, false, true) + b;
  const auto got = attn::linear(x, w, b);
  CHECK(got.shape() == Shape{2, 5, 3});
  CHECK(attn::max_abs_diff(got.value(), want.value()) < 1e-5);
  const auto nobias = attn::linear(x, w);
  CHECK(attn::max_abs_diff(nobias.value(), attn::matmul(x, w, false, true).value()) < 1e-5);
  const std::string msg = attn::test::message_of([&] {
    attn::linear(x, tape.leaf(Tensor<float>({3, 6})));
  });
  CHECK(msg.find("linear") != std::string::npos);
  CHECK(msg.find("[2, 5, 7]") != std::string::npos);
  CHECK(msg.find("[3, 6]") != std::string::npos);
  CHECK_THROWS_AS(attn::linear(x, w, tape.leaf(Tensor<float>({4}))), attn::shape_error);
}

TEST_CASE("transpose_reshape equals reshape, transpose, reshape, and checks sizes") {
  attn::Rng rng(13);
  attn::Tape<float> tape;
  const auto x = tape.leaf(Tensor<float>::randn({2, 3, 12}, rng));
  const auto want =
      attn::reshape(attn::transpose(attn::reshape(x, {2, 3, 4, 3}), 1, 2), {2, 4, 3, 3});
  const auto got = attn::transpose_reshape(x, {2, 3, 4, 3}, 1, 2, {2, 4, 3, 3});
  CHECK(got.shape() == Shape{2, 4, 3, 3});
  CHECK(attn::max_abs_diff(got.value(), want.value()) == 0.0);
  CHECK_THROWS_AS(attn::transpose_reshape(x, {2, 3, 4, 4}, 1, 2, {2, 4, 3, 4}), attn::shape_error);
}

TEST_CASE("the tape frees intermediate gradients during backward and keeps inputs' gradients") {
  attn::Tape<double> tape;
  const auto x = tape.leaf(Tensor<double>({2}, {1.0, 2.0}), true);
  const attn::Var<double> y = x * x;     // intermediate
  const auto loss = attn::sum(y * 3.0);  // d/dx = 6x
  tape.backward(loss);
  CHECK(x.grad()[0] == doctest::Approx(6.0));
  CHECK(x.grad()[1] == doctest::Approx(12.0));
  const std::string msg = attn::test::message_of([&] { (void)y.grad(); });
  CHECK(msg.find("set_retain_grads") != std::string::npos);
  // With retain_grads the intermediate keeps its gradient: d loss / dy = 3, also through a
  // reshape (which otherwise hands its gradient buffer on to its input).
  tape.set_retain_grads(true);
  tape.backward(loss);
  CHECK(y.grad()[0] == doctest::Approx(3.0));
  CHECK(x.grad()[1] == doctest::Approx(12.0));
  const auto r = attn::reshape(y, {1, 2});
  const auto loss2 = attn::sum(r * 2.0);
  tape.backward(loss2);
  CHECK(r.grad()[1] == doctest::Approx(2.0));
  CHECK(y.grad()[1] == doctest::Approx(2.0));
  CHECK(x.grad()[1] == doctest::Approx(8.0));  // 2 · 2x
}

TEST_CASE("a first gradient contribution overwrites a reused buffer, later ones add") {
  // The pool hands out buffers holding the previous step's values: a step whose gradients were
  // added onto them instead of overwriting would double here.
  attn::Tape<float> tape;
  attn::Parameter<float> w(Tensor<float>({3, 2}, {1, 2, 3, 4, 5, 6}));
  const Tensor<float> xv({4, 2}, {1, -1, 2, 0.5f, -3, 1, 0, 2});
  std::vector<float> first;
  for (int step = 0; step < 3; ++step) {
    tape.clear();
    w.zero_grad();
    const auto x = tape.leaf(xv, true);
    const auto h = attn::linear(x, tape.param(w));                    // [4, 3]
    const auto t = attn::transpose_reshape(h, {4, 3}, 0, 1, {3, 4});  // [3, 4]
    const auto loss = attn::sum(attn::softmax(attn::gelu(t)) * attn::gelu(t));
    tape.backward(loss);
    std::vector<float> g(x.grad().begin(), x.grad().end());
    g.insert(g.end(), w.grad.begin(), w.grad.end());
    if (step == 0)
      first = g;
    else
      CHECK(g == first);
  }
}
