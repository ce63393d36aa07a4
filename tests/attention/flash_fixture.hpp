// Shared by the fused-kernel tests: the host emulation (test_flash_block.cpp, plain C++) and the
// GPU tests (tests/cuda/test_cuda.cu). Random problems, and the CPU oracle in double: the
// reference attention for the output, the log-sum-exp by its definition, and the gradients from
// the tape (the materialised path, itself held to finite differences by the attention tests).
// Does not hold doctest cases.
#pragma once

#include <algorithm>
#include <attn/attention/attention.hpp>
#include <attn/attention/flash_block.hpp>
#include <attn/attention/reference.hpp>
#include <cmath>
#include <limits>
#include <type_traits>

namespace attn::test {

struct FlashSize {
  index_t B, H, Hk, Tq, Tk, Dh, Dv;
};

// One position; grouped-query heads with Tq != Tk; odd lengths and widths; several query and
// key tiles with Tq > Tk (end-aligned causal then leaves the first rows with no key at all);
// whole 64-wide tiles at a realistic head width.
inline constexpr FlashSize flash_sizes[] = {{1, 1, 1, 1, 1, 4, 3},
                                            {1, 2, 1, 9, 13, 3, 2},
                                            {2, 2, 2, 37, 70, 5, 6},
                                            {1, 4, 2, 130, 97, 16, 8},
                                            {1, 1, 1, 64, 64, 64, 64}};

// The device masks the tests run (SlidingWindow with a band that cuts through tiles; And / Or
// from their parts).
template <class Mask>
Mask make_device_mask() {
  if constexpr (requires(Mask m) { m.first, m.second; })
    return Mask{make_device_mask<decltype(Mask::first)>(),
                make_device_mask<decltype(Mask::second)>()};
  else if constexpr (std::is_same_v<Mask, mask::SlidingWindow>)
    return mask::SlidingWindow{5, 2};
  else
    return Mask{};
}

// A tensor converted element by element (attn::cast under a short name).
template <class A, class B>
Tensor<A> as(const Tensor<B>& t) {
  return cast<A>(t);
}

struct FlashProblem {
  FlashSize z;
  Tensor<double> q, k, v, dout;
};

// Random q, k, v, dout; with `bf16_inputs` every value is rounded to bf16 first, so the oracle
// sees exactly what a bf16 kernel sees.
inline FlashProblem make_flash_problem(const FlashSize& z, std::uint64_t seed, bool bf16_inputs) {
  Rng rng(seed);
  FlashProblem p{z, Tensor<double>::randn({z.B, z.H, z.Tq, z.Dh}, rng, 0, 0.8),
                 Tensor<double>::randn({z.B, z.Hk, z.Tk, z.Dh}, rng, 0, 0.8),
                 Tensor<double>::randn({z.B, z.Hk, z.Tk, z.Dv}, rng),
                 Tensor<double>::randn({z.B, z.H, z.Tq, z.Dv}, rng)};
  if (bf16_inputs)
    for (Tensor<double>* t : {&p.q, &p.k, &p.v, &p.dout})
      for (double& x : *t) x = element_cast<double>(element_cast<bf16>(x));
  return p;
}

struct FlashOracle {
  Tensor<double> out, lse, dq, dk, dv;
};

// The largest |x| (at least 1): tolerances scale with it.
inline double magnitude(const Tensor<double>& t) {
  double m = 1;
  for (const double x : t) m = std::max(m, std::abs(x));
  return m;
}

template <ScorePolicy Score, MaskPolicy Mask>
FlashOracle flash_oracle(const FlashProblem& p, const Mask& m) {
  const FlashSize& z = p.z;
  FlashOracle r;
  r.out = reference_attention(p.q, p.k, p.v, Score{}, kernel::Softmax{}, m).out;
  // lse_i = log Σ_{j allowed} e^{s_ij − beta_q ‖q_i‖²}: the kernels leave out the beta_q term (s
  // through the score's soft cap, if it has one).
  r.lse = Tensor<double>(Shape{z.B, z.H, z.Tq});
  const Score score{};
  for (index_t b = 0; b < z.B; ++b)
    for (index_t h = 0; h < z.H; ++h)
      for (index_t i = 0; i < z.Tq; ++i) {
        const double* q = p.q.data() + ((b * z.H + h) * z.Tq + i) * z.Dh;
        const double qq = score::detail::dot(q, q, z.Dh);
        double mx = -std::numeric_limits<double>::infinity(), sum = 0;
        auto s = [&](index_t j) {
          const double* k = p.k.data() + ((b * z.Hk + h / (z.H / z.Hk)) * z.Tk + j) * z.Dh;
          return soft_capped(score, score(q, k, z.Dh) - Score::beta_q * qq);
        };
        for (index_t j = 0; j < z.Tk; ++j)
          if (m.allowed(b, i, j, z.Tq, z.Tk)) mx = std::max(mx, s(j));
        for (index_t j = 0; j < z.Tk; ++j)
          if (m.allowed(b, i, j, z.Tq, z.Tk)) sum += std::exp(s(j) - mx);
        r.lse(b, h, i) = sum > 0 ? mx + std::log(sum) : -std::numeric_limits<double>::infinity();
      }
  Attention<Score, kernel::Softmax, Mask> op{Score{}, kernel::Softmax{}, m};
  Tape<double> tape;
  auto q = tape.leaf(p.q, true), k = tape.leaf(p.k, true), v = tape.leaf(p.v, true);
  tape.backward(sum(op.materialized(q, k, v) * tape.leaf(p.dout)));
  r.dq = q.grad();
  r.dk = k.grad();
  r.dv = v.grad();
  return r;
}

// max |a − b| over the elements, treating −∞ = −∞ as equal (rows with no allowed key).
inline double lse_difference(const Tensor<double>& a, const Tensor<double>& b) {
  double worst = 0;
  for (index_t i = 0; i < a.numel(); ++i) {
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return std::numeric_limits<double>::infinity();
      continue;
    }
    const double d = std::abs(a[i] - b[i]);
    if (std::isnan(d)) return d;
    worst = std::max(worst, d);
  }
  return worst;
}

}  // namespace attn::test
