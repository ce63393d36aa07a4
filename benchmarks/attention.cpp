// benchmarks/attention.cpp: the attention operator, fused (online softmax) against the
// materialised path (per head: GEMM, softmax, GEMM — the plain implementation), forward and
// forward+backward, with GFLOP/s next to this machine's SGEMM rate measured in the same run.
//
//   bench_attention [--threads N] [--lengths 256,1024,2048,4096] [--reps R]
//
// FLOPs counted as 4·T²·Dh·H for the full forward (two GEMMs) and half that when causal; the
// backward is not counted (forward+backward columns are times only).
#include <algorithm>
#include <attn/attn.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

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
  const auto a = attn::Tensor<float>::randn({n, n}, rng), b = attn::Tensor<float>::randn({n, n}, rng);
  attn::Tensor<float> c({n, n});
  const double ms = median_ms(reps, [&] { attn::gemm(a.data(), false, b.data(), false, c.data(), n, n, n); });
  return 2.0 * n * n * n / (ms * 1e6);
}

template <class Mask>
void run(attn::index_t T, int reps, const char* mask_name, double gemm_rate) {
  const attn::index_t B = 1, H = 8, Dh = 64;
  attn::Rng rng(2);
  const auto q = attn::Tensor<float>::randn({B, H, T, Dh}, rng), k = attn::Tensor<float>::randn({B, H, T, Dh}, rng),
             v = attn::Tensor<float>::randn({B, H, T, Dh}, rng);
  attn::Tape<float> tape;
  auto time = [&](attn::AttentionPath path, bool backward) {
    attn::Attention<attn::score::ScaledDot, attn::kernel::Softmax, Mask> op;
    op.path = path;
    return median_ms(reps, [&] {
      tape.clear();
      auto qv = tape.leaf(q, backward), kv = tape.leaf(k, backward), vv = tape.leaf(v, backward);
      auto o = op(qv, kv, vv);
      if (backward) tape.backward(attn::sum(o));
    });
  };
  const double flops = 4.0 * double(T) * double(T) * Dh * H * (std::is_same_v<Mask, attn::mask::Causal> ? 0.5 : 1.0);
  const double fused = time(attn::AttentionPath::automatic, false);
  const double fused_bw = time(attn::AttentionPath::automatic, true);
  const bool run_plain = T <= 4096;
  const double plain = run_plain ? time(attn::AttentionPath::materialized, false) : 0;
  const double plain_bw = run_plain ? time(attn::AttentionPath::materialized, true) : 0;
  std::printf("%6lld %-7s | %9.1f %7.1f %5.0f%% | %9.1f | %9.1f %7.1f | %9.1f | %5.2fx %5.2fx\n",
              static_cast<long long>(T), mask_name, fused, flops / (fused * 1e6), 100 * flops / (fused * 1e6) / gemm_rate,
              fused_bw, plain, flops / (plain * 1e6), plain_bw, plain / fused, plain_bw / fused_bw);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, reps = 5;
  std::vector<attn::index_t> lengths{256, 1024, 2048, 4096};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--lengths" && i + 1 < argc) {
      lengths.clear();
      for (const char* p = argv[++i]; *p;) {
        lengths.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
        if (*p == ',') ++p;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--threads N] [--lengths 256,1024] [--reps R]\n", argv[0]);
      return 2;
    }
  }
  attn::set_num_threads(threads);
  const double rate = sgemm_gflops(reps);
  std::printf("attention, float, B = 1, H = 8, Dh = 64, %d threads; SGEMM (attn::gemm, n = 2048): %.1f GFLOP/s\n",
              threads, rate);
  std::printf("     T mask    |  fused ms  GFLOP/s %%GEMM | fused f+b | plain ms GFLOP/s | plain f+b | speedup fwd, f+b\n");
  for (const attn::index_t t : lengths) {
    run<attn::mask::None>(t, reps, "none", rate);
    run<attn::mask::Causal>(t, reps, "causal", rate);
  }
}
