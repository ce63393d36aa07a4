// benchmarks/attention.cpp: the attention operator, fused (online softmax) against the
// materialised path (per head: GEMM, softmax, GEMM — the plain implementation), forward and
// forward+backward, with GFLOP/s next to this machine's SGEMM rate measured in the same run.
//
//   bench_attention [--threads N] [--lengths 256,1024,2048,4096] [--reps R]
//                   [--score scaled_dot|alibi|rotary] [--kv-heads N]
//   bench_attention --memory T [--threads N]
//   bench_attention --plans [--threads N] [--lengths ...] [--reps R] [--kv-heads N]
//   bench_attention --exp [--reps R]
//   bench_attention --gpt [--threads N] [--reps R]
//
// --score picks the score: the scaled dot product (default); ALiBi's, the scaled dot product plus
// −m_h |i − j| inside the fused kernel ("Train Short, Test Long", Press, Smith and Lewis); or
// rotary ("RoFormer", Su et al.; adjacent pairs, base 10000), q and k rotated on the tape before
// the scaled dot product, the rotations timed with the attention. --kv-heads N gives k and v N
// heads of the 8 (N divides 8; grouped-query attention, "GQA", Ainslie et al.; 1: multi-query).
// FLOPs counted as 4·T²·Dh·H for the full forward (two GEMMs) and half that when causal; the
// backward is not counted (forward+backward columns are times only). --memory measures, first
// thing in a fresh process, how far one fused forward (no gradient) and then one materialised
// forward raise the peak resident set (getrusage ru_maxrss) above the inputs. --plans times the
// fused forward + backward under each forced backward plan (weights saved or recomputed x one
// pass or two), in interleaved rounds (per round and plan: one untimed call, then a timed one, so
// each plan is timed with the buffers its own previous step left, as in training; median per
// plan), so load that changes during the run affects them alike. --exp times the softmax row's
// exponential on this build's packets, one thread: exp_fast's packet form (pexp_float) against
// Eigen's pexp, ns per element over a 4096-float row held in L1 spread over [−20, 0] like scores
// minus their row's maximum, then with every seventh entry −∞ (masked). --gpt times the fused
// causal forward + backward at the attention shapes of the GPT configurations (gpt_configs.hpp:
// batch x heads x block x head width), one layer's attention in a training step, median of R.
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <attn/attn.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gpt_configs.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// Median wall time in ms of `reps` runs of f (after one warm-up run).
template <class F>
double median_ms(int reps, F&& f) {
  f();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double sgemm_gflops(int reps) {
  const attn::index_t n = 2048;
  attn::Rng rng(1);
  const auto a = attn::Tensor<float>::randn({n, n}, rng),
             b = attn::Tensor<float>::randn({n, n}, rng);
  attn::Tensor<float> c({n, n});
  const double ms =
      median_ms(reps, [&] { attn::gemm(a.data(), false, b.data(), false, c.data(), n, n, n); });
  return 2.0 * n * n * n / (ms * 1e6);
}

constexpr attn::index_t B = 1, H = 8, Dh = 64;

// Random normal q [B, H, T, Dh], k and v [B, kv_heads, T, Dh].
std::array<attn::Tensor<float>, 3> inputs(attn::index_t T, attn::index_t kv_heads = H) {
  attn::Rng rng(2);
  return {attn::Tensor<float>::randn({B, H, T, Dh}, rng),
          attn::Tensor<float>::randn({B, kv_heads, T, Dh}, rng),
          attn::Tensor<float>::randn({B, kv_heads, T, Dh}, rng)};
}

// The scores --score picks: the attention operator's score policy, and whether q and k are
// rotated first.
enum class ScoreChoice { scaled_dot, alibi, rotary };

template <class Score, class Mask>
void run(attn::index_t T, int reps, const char* mask_name, double gemm_rate, attn::index_t kv_heads,
         bool rotary) {
  const auto in = inputs(T, kv_heads);  // not a structured binding: lambdas capture q, k, v
  const attn::Tensor<float>&q = in[0], &k = in[1], &v = in[2];
  attn::Tape<float> tape;
  auto time = [&](bool materialized, bool backward) {
    const attn::Attention<Score, attn::kernel::Softmax, Mask> op;
    return median_ms(reps, [&] {
      tape.clear();
      auto qv = tape.leaf(q, backward), kv = tape.leaf(k, backward), vv = tape.leaf(v, backward);
      if (rotary) {
        qv = attn::rotary_rotation(qv, 0);
        kv = attn::rotary_rotation(kv, 0);
      }
      auto o = materialized ? op.materialized(qv, kv, vv) : op(qv, kv, vv);
      if (backward) tape.backward(attn::sum(o));
    });
  };
  const double flops =
      4.0 * double(T) * double(T) * Dh * H * (std::is_same_v<Mask, attn::mask::Causal> ? 0.5 : 1.0);
  const double fused = time(false, false);
  const double fused_bw = time(false, true);
  const bool run_plain = T <= 4096;
  const double plain = run_plain ? time(true, false) : 0;
  const double plain_bw = run_plain ? time(true, true) : 0;
  std::printf("%6lld %-7s | %9.1f %7.1f %5.0f%% | %9.1f | %9.1f %7.1f | %9.1f | %5.2fx %5.2fx\n",
              static_cast<long long>(T), mask_name, fused, flops / (fused * 1e6),
              100 * flops / (fused * 1e6) / gemm_rate, fused_bw, plain, flops / (plain * 1e6),
              plain_bw, plain / fused, plain_bw / fused_bw);
}

// Forward + backward of the fused path under each of the four forced backward plans.
template <class Mask>
void run_plans(attn::index_t T, int reps, const char* mask_name, attn::index_t kv_heads) {
  const auto in = inputs(T, kv_heads);  // not a structured binding: lambdas capture q, k, v
  const attn::Tensor<float>&q = in[0], &k = in[1], &v = in[2];
  attn::Tape<float> tape;
  const std::array<attn::AttentionBackward, 4> plans = {{
      {attn::BackwardWeights::saved, attn::BackwardPasses::single},
      {attn::BackwardWeights::saved, attn::BackwardPasses::two},
      {attn::BackwardWeights::recomputed, attn::BackwardPasses::single},
      {attn::BackwardWeights::recomputed, attn::BackwardPasses::two},
  }};
  auto step = [&](const attn::AttentionBackward& plan) {
    attn::Attention<attn::score::ScaledDot, attn::kernel::Softmax, Mask> op;
    op.backward = plan;
    tape.clear();
    auto qv = tape.leaf(q, true), kv = tape.leaf(k, true), vv = tape.leaf(v, true);
    tape.backward(attn::sum(op(qv, kv, vv)));
  };
  std::array<std::vector<double>, 4> t;
  for (int r = 0; r < reps; ++r)
    for (std::size_t p = 0; p < plans.size(); ++p) {
      step(plans[p]);  // untimed: the tape's buffers now fit this plan
      const auto t0 = Clock::now();
      step(plans[p]);
      t[p].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  std::printf("%6lld %-7s |", static_cast<long long>(T), mask_name);
  for (auto& x : t) {
    std::sort(x.begin(), x.end());
    std::printf(" %13.1f", x[x.size() / 2]);
  }
  // The walk a one-pass plan takes at this shape (attn::detail::backward_walk).
  const bool by_query_head =
      attn::detail::backward_walk(plans[0], {B, H, kv_heads, T, T, Dh, Dh}) ==
      attn::detail::BackwardWalk::by_query_head;
  std::printf(" | 1-pass by %s head\n", by_query_head ? "query" : "key/value");
}

// Peak resident set of this process so far, in MiB (Linux reports ru_maxrss in KiB).
double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

int memory(attn::index_t T) {
  const auto in = inputs(T);
  const attn::Tensor<float>&q = in[0], &k = in[1], &v = in[2];
  attn::Tape<float> tape;
  auto qv = tape.leaf(q), kv = tape.leaf(k), vv = tape.leaf(v);
  const double mib = 1.0 / (1024.0 * 1024.0), base = peak_rss_mib();
  attn::Attention<> op;
  const double out = op(qv, kv, vv).value()[0];
  const double fused = peak_rss_mib();
  const double out2 = op.materialized(qv, kv, vv).value()[0];
  const double plain = peak_rss_mib();
  std::printf(
      "T = %lld, B = 1, H = 8, Dh = 64, float, %d threads; q, k, v and their tape copies: %.1f "
      "MiB, peak RSS "
      "before the first forward %.1f MiB\n",
      static_cast<long long>(T), attn::num_threads(), 6.0 * double(B * H * T * Dh) * 4 * mib, base);
  std::printf(
      "  fused forward raised the peak by %.1f MiB (its output alone: %.1f MiB; one [T, T] float "
      "matrix: "
      "%.1f MiB)\n",
      fused - base, double(B * H * T * Dh) * 4 * mib, double(T) * double(T) * 4 * mib);
  std::printf("  materialised forward raised it by a further %.1f MiB (o[0] = %g, %g)\n",
              plain - fused, out, out2);
  return 0;
}

int exp_speed(int reps) {
  using namespace Eigen::internal;
  using P = attn::detail::Packet<float>;
  constexpr attn::index_t W = attn::detail::packet_size<float>;
  if constexpr (W == 1) {
    std::printf("--exp: this build has no vector packets (Eigen's vectorisation is off)\n");
    return 0;
  } else {
    constexpr attn::index_t n = 4096;
    constexpr int rounds = 2000;
    constexpr float ninf = -std::numeric_limits<float>::infinity();
    std::vector<float> in(n), out(n);
    volatile float sink = 0;
    auto ns = [&](auto&& exp) {
      return median_ms(reps,
                       [&] {
                         P sum = pset1<P>(0.0f);
                         for (int r = 0; r < rounds; ++r)
                           for (attn::index_t j = 0; j < n; j += W) {
                             const P e = exp(ploadu<P>(in.data() + j));
                             pstoreu(out.data() + j, e);
                             sum = padd(sum, e);
                           }
                         sink = sink + predux(sum);
                       }) *
             1e6 / (double(rounds) * n);
    };
    std::printf(
        "exp of a softmax row, float, %d per packet, 1 thread, ns per element (median of %d); "
        "exp_row_sum uses %s\n",
        int(W), reps, attn::detail::use_pexp_float<float> ? "pexp_float" : "Eigen's pexp");
    for (const int masked_every : {0, 7}) {
      for (attn::index_t j = 0; j < n; ++j)
        in[j] = masked_every && j % masked_every == 3 ? ninf : -20.0f * float(j) / float(n);
      const double fast = ns([](const P& x) { return attn::detail::pexp_float(x); });
      const double eigen = ns([](const P& x) { return attn::detail::pexp_masked(x); });
      std::printf("  %-24s pexp_float %.3f, Eigen's pexp %.3f (%.2fx)\n",
                  masked_every ? "every 7th entry -inf:" : "no -inf:", fast, eigen, eigen / fast);
    }
    return 0;
  }
}

int gpt_attention(int reps) {
  std::printf(
      "fused causal attention forward + backward at the GPT configurations' shapes, float, "
      "ScaledDot, "
      "%d threads, ms (median of %d)\n",
      attn::num_threads(), reps);
  std::printf("config |   B   H     T  Dh | one layer | all layers\n");
  for (const bench::GptShape& s : bench::gpt_shapes) {
    const attn::index_t dh = s.embd / s.heads;
    attn::Rng rng(2);
    const attn::Shape shape{s.batch, s.heads, s.block, dh};
    const auto q = attn::Tensor<float>::randn(shape, rng),
               k = attn::Tensor<float>::randn(shape, rng),
               v = attn::Tensor<float>::randn(shape, rng);
    attn::Tape<float> tape;
    const attn::Attention<attn::score::ScaledDot, attn::kernel::Softmax, attn::mask::Causal> op;
    const double ms = median_ms(reps, [&] {
      tape.clear();
      auto qv = tape.leaf(q, true), kv = tape.leaf(k, true), vv = tape.leaf(v, true);
      tape.backward(attn::sum(op(qv, kv, vv)));
    });
    std::printf("%-6s | %3lld %3lld %5lld %3lld | %9.2f | %10.2f\n", s.name,
                static_cast<long long>(s.batch), static_cast<long long>(s.heads),
                static_cast<long long>(s.block), static_cast<long long>(dh), ms,
                ms * double(s.layers));
  }
  return 0;
}

// The forward and forward + backward rows of every length, unmasked and causal, for one score.
template <class Score>
void run_lengths(const std::vector<attn::index_t>& lengths, int reps, double rate,
                 attn::index_t kv_heads, bool rotary) {
  for (const attn::index_t t : lengths) {
    run<Score, attn::mask::None>(t, reps, "none", rate, kv_heads, rotary);
    run<Score, attn::mask::Causal>(t, reps, "causal", rate, kv_heads, rotary);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, reps = 5;
  std::vector<attn::index_t> lengths{256, 1024, 2048, 4096};
  attn::index_t memory_length = 0;
  attn::index_t kv_heads = H;
  ScoreChoice score = ScoreChoice::scaled_dot;
  std::string score_name = "scaled_dot";
  bool plans = false, exp = false, gpt = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--plans") {
      plans = true;
    } else if (a == "--exp") {
      exp = true;
    } else if (a == "--gpt") {
      gpt = true;
    } else if (a == "--memory" && i + 1 < argc) {
      memory_length = std::atoll(argv[++i]);
    } else if (a == "--kv-heads" && i + 1 < argc) {
      kv_heads = std::atoll(argv[++i]);
      if (kv_heads < 1 || H % kv_heads != 0) {
        std::fprintf(stderr, "%s: --kv-heads %s must divide the %lld heads\n", argv[0], argv[i],
                     static_cast<long long>(H));
        return 2;
      }
    } else if (a == "--score" && i + 1 < argc) {
      score_name = argv[++i];
      if (score_name == "scaled_dot") {
        score = ScoreChoice::scaled_dot;
      } else if (score_name == "alibi") {
        score = ScoreChoice::alibi;
      } else if (score_name == "rotary") {
        score = ScoreChoice::rotary;
      } else {
        std::fprintf(stderr, "%s: --score %s is not scaled_dot, alibi or rotary\n", argv[0],
                     score_name.c_str());
        return 2;
      }
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--lengths" && i + 1 < argc) {
      lengths.clear();
      for (const char* p = argv[++i]; *p;) {
        lengths.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
        if (*p == ',') ++p;
      }
    } else {
      std::fprintf(
          stderr,
          "usage: %s [--plans] [--threads N] [--lengths 256,1024] [--reps R] [--score "
          "scaled_dot|alibi|rotary] [--kv-heads N] | --memory T | --exp [--reps R] | --gpt "
          "[--threads N] [--reps R]\n",
          argv[0]);
      return 2;
    }
  }
  attn::set_num_threads(threads);
  if (memory_length > 0) return memory(memory_length);
  if (exp) return exp_speed(reps);
  if (gpt) return gpt_attention(reps);
  if (plans) {
    std::printf(
        "fused attention forward + backward (ms, median of %d interleaved rounds) by backward "
        "plan, float, B = 1, H = 8, Dh = 64, %lld key/value heads, %d threads\n",
        reps, static_cast<long long>(kv_heads), threads);
    std::printf(
        "     T mask    |   saved 1-pass  saved 2-pass recomp 1-pass recomp 2-pass | walk\n");
    for (const attn::index_t t : lengths) {
      run_plans<attn::mask::None>(t, reps, "none", kv_heads);
      run_plans<attn::mask::Causal>(t, reps, "causal", kv_heads);
    }
    return 0;
  }
  const double rate = sgemm_gflops(reps);
  std::printf(
      "attention, float, B = 1, H = 8, Dh = 64, score %s, %lld key/value heads, %d threads; SGEMM "
      "(attn::gemm, n = 2048): %.1f GFLOP/s, %s\n",
      score_name.c_str(), static_cast<long long>(kv_heads), threads, rate,
      attn::gemm_backend_name().c_str());
  std::printf(
      "     T mask    |  fused ms  GFLOP/s %%GEMM | fused f+b | plain ms GFLOP/s | plain f+b | "
      "speedup fwd, f+b\n");
  switch (score) {
    case ScoreChoice::scaled_dot:
      run_lengths<attn::score::ScaledDot>(lengths, reps, rate, kv_heads, false);
      break;
    case ScoreChoice::alibi:
      run_lengths<attn::score::Alibi>(lengths, reps, rate, kv_heads, false);
      break;
    case ScoreChoice::rotary:
      run_lengths<attn::score::ScaledDot>(lengths, reps, rate, kv_heads, true);
      break;
  }
}
