// NaN and infinity follow one rule on the fused path, the materialised path and the reference
// (non_finite.hpp): a row is NaN when an allowed score is NaN or +∞ or an allowed key's value is
// not finite; hidden keys never change a row; all-(−∞) rows are 0; and padding that holds NaN
// changes no output and no gradient.
#include <doctest/doctest.h>

#include <algorithm>
#include <attn/attention/reference.hpp>
#include <attn/attn.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernel_test_helpers.hpp"

using attn::index_t;
using attn::Shape;
using attn::Tensor;
namespace kernel = attn::kernel;
namespace mask = attn::mask;
namespace score = attn::score;

namespace non_finite_test {

using kernel_tests::normal_tensor;

const std::vector<attn::AttentionBackward> plans = {
    {attn::BackwardWeights::saved, attn::BackwardPasses::single},
    {attn::BackwardWeights::recomputed, attn::BackwardPasses::two}};

// Row r of o [B, H, Tq, D] (as B·H·Tq rows) holds a value that is not finite.
template <class T>
std::vector<bool> bad_rows(const Tensor<T>& o) {
  const index_t d = o.shape().last(), rows = o.numel() / d;
  std::vector<bool> bad(static_cast<std::size_t>(rows));
  for (index_t r = 0; r < rows; ++r)
    for (index_t c = 0; c < d; ++c)
      if (!std::isfinite(o[r * d + c])) bad[static_cast<std::size_t>(r)] = true;
  return bad;
}

// got and want have the same non-finite rows, and agree on the others; rows that are all NaN
// in `got` where want is not finite.
template <class T>
void check_same(const std::string& what, const Tensor<T>& got, const Tensor<T>& want, double tol) {
  REQUIRE(got.shape() == want.shape());
  const std::vector<bool> g = bad_rows(got), w = bad_rows(want);
  const index_t d = got.shape().last();
  double worst = 0;
  for (std::size_t r = 0; r < g.size(); ++r) {
    CHECK_MESSAGE(g[r] == w[r], what, ": row ", r, (w[r] ? " should be" : " should not be"),
                  " non-finite");
    if (g[r] || w[r]) continue;
    for (index_t c = 0; c < d; ++c) {
      const index_t e = static_cast<index_t>(r) * d + c;
      worst = std::max(worst, std::abs(double(got[e]) - double(want[e])));
    }
  }
  CHECK_MESSAGE(worst <= tol, what, ": finite rows differ by up to ", worst);
}

template <class T, class Mask>
void check_case(const std::string& what, const Mask& m, const Tensor<T>& q, const Tensor<T>& k,
                const Tensor<T>& v, const std::type_identity_t<Tensor<T>>* dense = nullptr,
                index_t expect_bad = -1) {
  const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  Tensor<T> expanded;
  if (dense) {
    const Shape& s = q.shape();
    expanded = Tensor<T>(Shape{s[0], s[1], s[2], k.shape()[2]});
    for (index_t e = 0; e < expanded.numel(); ++e) expanded[e] = (*dense)[e % dense->numel()];
  }
  const auto want = attn::reference_attention(q, k, v, score::ScaledDot{}, kernel::Softmax{}, m,
                                              dense ? &expanded : nullptr);
  attn::Attention<score::ScaledDot, kernel::Softmax, Mask> op{{}, {}, m};
  for (const auto& plan : plans) {
    op.backward = plan;
    attn::Tape<T> tape;
    auto qv = tape.leaf(q, true), kv = tape.leaf(k, true), vv = tape.leaf(v, true);
    Tensor<T> weights;
    attn::AttentionPartial<T> p;
    if (dense)
      p = op.partial(qv, kv, vv, attn::dense_bias(tape.leaf(*dense)), &weights);
    else
      p = op.partial(qv, kv, vv, &weights);
    check_same(what + " fused", p.output.value(), want.out, tol);
    // A poisoned row has a NaN log-sum-exp and NaN weights; the others the reference's weights.
    const std::vector<bool> bad = bad_rows(want.out);
    for (std::size_t r = 0; r < bad.size(); ++r) {
      const bool lse_nan = std::isnan(p.lse.value()[static_cast<index_t>(r)]);
      if (bad[r]) continue;  // a value's NaN leaves lse finite, a score's makes it NaN
      CHECK_MESSAGE(!lse_nan, what, ": lse of row ", r);
    }
    check_same(what + " weights", weights, want.weights, tol);
    if (expect_bad >= 0) {
      index_t n = 0;
      for (const bool b : bad) n += b ? 1 : 0;
      CHECK_MESSAGE(n == expect_bad, what, ": ", n, " non-finite rows");
    }
  }
  attn::Tape<T> tape;
  const auto o = dense ? op.materialized(tape.leaf(q), tape.leaf(k), tape.leaf(v),
                                         attn::dense_bias(tape.leaf(*dense)))
                       : op.materialized(tape.leaf(q), tape.leaf(k), tape.leaf(v));
  check_same(what + " materialised", o.value(), want.out, tol);
}

template <class T>
void all_cases() {
  constexpr T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  const index_t B = 2, H = 2, T_ = 200, D = 8;  // past one 128-row tile
  const Tensor<T> q0 = normal_tensor<T>(Shape{B, H, T_, D}, 1),
                  k0 = normal_tensor<T>(Shape{B, 1, T_, D}, 2),
                  v0 = normal_tensor<T>(Shape{B, 1, T_, D}, 3);
  const std::string type = std::is_same_v<T, float> ? "float" : "double";
  auto with = [](Tensor<T> t, index_t b, index_t h, index_t i, T x) {
    t(b, h, i, 0) = x;
    return t;
  };
  const mask::Causal causal;
  // Each case under the causal mask: the rows that see the position and only they are NaN.
  check_case(type + " k NaN", causal, q0, with(k0, 0, 0, 5, nan), v0, nullptr, 2 * (T_ - 5));
  check_case(type + " k +inf", causal, q0, with(k0, 0, 0, 5, inf), v0);
  check_case(type + " k -inf", causal, q0, with(k0, 1, 0, 150, -inf), v0);
  check_case(type + " q NaN", causal, with(q0, 0, 1, 3, nan), k0, v0, nullptr, 1);
  check_case(type + " v NaN seen by all rows after it", causal, q0, k0, with(v0, 0, 0, 5, nan),
             nullptr, 2 * (T_ - 5));
  check_case(type + " v NaN in a partial tile", causal, q0, k0, with(v0, 1, 0, 150, inf), nullptr,
             2 * (T_ - 150));
  check_case(type + " k NaN in a partial tile", causal, q0, with(k0, 1, 0, 150, nan), v0, nullptr,
             2 * (T_ - 150));
  check_case(type + " no mask, v NaN", mask::None{}, q0, k0, with(v0, 1, 0, 199, nan), nullptr,
             2 * T_);
  // Padding: a NaN in a padded key or value changes nothing.
  const mask::Padding pad(std::vector<index_t>{130, 200});
  check_case(type + " padding, padded v NaN", pad, q0, k0, with(v0, 0, 0, 170, nan), nullptr, 0);
  check_case(type + " padding, padded k inf", pad, q0, with(k0, 0, 0, 131, inf), v0, nullptr, 0);
  // A bias: NaN where allowed poisons its row; −∞ on every allowed key of a row makes it 0.
  Tensor<T> bias(Shape{H, T_, T_});
  bias(1, 40, 12) = nan;                                    // allowed for row 40
  bias(0, 60, 100) = nan;                                   // hidden (future) for row 60
  for (index_t j = 0; j <= 70; ++j) bias(0, 70, j) = -inf;  // all of row 70's keys
  check_case(type + " bias NaN and -inf", causal, q0, k0, v0, &bias, B * 1);
  {
    attn::Tape<T> tape;
    attn::Attention<score::ScaledDot, kernel::Softmax, mask::Causal> op;
    const auto p =
        op.partial(tape.leaf(q0), tape.leaf(k0), tape.leaf(v0), attn::dense_bias(tape.leaf(bias)));
    for (index_t b = 0; b < B; ++b) {
      CHECK(p.lse.value()(b, 0, 70) == -inf);
      for (index_t c = 0; c < D; ++c) CHECK(p.output.value()(b, 0, 70, c) == T{0});
      CHECK(std::isnan(p.lse.value()(b, 1, 40)));
      CHECK(std::isfinite(p.lse.value()(b, 0, 60)));
    }
  }
}

}  // namespace non_finite_test

TEST_CASE("NaN and infinity: the fused and materialised paths follow the reference's rule") {
  non_finite_test::all_cases<float>();
  non_finite_test::all_cases<double>();
}

TEST_CASE("NaN in padded keys and values reaches no output and no gradient") {
  using kernel_tests::normal_tensor;
  using T = double;
  const index_t B = 2, H = 4, Hk = 2, T_ = 180, D = 8;
  const Tensor<T> q = normal_tensor<T>(Shape{B, H, T_, D}, 4),
                  r = normal_tensor<T>(Shape{B, H, T_, D}, 7);
  Tensor<T> k = normal_tensor<T>(Shape{B, Hk, T_, D}, 5),
            v = normal_tensor<T>(Shape{B, Hk, T_, D}, 6);
  const std::vector<index_t> lengths{100, 161};
  for (index_t b = 0; b < B; ++b)  // zeros in the padding: the baseline
    for (index_t hk = 0; hk < Hk; ++hk)
      for (index_t j = lengths[static_cast<std::size_t>(b)]; j < T_; ++j)
        for (index_t c = 0; c < D; ++c) k(b, hk, j, c) = v(b, hk, j, c) = 0;
  Tensor<T> kn = k, vn = v;  // NaN and ±∞ in the padding
  kn(0, 1, 120, 3) = std::numeric_limits<T>::quiet_NaN();
  vn(0, 0, 101, 0) = std::numeric_limits<T>::infinity();
  vn(1, 1, 170, 2) = std::numeric_limits<T>::quiet_NaN();
  kn(1, 0, 179, 0) = -std::numeric_limits<T>::infinity();
  const attn::mask::And<mask::Causal, mask::Padding> m{{}, mask::Padding(lengths)};
  auto run = [&](const Tensor<T>& kk, const Tensor<T>& vv, const attn::AttentionBackward& plan,
                 bool materialised) {
    attn::Attention<score::ScaledDot, kernel::Softmax, decltype(m)> op{{}, {}, m};
    op.backward = plan;
    attn::Tape<T> tape;
    auto qv = tape.leaf(q, true), kv = tape.leaf(kk, true), vvv = tape.leaf(vv, true);
    const auto o = materialised ? op.materialized(qv, kv, vvv) : op(qv, kv, vvv);
    tape.backward(attn::sum(o * tape.leaf(r)));
    return std::vector<Tensor<T>>{o.value(), qv.grad(), kv.grad(), vvv.grad()};
  };
  const char* names[] = {"output", "grad q", "grad k", "grad v"};
  for (const bool materialised : {false, true})
    for (const auto& plan : non_finite_test::plans) {
      const auto want = run(k, v, plan, materialised), got = run(kn, vn, plan, materialised);
      for (std::size_t t = 0; t < want.size(); ++t)
        for (index_t e = 0; e < want[t].numel(); ++e) {
          REQUIRE_MESSAGE(std::isfinite(got[t][e]), names[t], " element ", e,
                          materialised ? " (materialised)" : " (fused)");
          REQUIRE_MESSAGE(std::abs(got[t][e] - want[t][e]) <= 1e-12, names[t], " element ", e);
        }
    }
}
