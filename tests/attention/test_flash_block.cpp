// The CUDA kernels' shared math and block programs, run on the CPU (no GPU, no nvcc needed):
// bf16 rounding, the score's per-element formula, the online-softmax merge over arbitrary splits,
// tile skipping against the elementwise mask, and the block programs (forward, dQ, dK/dV) run by
// the host emulation against the reference, against finite differences (in double), with bf16
// inputs, and with many threads per block meeting at barriers as on the GPU.
#include <doctest/doctest.h>

#include <attn/attention/flash_host.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "../test_util.hpp"
#include "flash_fixture.hpp"

using attn::bf16;
using attn::index_t;
using attn::Shape;
using attn::Tensor;
namespace flash = attn::flash;
namespace mask = attn::mask;
namespace score = attn::score;
using namespace attn::test;

namespace {

std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// A mask that answers `partial` for every tile, so a block program asks allowed() everywhere and
// skips nothing: the same result as M's, computed the slow way.
template <class M>
struct NoTileSkipping : M {
  static constexpr bool host_device = true;
  ATTN_HOST_DEVICE attn::TileKind tile(index_t, index_t, index_t, index_t, index_t, index_t,
                                       index_t) const {
    return attn::TileKind::partial;
  }
};

// Counts the allowed() calls of the mask it wraps.
template <class M>
struct CountingMask : M {
  static constexpr bool host_device = true;
  long* calls = nullptr;
  bool allowed(index_t b, index_t i, index_t j, index_t tq, index_t tk) const {
    ++*calls;
    return M::allowed(b, i, j, tq, tk);
  }
};

}  // namespace

TEST_CASE("bf16: exact widening, round to nearest even, inf and NaN") {
  CHECK(attn::to_bf16(1.0f).bits == 0x3f80);
  CHECK(attn::to_bf16(-2.0f).bits == 0xc000);
  CHECK(attn::to_bf16(bits_float(0x3f808000u)).bits == 0x3f80);  // halfway, even stays
  CHECK(attn::to_bf16(bits_float(0x3f818000u)).bits == 0x3f82);  // halfway, odd rounds up
  CHECK(attn::to_bf16(bits_float(0x3f808001u)).bits == 0x3f81);  // just above halfway
  CHECK(attn::to_bf16(std::numeric_limits<float>::infinity()).bits == 0x7f80);
  CHECK(attn::to_bf16(std::numeric_limits<float>::max()).bits == 0x7f80);  // overflows to inf
  CHECK(std::isnan(attn::to_float(attn::to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(attn::to_float(attn::to_bf16(bits_float(0x7f800001u)))));  // signalling NaN
  // Every non-NaN bf16 widens to a float that rounds back to itself.
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const bf16 x{static_cast<std::uint16_t>(b)};
    if (std::isnan(attn::to_float(x))) continue;
    REQUIRE(attn::to_bf16(attn::to_float(x)).bits == x.bits);
  }
  // Random floats round to the nearer of their two bf16 neighbours, ties to the even one.
  attn::Rng rng(3);
  for (int t = 0; t < 20000; ++t) {
    const float f = bits_float(static_cast<std::uint32_t>(rng.uniform_int(0x7f7fffffu)) |
                               (t % 2 ? 0x80000000u : 0u));
    const float lo = bits_float(float_bits(f) & 0xffff0000u);  // toward zero
    const float hi = bits_float((float_bits(f) & 0xffff0000u) + 0x10000u);
    const double dlo = std::abs(double(f) - double(lo)), dhi = std::abs(double(hi) - double(f));
    const float got = attn::to_float(attn::to_bf16(f));
    const float want = dlo < dhi ? lo : dhi < dlo ? hi : ((float_bits(lo) >> 16) % 2 ? hi : lo);
    REQUIRE(float_bits(got) == float_bits(want));
  }
}

TEST_CASE("score_from_parts equals each score policy's definition") {
  attn::Rng rng(4);
  auto check = [&](const auto& s) {
    using S = std::decay_t<decltype(s)>;
    for (index_t d = 1; d < 10; ++d) {
      const auto q = Tensor<double>::randn({d}, rng), k = Tensor<double>::randn({d}, rng);
      const double qk = score::detail::dot(q.data(), k.data(), d),
                   qq = score::detail::dot(q.data(), q.data(), d),
                   kk = score::detail::dot(k.data(), k.data(), d);
      CHECK(attn::score_from_parts<S>(s.alpha(d), qk, qq, kk) ==
            doctest::Approx(s(q.data(), k.data(), d)).epsilon(1e-12));
    }
  };
  check(score::Dot{});
  check(score::ScaledDot{});
  check(score::NegSqEuclidean{});
}

TEST_CASE_TEMPLATE("online-softmax merge over arbitrary splits equals the full softmax", A, float,
                   double) {
  attn::Rng rng(5);
  const double tol = std::is_same_v<A, float> ? 2e-6 : 1e-14;
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 1 + static_cast<int>(rng.uniform_int(150));
    // Scores up to ±1e4 (e^s overflows beyond ~88 in float without the max), a share masked,
    // and every tenth row masked entirely.
    const double spread = trial % 3 == 0 ? 1e4 : 3.0;
    const double masked = trial % 10 == 0 ? 1.0 : 0.3;
    std::vector<A> s(static_cast<std::size_t>(n)), v(static_cast<std::size_t>(n));
    for (int j = 0; j < n; ++j) {
      s[j] = rng.uniform() < masked ? attn::negative_infinity<A>() : A(rng.normal(0, spread));
      v[j] = A(rng.normal());
    }
    // Reference in double: lse and o = Σ softmax_j v_j.
    double mx = -std::numeric_limits<double>::infinity(), z = 0, o = 0;
    for (const A x : s) mx = std::max(mx, double(x));
    for (int j = 0; j < n; ++j)
      if (!std::isinf(s[j])) {
        z += std::exp(double(s[j]) - mx);
        o += std::exp(double(s[j]) - mx) * double(v[j]);
      }
    // Parts: random cut points (empty parts allowed), each with its state and partial output.
    std::vector<int> cuts{0, n};
    for (int c = 0; c < 4; ++c) cuts.push_back(static_cast<int>(rng.uniform_int(n + 1)));
    std::sort(cuts.begin(), cuts.end());
    struct Part {
      attn::SoftmaxPartial<A> st;
      A out;
    };
    std::vector<Part> parts;
    for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
      const int j0 = cuts[c], len = cuts[c + 1] - cuts[c];
      std::vector<A> w(static_cast<std::size_t>(len));
      Part p{attn::softmax_partial(s.data() + j0, len, w.data()), A(0)};
      for (int j = 0; j < len; ++j) p.out += w[j] * v[j0 + j];
      parts.push_back(p);
    }
    // Merge in a random order of random pairs (the sets are disjoint, so any order is exact).
    while (parts.size() > 1) {
      const auto a = static_cast<std::size_t>(rng.uniform_int(parts.size()));
      auto b = static_cast<std::size_t>(rng.uniform_int(parts.size() - 1));
      if (b >= a) ++b;
      const attn::SoftmaxMerged<A> m = attn::merge(parts[a].st, parts[b].st);
      parts[a] = {m.state, m.scale_a * parts[a].out + m.scale_b * parts[b].out};
      parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(b));
    }
    const Part& r = parts[0];
    CAPTURE(trial);
    if (z == 0) {  // nothing allowed: the state says so, and never NaN
      CHECK(r.st.sum == A(0));
      CHECK(r.out == A(0));
      CHECK(attn::log_sum_exp(r.st) == attn::negative_infinity<A>());
      continue;
    }
    REQUIRE(std::isfinite(double(r.st.sum)));
    CHECK(double(attn::log_sum_exp(r.st)) ==
          doctest::Approx(mx + std::log(z)).epsilon(tol).scale(std::abs(mx) + 1));
    CHECK(double(r.out / r.st.sum) == doctest::Approx(o / z).epsilon(tol * 10).scale(1));
  }
}

TEST_CASE("flash tiles: the kind of every kernel tile equals the elementwise mask") {
  auto check = [](const auto& m, index_t tq, index_t tk) {
    long none = 0, all_tiles = 0;
    for (index_t i0 = 0; i0 < tq; i0 += flash::query_tile)
      for (index_t j0 = 0; j0 < tk; j0 += flash::key_tile) {
        const index_t i1 = std::min(tq, i0 + flash::query_tile),
                      j1 = std::min(tk, j0 + flash::key_tile);
        const attn::TileKind got = m.tile(0, i0, i1, j0, j1, tq, tk);
        CHECK(got == attn::classify_elementwise(m, 0, i0, i1, j0, j1, tq, tk));
        none += got == attn::TileKind::none;
        ++all_tiles;
      }
    return double(none) / double(all_tiles);
  };
  for (const auto& size :
       {std::pair<index_t, index_t>{1, 1}, {37, 70}, {130, 97}, {200, 200}, {64, 32}, {31, 300}}) {
    const index_t tq = size.first, tk = size.second;  // (clang 14 cannot capture a binding)
    CAPTURE(tq);
    CAPTURE(tk);
    check(mask::None{}, tq, tk);
    check(mask::Causal{}, tq, tk);
    check(mask::CausalTopLeft{}, tq, tk);
    check(mask::SlidingWindow{5, 2}, tq, tk);
    check(mask::SlidingWindow{0, 0}, tq, tk);
    check(mask::SlidingWindow::causal(40), tq, tk);
  }
  // Skipping is real: at Tq = Tk = 512 (8 x 16 tiles) causal skips 56 tiles, a causal window of
  // 40 keys all but 30 (two tiles for the first query tile, four for each other one).
  CHECK(check(mask::Causal{}, 512, 512) == doctest::Approx(56.0 / 128));
  CHECK(check(mask::SlidingWindow::causal(40), 512, 512) == doctest::Approx(98.0 / 128));
  // Composed from its parts' tiles, the same window skips the same tiles.
  CHECK(check(mask::And{mask::Causal{}, mask::SlidingWindow::causal(40)}, 512, 512) ==
        doctest::Approx(98.0 / 128));
}

TEST_CASE("flash block programs: skipping tiles changes no bit and saves the mask's work") {
  const FlashProblem p = make_flash_problem({1, 2, 1, 200, 200, 8, 8}, 6, false);
  const auto q = as<float>(p.q), k = as<float>(p.k), v = as<float>(p.v), dout = as<float>(p.dout);
  auto run = [&](const auto& m) {
    const auto f = attn::emulate_flash_forward<float>(q, k, v, score::ScaledDot{}, m);
    const auto g = attn::emulate_flash_backward<float>(q, k, v, f, dout, score::ScaledDot{}, m);
    return std::tuple{f, g};
  };
  auto same = [&](const auto& m) {
    const auto [f1, g1] = run(m);
    const auto [f2, g2] = run(NoTileSkipping<std::decay_t<decltype(m)>>{m});
    CHECK(attn::max_abs_diff(f1.out, f2.out) == 0);
    CHECK(lse_difference(as<double>(f1.lse), as<double>(f2.lse)) == 0);
    CHECK(attn::max_abs_diff(g1.dq, g2.dq) == 0);
    CHECK(attn::max_abs_diff(g1.dk, g2.dk) == 0);
    CHECK(attn::max_abs_diff(g1.dv, g2.dv) == 0);
  };
  same(mask::Causal{});
  same(mask::CausalTopLeft{});
  same(mask::SlidingWindow{5, 2});
  same(mask::And{mask::Causal{}, mask::SlidingWindow{5, 2}});
  // Causal: allowed() is asked only inside the diagonal tiles (the forward: 7 of the 28 tiles of
  // each head, six of them whole and one 8 x 8 at the end), and only within the sequence.
  long calls = 0;
  CountingMask<mask::Causal> counting;
  counting.calls = &calls;
  attn::emulate_flash_forward<float>(q, k, v, score::ScaledDot{}, counting);
  CHECK(calls == 2 * (6 * flash::query_tile * flash::key_tile + 8 * 8));
}

namespace {

// Bounds on max |emulated − oracle|, relative to the oracle's largest value.
struct Bounds {
  double out, lse, dq, dk, dv;
};

// The block programs with elements T against the oracle, at every size of flash_sizes.
template <class T, class Score, class Mask>
void check_against_oracle(std::uint64_t seed, const Bounds& tol) {
  for (const FlashSize& z : flash_sizes) {
    CAPTURE(Score::name);
    CAPTURE(z.Tq);
    CAPTURE(z.Tk);
    const FlashProblem p = make_flash_problem(z, seed, std::is_same_v<T, bf16>);
    const Mask m = make_device_mask<Mask>();
    const FlashOracle ref = flash_oracle<Score>(p, m);
    const auto q = as<float>(p.q), k = as<float>(p.k), v = as<float>(p.v), dout = as<float>(p.dout);
    const auto f = attn::emulate_flash_forward<T>(q, k, v, Score{}, m);
    const auto g = attn::emulate_flash_backward<T>(q, k, v, f, dout, Score{}, m);
    CHECK(attn::max_abs_diff(as<double>(f.out), ref.out) < tol.out * magnitude(ref.out));
    CHECK(lse_difference(as<double>(f.lse), ref.lse) < tol.lse * magnitude(ref.lse));
    CHECK(attn::max_abs_diff(as<double>(g.dq), ref.dq) < tol.dq * magnitude(ref.dq));
    CHECK(attn::max_abs_diff(as<double>(g.dk), ref.dk) < tol.dk * magnitude(ref.dk));
    CHECK(attn::max_abs_diff(as<double>(g.dv), ref.dv) < tol.dv * magnitude(ref.dv));
  }
}

constexpr Bounds float_bounds{2e-5, 2e-5, 2e-5, 2e-5, 2e-5};

// max over every element of the inputs x of |analytic − central difference| / max(1, |analytic|),
// loss() reading x (step 1e-6).
template <std::size_t N, class Loss>
double worst_finite_difference(Tensor<double> (&x)[N], const Tensor<double>* const (&analytic)[N],
                               Loss&& loss) {
  const double eps = 1e-6;
  double worst = 0;
  for (std::size_t t = 0; t < N; ++t)
    for (index_t i = 0; i < x[t].numel(); ++i) {
      const double x0 = x[t][i];
      x[t][i] = x0 + eps;
      const double up = loss();
      x[t][i] = x0 - eps;
      const double down = loss();
      x[t][i] = x0;
      const double numeric = (up - down) / (2 * eps), a = (*analytic[t])[i];
      worst = std::max(worst, std::abs(a - numeric) / std::max({1.0, std::abs(a)}));
    }
  return worst;
}

// A soft cap that most scores of these problems reach (the default, 50, is far above them).
struct Capped : score::SoftCap<score::ScaledDot> {
  Capped() { cap = 1.5; }
};
// Outputs are rounded to bf16 (8 significant bits: half an ulp is 2^-9 relative); D = Σ dO∘O
// reads the rounded O, which moves dS by up to P |D| 2^-9, so dq and dk get a little more.
constexpr Bounds bf16_bounds{0x1p-8, 1e-5, 0x1p-6, 0x1p-6, 0x1p-8};

}  // namespace

TEST_CASE_TEMPLATE("flash block programs (float) equal the reference, every score and mask", Mask,
                   mask::None, mask::Causal, mask::CausalTopLeft, mask::SlidingWindow,
                   mask::And<mask::Causal, mask::SlidingWindow>) {
  check_against_oracle<float, score::Dot, Mask>(7, float_bounds);
  check_against_oracle<float, score::ScaledDot, Mask>(7, float_bounds);
  check_against_oracle<float, score::NegSqEuclidean, Mask>(7, float_bounds);
  check_against_oracle<float, Capped, Mask>(7, float_bounds);
}

TEST_CASE_TEMPLATE("flash block programs (bf16 in and out, float inside) equal the reference", Mask,
                   mask::None, mask::Causal) {
  check_against_oracle<bf16, score::ScaledDot, Mask>(8, bf16_bounds);
  check_against_oracle<bf16, score::NegSqEuclidean, Mask>(8, bf16_bounds);
}

TEST_CASE_TEMPLATE("flash block programs in double: gradients equal finite differences", Mask,
                   mask::None, mask::Causal, mask::SlidingWindow) {
  auto run = [](auto score) {
    using Score = decltype(score);
    // Two query tiles and two key tiles at the second size, so merges and skips are crossed.
    for (const FlashSize& z : {FlashSize{1, 2, 1, 9, 13, 3, 2}, FlashSize{1, 1, 1, 70, 40, 3, 2}}) {
      CAPTURE(Score::name);
      CAPTURE(z.Tq);
      const FlashProblem p = make_flash_problem(z, 9, false);
      const Mask m = make_device_mask<Mask>();
      Tensor<double> x[3] = {p.q, p.k, p.v};
      auto loss = [&] {
        const auto o = attn::emulate_flash_forward<double>(x[0], x[1], x[2], score, m).out;
        double l = 0;
        for (index_t i = 0; i < o.numel(); ++i) l += o[i] * p.dout[i];
        return l;
      };
      const auto f = attn::emulate_flash_forward<double>(p.q, p.k, p.v, score, m);
      const auto g = attn::emulate_flash_backward<double>(p.q, p.k, p.v, f, p.dout, score, m);
      const Tensor<double>* const analytic[3] = {&g.dq, &g.dk, &g.dv};
      CHECK(worst_finite_difference(x, analytic, loss) < 1e-6);
    }
  };
  run(score::Dot{});
  run(score::ScaledDot{});
  run(score::NegSqEuclidean{});
  run(Capped{});
}

namespace flash_sink_tests {

// One sink logit per head, of either sign and larger than most scores for some heads.
Tensor<double> sink_logits(index_t H) {
  Tensor<double> s(Shape{H});
  const double values[] = {0.5, -1.0, 2.5, 0.0};
  for (index_t h = 0; h < H; ++h) s[h] = values[h % 4];
  return s;
}

// The sinks through the CPU's own path in double (attention_sink of the fused partial, held to
// PyTorch by the attention tests): out, the full lse' (with the beta_q ‖q‖² term) and gradients.
template <class Score, class Mask>
struct SinkOracle {
  Tensor<double> out, lse, dq, dk, dv, dsinks;
  SinkOracle(const FlashProblem& p, const Mask& m, const Tensor<double>& sinks) {
    attn::Attention<Score, attn::kernel::Softmax, Mask> op{Score{}, attn::kernel::Softmax{}, m};
    attn::Tape<double> tape;
    auto q = tape.leaf(p.q, true), k = tape.leaf(p.k, true), v = tape.leaf(p.v, true);
    auto s = tape.leaf(sinks, true);
    const attn::AttentionPartial<double> r = attn::attention_sink(op.partial(q, k, v), s);
    out = r.output.value();
    lse = r.lse.value();
    tape.backward(sum(r.output * tape.leaf(p.dout)));
    dq = q.grad();
    dk = k.grad();
    dv = v.grad();
    dsinks = s.grad();
  }
};

// The emulation's lse with the beta_q ‖q‖² term the block programs leave out added back.
template <class Score>
Tensor<double> full_lse(const Tensor<float>& lse, const Tensor<double>& q) {
  Tensor<double> r = as<double>(lse);
  const index_t Dh = q.shape().last();
  for (index_t row = 0; row < r.numel(); ++row)
    if (Score::beta_q != 0 && !std::isinf(r[row]))
      r[row] += Score::beta_q * score::detail::dot(q.data() + row * Dh, q.data() + row * Dh, Dh);
  return r;
}

template <class Score, class Mask>
void check_sinks_against_cpu(std::uint64_t seed) {
  for (const FlashSize& z : flash_sizes) {
    CAPTURE(Score::name);
    CAPTURE(z.Tq);
    CAPTURE(z.Tk);
    const FlashProblem p = make_flash_problem(z, seed, false);
    const Mask m = make_device_mask<Mask>();
    const Tensor<double> sinks = sink_logits(z.H);
    const SinkOracle<Score, Mask> ref(p, m, sinks);
    const auto q = as<float>(p.q), k = as<float>(p.k), v = as<float>(p.v), dout = as<float>(p.dout);
    const auto sf = as<float>(sinks);
    const auto f = attn::emulate_flash_forward<float>(q, k, v, Score{}, m, 1, &sf);
    const auto g = attn::emulate_flash_backward<float>(q, k, v, f, dout, Score{}, m, 1, &sf);
    const double tol = 2e-5;
    CHECK(attn::max_abs_diff(as<double>(f.out), ref.out) < tol * magnitude(ref.out));
    CHECK(lse_difference(full_lse<Score>(f.lse, p.q), ref.lse) < tol * magnitude(ref.lse));
    CHECK(attn::max_abs_diff(as<double>(g.dq), ref.dq) < tol * magnitude(ref.dq));
    CHECK(attn::max_abs_diff(as<double>(g.dk), ref.dk) < tol * magnitude(ref.dk));
    CHECK(attn::max_abs_diff(as<double>(g.dv), ref.dv) < tol * magnitude(ref.dv));
    REQUIRE(g.dsinks.shape() == (Shape{z.H}));
    CHECK(attn::max_abs_diff(as<double>(g.dsinks), ref.dsinks) < tol * magnitude(ref.dsinks));
  }
}

}  // namespace flash_sink_tests

TEST_CASE_TEMPLATE("flash block programs with sinks equal attention_sink on the CPU", Mask,
                   mask::None, mask::Causal, mask::SlidingWindow) {
  // Causal with Tq > Tk leaves rows with no key: their output stays 0 and their lse' is σ_h.
  using namespace flash_sink_tests;
  check_sinks_against_cpu<score::ScaledDot, Mask>(12);
  check_sinks_against_cpu<score::NegSqEuclidean, Mask>(12);  // the sink meets the ‖q‖² term
  check_sinks_against_cpu<Capped, Mask>(12);
}

TEST_CASE("flash block programs with sinks in double: every gradient equals finite differences") {
  using namespace flash_sink_tests;
  auto run = [](auto score) {
    using Score = decltype(score);
    for (const FlashSize& z : {FlashSize{1, 2, 1, 9, 13, 3, 2}, FlashSize{2, 2, 1, 70, 40, 3, 2}}) {
      CAPTURE(Score::name);
      CAPTURE(z.Tq);
      const FlashProblem p = make_flash_problem(z, 13, false);
      const mask::Causal m;
      Tensor<double> x[4] = {p.q, p.k, p.v, sink_logits(z.H)};
      auto loss = [&] {
        const auto o =
            attn::emulate_flash_forward<double>(x[0], x[1], x[2], score, m, 1, &x[3]).out;
        double l = 0;
        for (index_t i = 0; i < o.numel(); ++i) l += o[i] * p.dout[i];
        return l;
      };
      const auto f = attn::emulate_flash_forward<double>(x[0], x[1], x[2], score, m, 1, &x[3]);
      const auto g =
          attn::emulate_flash_backward<double>(x[0], x[1], x[2], f, p.dout, score, m, 1, &x[3]);
      const Tensor<double>* const analytic[4] = {&g.dq, &g.dk, &g.dv, &g.dsinks};
      CHECK(worst_finite_difference(x, analytic, loss) < 1e-6);
    }
  };
  run(score::ScaledDot{});
  run(score::NegSqEuclidean{});
  run(Capped{});
}

TEST_CASE("flash block programs with sinks: many threads per block give the serial bits") {
  using namespace flash_sink_tests;
  const FlashSize z{2, 2, 1, 130, 97, 16, 8};
  const FlashProblem p = make_flash_problem(z, 14, false);
  const auto q = as<float>(p.q), k = as<float>(p.k), v = as<float>(p.v), dout = as<float>(p.dout);
  const auto sf = as<float>(sink_logits(z.H));
  const score::NegSqEuclidean s;
  const mask::Causal m;
  const auto f1 = attn::emulate_flash_forward<float>(q, k, v, s, m, 1, &sf);
  const auto g1 = attn::emulate_flash_backward<float>(q, k, v, f1, dout, s, m, 1, &sf);
  const auto f2 = attn::emulate_flash_forward<float>(q, k, v, s, m, 3, &sf);
  const auto g2 = attn::emulate_flash_backward<float>(q, k, v, f2, dout, s, m, 3, &sf);
  CHECK(attn::max_abs_diff(f1.out, f2.out) == 0);
  CHECK(attn::max_abs_diff(g1.dq, g2.dq) == 0);
  CHECK(attn::max_abs_diff(g1.dk, g2.dk) == 0);
  CHECK(attn::max_abs_diff(g1.dv, g2.dv) == 0);
  CHECK(attn::max_abs_diff(g1.dsinks, g2.dsinks) == 0);
  const Tensor<float> wrong(Shape{3});
  CHECK(message_of<attn::shape_error>([&] {
          attn::emulate_flash_forward<float>(q, k, v, s, m, 1, &wrong);
        }) == "flash_forward: sinks must be [2] (one logit per head), got [3]");
}

TEST_CASE("flash block programs refuse a soft cap that is not positive and finite") {
  const FlashProblem p = make_flash_problem(flash_sizes[1], 3, false);
  Capped bad;
  bad.cap = 0;
  CHECK(message_of<attn::value_error>([&] {
          (void)attn::emulate_flash_forward<float>(as<float>(p.q), as<float>(p.k), as<float>(p.v),
                                                   bad, mask::None{});
        }) == "flash_forward: the soft cap must be positive and finite, got 0");
}

TEST_CASE("flash block programs with many threads per block give the serial result bit for bit") {
  // The threads meet at a std::barrier wherever the GPU's meet at __syncthreads; a missing
  // barrier lets one thread read a tile another is still writing (or has not written: NaN).
  for (const int threads : {3, flash::block_threads}) {
    CAPTURE(threads);
    const FlashSize z =
        threads == 3 ? FlashSize{1, 2, 1, 130, 97, 16, 8} : FlashSize{1, 1, 1, 64, 64, 32, 32};
    const FlashProblem p = make_flash_problem(z, 10, false);
    const auto q = as<float>(p.q), k = as<float>(p.k), v = as<float>(p.v), dout = as<float>(p.dout);
    const score::NegSqEuclidean s;
    const mask::Causal m;
    const auto f1 = attn::emulate_flash_forward<float>(q, k, v, s, m);
    const auto g1 = attn::emulate_flash_backward<float>(q, k, v, f1, dout, s, m);
    const auto f2 = attn::emulate_flash_forward<float>(q, k, v, s, m, threads);
    const auto g2 = attn::emulate_flash_backward<float>(q, k, v, f2, dout, s, m, threads);
    CHECK(attn::max_abs_diff(f1.out, f2.out) == 0);
    CHECK(lse_difference(as<double>(f1.lse), as<double>(f2.lse)) == 0);
    CHECK(attn::max_abs_diff(g1.dq, g2.dq) == 0);
    CHECK(attn::max_abs_diff(g1.dk, g2.dk) == 0);
    CHECK(attn::max_abs_diff(g1.dv, g2.dv) == 0);
  }
}

TEST_CASE("flash emulation: bad shapes and masks throw, naming the operation") {
  attn::Rng rng(11);
  const auto q = Tensor<float>::randn({1, 2, 5, 4}, rng),
             k = Tensor<float>::randn({1, 1, 6, 4}, rng),
             v = Tensor<float>::randn({1, 1, 6, 3}, rng),
             k3 = Tensor<float>::randn({1, 1, 6, 3}, rng);
  CHECK(message_of<attn::shape_error>([&] {
          attn::emulate_flash_forward<float>(q, k3, v);
        }).find("flash_forward") != std::string::npos);
  const auto empty = Tensor<float>({1, 1, 6, 0});
  CHECK(message_of<attn::shape_error>([&] {
          attn::emulate_flash_forward<float>(q, k, empty);
        }).find("head widths") != std::string::npos);
  CHECK(message_of<attn::value_error>([&] {
          attn::emulate_flash_forward<float>(q, k, v, score::Dot{}, mask::SlidingWindow{-1, 0});
        }).find("SlidingWindow") != std::string::npos);
  const auto f = attn::emulate_flash_forward<float>(q, k, v);
  CHECK(message_of<attn::shape_error>([&] {
          attn::emulate_flash_backward<float>(q, k, v, f, Tensor<float>({1, 2, 5, 4}));
        }).find("flash_backward") != std::string::npos);
}
