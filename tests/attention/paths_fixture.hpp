// Shared by the test_paths_*.cpp files (one per kernel family; with ATTN_UNITY_TESTS=OFF, three
// units that compile in parallel).
// Every valid Score x Kernel x Mask combination: the path Attention chooses (fused online
// softmax, linear, materialised) against the reference loops (forward), against the
// materialised path (gradients of q, k, v), and against finite differences (double).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <attn/attention/attention.hpp>
#include <attn/attention/reference.hpp>
#include <attn/attn.hpp>
#include <cmath>
#include <string>
#include <tuple>
#include <type_traits>

using attn::index_t;
using attn::Shape;
using attn::Tensor;
namespace kernel = attn::kernel;
namespace mask = attn::mask;
namespace score = attn::score;

namespace attn::test {

template <class Mask>
Mask make_mask(index_t batch, index_t tq, index_t tk) {
  if constexpr (requires(Mask m) { m.first, m.second; }) {  // And / Or: from their parts
    return Mask{make_mask<decltype(Mask::first)>(batch, tq, tk),
                make_mask<decltype(Mask::second)>(batch, tq, tk)};
  } else if constexpr (std::is_same_v<Mask, mask::SlidingWindow>) {
    return mask::SlidingWindow{3, 1};
  } else if constexpr (std::is_same_v<Mask, mask::Padding>) {
    std::vector<index_t> lengths;
    for (index_t b = 0; b < batch; ++b)
      lengths.push_back(b == 1 ? 0 : std::max<index_t>(1, tk - 2 * b));
    return mask::Padding(lengths);
  } else if constexpr (std::is_same_v<Mask, mask::LeftPadding>) {
    std::vector<index_t> starts;  // batch entry 1 is all padding
    for (index_t b = 0; b < batch; ++b) starts.push_back(b == 1 ? tk : std::min(tk - 1, 2 + b));
    return mask::LeftPadding(starts);
  } else if constexpr (std::is_same_v<Mask, mask::Custom>) {
    // One matrix per batch entry when there are several (each its own pattern), else one shared.
    const index_t entries = batch > 1 ? batch : 1;
    Tensor<std::uint8_t> m(entries > 1 ? Shape{entries, tq, tk} : Shape{tq, tk});
    for (index_t b = 0; b < entries; ++b)
      for (index_t i = 0; i < tq; ++i)
        for (index_t j = 0; j < tk; ++j)
          m[(b * tq + i) * tk + j] =
              static_cast<std::uint8_t>((i * 7 + j * 3 + b) % 5 != 0 && i != 2 + b);
    return mask::Custom(m);
  } else if constexpr (std::is_same_v<Mask, mask::BigBird>) {
    return mask::BigBird{4, 1, 1, 1, 5};
  } else {
    return Mask{};
  }
}

template <class Kernel>
Kernel make_kernel() {
  if constexpr (std::is_same_v<Kernel, kernel::RandomFeatures>)
    return kernel::RandomFeatures{32, 7};
  else
    return Kernel{};
}

// Absolute tolerance per unit of output scale. Polynomial kernels divide by Σ s^C, which can come
// close to 0 (signed scores, odd C): the quotient amplifies rounding (FMA contraction under
// -march=native moved double results by 6e-9 there), so they get a looser bound; a wrong formula
// is off by far more.
template <class T, class Kernel>
double tolerance() {
  constexpr bool poly = requires {
    Kernel::degree;
  };
  if constexpr (std::is_same_v<T, float>)
    return 2e-4;
  else
    return poly ? 1e-8 : 1e-11;
}

// The sizes every combination runs at: one position; a small grouped-query case with Tq != Tk
// (finite differences run here); lengths that are not multiples of the tile sizes; and a
// grouped-query batch. (Lengths over several 128-wide tiles, every backward plan: see
// test_online_softmax.cpp.)
struct Size {
  index_t B, H, Hk, Tq, Tk, Dh, Dv;
};
inline constexpr Size sizes[] = {{1, 1, 1, 1, 1, 4, 3},
                                 {1, 2, 1, 9, 13, 3, 2},
                                 {2, 2, 2, 37, 70, 5, 6},
                                 {3, 4, 2, 65, 65, 8, 8}};

template <class Score, class Kernel, class Mask, class T>
void check_combination() {
  attn::Rng rng(17);
  for (const Size& z : sizes) {
    // Causal masks with Tq > Tk leave whole rows empty; Padding and LeftPadding leave batch 1
    // empty.
    const Tensor<T> q = Tensor<T>::randn({z.B, z.H, z.Tq, z.Dh}, rng, 0, 0.8);
    const Tensor<T> k = Tensor<T>::randn({z.B, z.Hk, z.Tk, z.Dh}, rng, 0, 0.8);
    const Tensor<T> v = Tensor<T>::randn({z.B, z.Hk, z.Tk, z.Dv}, rng);
    const Tensor<T> r = Tensor<T>::randn({z.B, z.H, z.Tq, z.Dv}, rng);
    const Mask m = make_mask<Mask>(z.B, z.Tq, z.Tk);
    const Kernel kern = make_kernel<Kernel>();
    CAPTURE(z.Tq);
    CAPTURE(z.Tk);
    const auto ref = attn::reference_attention(q, k, v, Score{}, kern, m);

    attn::Attention<Score, Kernel, Mask> fast{Score{}, kern, m};
    auto slow = [&](const auto&... in) { return fast.materialized(in...); };
    auto run = [&](const auto& op, Tensor<T>* weights) {
      attn::Tape<T> tape;
      auto qv = tape.leaf(q, true), kv = tape.leaf(k, true), vv = tape.leaf(v, true);
      auto o = op(qv, kv, vv, weights);
      tape.backward(attn::sum(o * tape.leaf(r)));
      return std::tuple{Tensor<T>(o.value()), Tensor<T>(qv.grad()), Tensor<T>(kv.grad()),
                        Tensor<T>(vv.grad())};
    };
    const auto [o1, gq1, gk1, gv1] = run(fast, nullptr);
    Tensor<T> w;
    const auto [o2, gq2, gk2, gv2] = run(slow, &w);
    double scale = 1;
    for (const T x : ref.out) scale = std::max(scale, std::abs(static_cast<double>(x)));
    const double tol = tolerance<T, Kernel>() * scale;
    CHECK(attn::max_abs_diff(o1, ref.out) < tol);
    CHECK(attn::max_abs_diff(o2, ref.out) < tol);
    CHECK(attn::max_abs_diff(w, ref.weights) < tol);
    CHECK(attn::max_abs_diff(gq1, gq2) < tol * 10);
    CHECK(attn::max_abs_diff(gk1, gk2) < tol * 10);
    CHECK(attn::max_abs_diff(gv1, gv2) < tol * 10);
    if (std::is_same_v<T, double> && z.Tq * z.Tk <= 9 * 13) {
      // Finite differences on the chosen path at the two small sizes (each element of q, k, v
      // costs two evaluations); the larger sizes hold the gradients to the materialised path.
      const Tensor<double> qd = attn::cast<double>(q), kd = attn::cast<double>(k),
                           vd = attn::cast<double>(v), rd = attn::cast<double>(r);
      attn::Attention<Score, Kernel, Mask> op = fast;
      auto f = [&](const std::vector<attn::Var<double>>& x) {
        return attn::sum(op(x[0], x[1], x[2]) * x[0].tape().leaf(rd));
      };
      const attn::GradientCheck c = attn::check_gradient(f, {qd, kd, vd}, 1e-6, 1e-5);
      CHECK_MESSAGE(c.ok, c.report());
    }
  }
}

template <class Score, class Kernel, class T>
void check_all_masks() {
  check_combination<Score, Kernel, mask::None, T>();
  check_combination<Score, Kernel, mask::Causal, T>();
  check_combination<Score, Kernel, mask::CausalTopLeft, T>();
  check_combination<Score, Kernel, mask::SlidingWindow, T>();
  check_combination<Score, Kernel, mask::Padding, T>();
  check_combination<Score, Kernel, mask::Custom, T>();
  check_combination<Score, Kernel, mask::BigBird, T>();
}

// The compositions, on a few combinations rather than every one (each mask type instantiates
// every path again): a left-padded causal batch and local-or-pattern attention.
using LeftPaddedCausal = mask::And<mask::Causal, mask::LeftPadding>;
using WindowOrCustom = mask::Or<mask::SlidingWindow, mask::Custom>;

// A left-padded causal batch through `op` (an Attention<Score, Kernel, LeftPaddedCausal> in
// double, its own path): batch entry b holds a prompt of L − start[b] tokens after start[b]
// padding positions whose values are garbage. Each prompt's rows must equal the prompt run alone
// (the same op with no padding), padded rows must be 0 and padded keys get no gradient. On the
// materialised path (op.materialized) when `materialized`.
template <class Op>
void check_left_padded(Op op, bool materialized = false) {
  auto run = [&](const Op& o, const auto& q, const auto& k, const auto& v) {
    return materialized ? o.materialized(q, k, v) : o(q, k, v);
  };
  attn::Rng rng(15);
  const index_t B = 3, H = 2, L = 9, D = 4;
  const std::vector<index_t> start = {3, 0, 8};
  const Tensor<double> q = Tensor<double>::randn({B, H, L, D}, rng),
                       k = Tensor<double>::randn({B, 1, L, D}, rng),
                       v = Tensor<double>::randn({B, 1, L, 3}, rng);
  op.mask.second = mask::LeftPadding(start);
  attn::Tape<double> tape;
  auto qv = tape.leaf(q, true), kv = tape.leaf(k, true), vv = tape.leaf(v, true);
  auto o = run(op, qv, kv, vv);
  tape.backward(attn::sum(o * o));
  for (index_t b = 0; b < B; ++b) {
    CAPTURE(b);
    const index_t s = start[static_cast<std::size_t>(b)], n = L - s;
    auto rows = [&](const Tensor<double>& t, index_t heads) {  // positions s.. of entry b
      Tensor<double> r({1, heads, n, t.shape().last()});
      for (index_t h = 0; h < heads; ++h)
        for (index_t i = 0; i < n; ++i)
          for (index_t d = 0; d < t.shape().last(); ++d) r(0, h, i, d) = t(b, h, s + i, d);
      return r;
    };
    attn::Tape<double> alone_tape;
    Op alone_op = op;
    alone_op.mask.second = mask::LeftPadding({0});
    const Tensor<double> alone = run(alone_op, alone_tape.leaf(rows(q, H)),
                                     alone_tape.leaf(rows(k, 1)), alone_tape.leaf(rows(v, 1)))
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
}

}  // namespace attn::test
