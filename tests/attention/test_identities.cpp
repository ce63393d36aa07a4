// Identities the library claims, each as a test that would fail if the claim were false.
#include <doctest/doctest.h>

#include <attn/attention/multi_head.hpp>
#include <attn/attention/reference.hpp>
#include <attn/attn.hpp>
#include <cmath>

using attn::index_t;
using attn::Tensor;
namespace kernel = attn::kernel;
namespace mask = attn::mask;
namespace score = attn::score;

TEST_CASE("NegSqEuclidean softmax equals softmax of 2q·k − ‖k‖² (the ‖q‖² term cancels per row)") {
  // 2q·k − ‖k‖² is a Dot score of augmented vectors q' = [2q, −1], k' = [k, ‖k‖²].
  attn::Rng rng(1);
  const index_t B = 2, H = 2, T = 9, D = 4;
  const Tensor<double> q = Tensor<double>::randn({B, H, T, D}, rng),
                       k = Tensor<double>::randn({B, H, T, D}, rng),
                       v = Tensor<double>::randn({B, H, T, D}, rng);
  Tensor<double> qa({B, H, T, D + 1}), ka({B, H, T, D + 1});
  for (index_t bh = 0; bh < B * H; ++bh)
    for (index_t t = 0; t < T; ++t) {
      double n2 = 0;
      for (index_t d = 0; d < D; ++d) {
        qa[(bh * T + t) * (D + 1) + d] = 2 * q[(bh * T + t) * D + d];
        ka[(bh * T + t) * (D + 1) + d] = k[(bh * T + t) * D + d];
        n2 += k[(bh * T + t) * D + d] * k[(bh * T + t) * D + d];
      }
      qa[(bh * T + t) * (D + 1) + D] = -1;
      ka[(bh * T + t) * (D + 1) + D] = n2;
    }
  attn::Tape<double> tape;
  auto euclid = attn::attention<score::NegSqEuclidean>(tape.leaf(q), tape.leaf(k), tape.leaf(v),
                                                       mask::Causal{});
  auto dot =
      attn::attention<score::Dot>(tape.leaf(qa), tape.leaf(ka), tape.leaf(v), mask::Causal{});
  CHECK(attn::max_abs_diff(euclid.value(), dot.value()) < 1e-12);
  // And it differs from plain dot-product attention on the same q, k.
  auto plain =
      attn::attention<score::Dot>(tape.leaf(q), tape.leaf(k), tape.leaf(v), mask::Causal{});
  CHECK(attn::max_abs_diff(euclid.value(), plain.value()) > 1e-3);
}

namespace {

// max over triples of |A_ij + A_jk + A_ki| with A = log W − log Wᵀ: zero exactly when the
// scores are symmetric (then A_ij = lse_j − lse_i), and generically not otherwise.
double asymmetry(const Tensor<double>& w, index_t T) {
  double worst = 0;
  auto a = [&](index_t i, index_t j) { return std::log(w[i * T + j]) - std::log(w[j * T + i]); };
  for (index_t i = 0; i < T; ++i)
    for (index_t j = 0; j < T; ++j)
      for (index_t k = 0; k < T; ++k)
        worst = std::max(worst, std::abs(a(i, j) + a(j, k) + a(k, i)));
  return worst;
}

template <class Projection>
double score_asymmetry() {
  attn::MultiHeadConfig c;
  c.d_model = 8;
  c.heads = 1;
  c.init_std = 0.5;
  c.seed = 3;
  attn::MultiHeadAttention<score::ScaledDot, kernel::Softmax, mask::None, attn::Heads<1>,
                           Projection, double>
      mha(c);
  attn::Rng rng(2);
  attn::Tape<double> tape;
  Tensor<double> w;
  mha(tape.leaf(Tensor<double>::randn({1, 6, 8}, rng)), {}, &w);
  return asymmetry(w, 6);
}

}  // namespace

TEST_CASE("Tied projections give a symmetric score matrix; separate ones do not") {
  CHECK(score_asymmetry<attn::projection::Tied>() < 1e-10);
  CHECK(score_asymmetry<attn::projection::Separate>() > 1e-3);
}

TEST_CASE("a query with no allowed key gets output 0 and zero gradient, never NaN") {
  attn::Rng rng(4);
  const Tensor<double> q = Tensor<double>::randn({2, 1, 3, 4}, rng),
                       k = Tensor<double>::randn({2, 1, 5, 4}, rng),
                       v = Tensor<double>::randn({2, 1, 5, 2}, rng);
  auto check = [&](const auto& op, auto row_empty) {
    attn::Tape<double> tape;
    auto qv = tape.leaf(q, true), kv = tape.leaf(k, true), vv = tape.leaf(v, true);
    auto o = op(qv, kv, vv);
    tape.backward(attn::sum(o * o + o));
    for (index_t b = 0; b < 2; ++b)
      for (index_t i = 0; i < 3; ++i) {
        if (!row_empty(b, i)) continue;
        for (index_t d = 0; d < 2; ++d) CHECK(o.value()(b, 0, i, d) == 0.0);
        for (index_t d = 0; d < 4; ++d) CHECK(qv.grad()(b, 0, i, d) == 0.0);
      }
    for (const double g : kv.grad()) CHECK(std::isfinite(g));
  };
  const mask::Padding pad({3, 0});  // batch 1 has no keys at all
  auto pad_empty = [](index_t b, index_t) { return b == 1; };
  check(attn::Attention<score::ScaledDot, kernel::Softmax, mask::Padding>{{}, {}, pad}, pad_empty);
  check(attn::Attention<score::NegSqEuclidean, kernel::Polynomial<2>, mask::Padding>{{}, {}, pad},
        pad_empty);
  check(attn::Attention<score::ScaledDot, kernel::EluPlusOne, mask::Padding>{{}, {}, pad},
        pad_empty);
  // Causal, end-aligned, with Tq = 3 > Tk = 2 ... here Tk = 5 > Tq: use top-left with an empty row
  // via Custom.
  Tensor<std::uint8_t> m({3, 5}, std::uint8_t{1});
  for (index_t j = 0; j < 5; ++j) m(1, j) = 0;
  auto row1 = [](index_t, index_t i) { return i == 1; };
  check(attn::Attention<score::ScaledDot, kernel::Softmax, mask::Custom>{{}, {}, mask::Custom(m)},
        row1);
  check(attn::Attention<score::Dot, kernel::Relu, mask::Custom>{{}, {}, mask::Custom(m)}, row1);
}

TEST_CASE("random features converge to softmax attention as the feature count grows") {
  attn::Rng rng(6);
  const index_t T = 24, D = 8;
  double err64 = 0, err4096 = 0;
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    const Tensor<double> q = Tensor<double>::randn({1, 1, T, D}, rng, 0, 0.7),
                         k = Tensor<double>::randn({1, 1, T, D}, rng, 0, 0.7),
                         v = Tensor<double>::randn({1, 1, T, D}, rng);
    const auto exact =
        attn::reference_attention(q, k, v, score::ScaledDot{}, kernel::Softmax{}, mask::None{});
    for (const index_t f : {64, 4096}) {
      attn::Tape<double> tape;
      attn::Attention<score::ScaledDot, kernel::RandomFeatures> op{
          {}, kernel::RandomFeatures{f, seed}, {}};
      const double e =
          attn::max_abs_diff(op(tape.leaf(q), tape.leaf(k), tape.leaf(v)).value(), exact.out);
      (f == 64 ? err64 : err4096) += e / 4;
    }
  }
  INFO("mean max error at F = 64: " << err64 << ", at F = 4096: " << err4096);
  // The estimator's error shrinks like 1/√F: 64x the features should divide it by about 8.
  CHECK(err4096 < err64 / 2);
}
