// Identities the library claims, each as a test that would fail if the claim were false.
#include <doctest/doctest.h>

#include <attn/attention/multi_head.hpp>
#include <attn/attn.hpp>
#include <cmath>
#include <string>

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

TEST_CASE_TEMPLATE("random features: a large future key does not change earlier causal outputs", T,
                   float, double) {
  // Causal attention must not let key j influence a query i < j, and in exact arithmetic it does
  // not: whatever stabiliser the keys' features subtract, it must not depend on later keys, or
  // their size shows up in earlier rows through underflow and rounding.
  attn::Rng rng(12);
  const index_t L = 9, D = 4;
  Tensor<T> q = Tensor<T>::randn({1, 1, L, D}, rng, 0, 0.5),
            k = Tensor<T>::randn({1, 1, L, D}, rng, 0, 0.5);
  const Tensor<T> v = Tensor<T>::randn({1, 1, L, 3}, rng);
  attn::Attention<score::ScaledDot, kernel::RandomFeatures, mask::Causal> linear{{}, {64, 3}, {}};
  auto materialised = linear;
  materialised.path = attn::AttentionPath::materialized;
  for (const auto* op : {&linear, &materialised}) {
    auto run = [&](const Tensor<T>& keys) {
      attn::Tape<T> tape;
      return Tensor<T>((*op)(tape.leaf(q), tape.leaf(keys), tape.leaf(v)).value());
    };
    const Tensor<T> before = run(k);
    Tensor<T> big = k;
    for (index_t d = 0; d < D; ++d) big(0, 0, L - 1, d) = T(60) * (d % 2 == 0 ? 1 : -1);
    const Tensor<T> after = run(big);
    double worst = 0, scale = 0;
    for (index_t i = 0; i + 1 < L; ++i)
      for (index_t d = 0; d < 3; ++d) {
        worst = std::max(worst, std::abs(double(before(0, 0, i, d)) - double(after(0, 0, i, d))));
        scale = std::max(scale, std::abs(double(before(0, 0, i, d))));
      }
    const std::string path = op == &linear ? "linear" : "materialised";
    CAPTURE(path);
    CHECK(scale > 0.1);  // the rows are not all zero
    CHECK(worst == 0);
  }
}

namespace {

// κ(s) = 1 + s + s²/2 as a score kernel: the materialised path, written as the docs' example.
struct TaylorScore {
  static constexpr const char* name = "taylor_score";
  static constexpr bool feature_map = false;
  static constexpr bool shift_invariant = false;
  template <class T>
  T value(T s) const {
    return 1 + s + s * s / 2;
  }
  template <class T>
  T derivative(T s, T) const {
    return 1 + s;
  }
};

}  // namespace

TEST_CASE("TaylorExp's features give the same attention as the score kernel 1 + s + s²/2") {
  // Two independent computations of one formula: φ(q)·φ(k) with F = 1 + d + d² on the linear
  // path, and κ(q·k/√d) on the materialised path.
  attn::Rng rng(13);
  const Tensor<double> q = Tensor<double>::randn({2, 2, 11, 5}, rng),
                       k = Tensor<double>::randn({2, 1, 11, 5}, rng),
                       v = Tensor<double>::randn({2, 1, 11, 3}, rng);
  attn::Tape<double> tape;
  auto features = attn::attention<score::ScaledDot, kernel::TaylorExp>(
      tape.leaf(q), tape.leaf(k), tape.leaf(v), mask::Causal{});
  auto scores = attn::attention<score::ScaledDot, TaylorScore>(tape.leaf(q), tape.leaf(k),
                                                               tape.leaf(v), mask::Causal{});
  static_assert(attn::Attention<score::ScaledDot, kernel::TaylorExp, mask::Causal>::linear_path);
  CHECK(attn::max_abs_diff(features.value(), scores.value()) < 1e-12);
}

TEST_CASE("RandomFeatures: each query row scaled by its own constant, every key by one constant") {
  const index_t d = 6, F = 16;
  const kernel::RandomFeatures rf{F, 4};
  const Tensor<double> r = attn::random_feature_matrix<double>(F, d, 4);  // [F, d]
  attn::Rng rng(14);
  const Tensor<double> x = Tensor<double>::randn({3, d}, rng);
  auto exponent = [&](index_t row, index_t a) {  // r_a·x − ‖x‖²/2
    double p = 0, n2 = 0;
    for (index_t j = 0; j < d; ++j) {
      p += r(a, j) * x(row, j);
      n2 += x(row, j) * x(row, j);
    }
    return p - n2 / 2;
  };
  std::vector<double> fq(3 * F), fk(3 * F);
  rf.map(x.data(), 3, d, fq.data(), attn::FeatureSide::query);
  rf.map(x.data(), 3, d, fk.data(), attn::FeatureSide::key);
  for (index_t row = 0; row < 3; ++row) {
    double top = 0;
    for (index_t a = 0; a < F; ++a) {
      top = std::max(top, fq[row * F + a]);
      // Queries: φ_a / φ_0 = exp(e_a − e_0) within a row.
      CHECK(fq[row * F + a] / fq[row * F] ==
            doctest::Approx(std::exp(exponent(row, a) - exponent(row, 0))).epsilon(1e-12));
      // Keys: φ_a(x_row) / φ_a(x_0) = exp(e_a(row) − e_a(0)): one shift for every key.
      CHECK(fk[row * F + a] / fk[a] ==
            doctest::Approx(std::exp(exponent(row, a) - exponent(0, a))).epsilon(1e-12));
    }
    CHECK(top == doctest::Approx(1 / std::sqrt(double(F))));  // the row's largest feature
  }
  // A head too wide for float: the shared key shift would leave ordinary keys near underflow.
  const Tensor<float> wide = Tensor<float>::randn({1, 400}, rng);
  std::vector<float> out(256);
  CHECK_THROWS_AS(
      kernel::RandomFeatures{}.map(wide.data(), 1, 400, out.data(), attn::FeatureSide::key),
      attn::value_error);
  const Tensor<float> narrow = Tensor<float>::randn({1, 64}, rng);
  CHECK_NOTHROW(
      kernel::RandomFeatures{}.map(narrow.data(), 1, 64, out.data(), attn::FeatureSide::key));
}

TEST_CASE("a left-padded causal batch: each prompt's rows equal the prompt alone, on every path") {
  // Batch entry b holds a prompt of L − start[b] tokens after start[b] padding positions, whose
  // values are garbage: And<Causal, LeftPadding> must make them irrelevant.
  attn::Rng rng(15);
  const index_t B = 3, H = 2, L = 9, D = 4;
  const std::vector<index_t> start = {3, 0, 8};
  const Tensor<double> q = Tensor<double>::randn({B, H, L, D}, rng),
                       k = Tensor<double>::randn({B, 1, L, D}, rng),
                       v = Tensor<double>::randn({B, 1, L, 3}, rng);
  using Prompts = mask::And<mask::Causal, mask::LeftPadding>;
  const Prompts prompts{{}, mask::LeftPadding(start)};
  auto check = [&](auto op, const char* path) {
    CAPTURE(path);
    attn::Tape<double> tape;
    auto qv = tape.leaf(q, true), kv = tape.leaf(k, true), vv = tape.leaf(v, true);
    auto o = op(qv, kv, vv);
    tape.backward(attn::sum(o * o));
    for (index_t b = 0; b < B; ++b) {
      const index_t s = start[static_cast<std::size_t>(b)], n = L - s;
      auto rows = [&](const Tensor<double>& t, index_t heads) {  // positions s.. of entry b
        Tensor<double> r({1, heads, n, t.shape().last()});
        for (index_t h = 0; h < heads; ++h)
          for (index_t i = 0; i < n; ++i)
            for (index_t d = 0; d < t.shape().last(); ++d) r(0, h, i, d) = t(b, h, s + i, d);
        return r;
      };
      attn::Tape<double> alone_tape;
      auto alone_op = op;
      alone_op.mask.second = mask::LeftPadding({0});
      const Tensor<double> alone =
          alone_op(alone_tape.leaf(rows(q, H)), alone_tape.leaf(rows(k, 1)),
                   alone_tape.leaf(rows(v, 1)))
              .value();
      for (index_t h = 0; h < H; ++h)
        for (index_t i = 0; i < L; ++i)
          for (index_t d = 0; d < 3; ++d) {
            const double want = i < s ? 0.0 : alone(0, h, i - s, d);
            CHECK(o.value()(b, h, i, d) == doctest::Approx(want).epsilon(1e-12).scale(1));
          }
      for (index_t j = 0; j < s; ++j)  // padding gets no gradient
        for (index_t d = 0; d < D; ++d) CHECK(kv.grad()(b, 0, j, d) == 0.0);
    }
  };
  attn::Attention<score::ScaledDot, kernel::Softmax, Prompts> fused{{}, {}, prompts};
  auto materialised = fused;
  materialised.path = attn::AttentionPath::materialized;
  attn::Attention<score::ScaledDot, kernel::EluPlusOne, Prompts> linear{{}, {}, prompts};
  static_assert(decltype(linear)::linear_path);
  check(fused, "fused");
  check(materialised, "materialised");
  check(linear, "linear");
}
