// benchmarks/hull.cpp: vertex detection for the convex hull of keys, Qhull (analysis/hull.hpp)
// against certified_vertices (analysis/certified.hpp), on Gaussian keys and on "realistic" keys
// (a shared offset, per-dimension scales, per-key log-normal norms:
// tests/analysis/keys_fixture.hpp), N in {64, 128, 512}, d in {4, 8, 16, 64}, one thread. Prints a
// table with the ratio.
//
//   bench_hull [--reps R] [--qhull-limit S] [--sizes 64,128,512] [--dims 4,8,16,64] [--sigma s]
//
// Times are medians over R runs (after a warm-up) of the thread's CPU time (so other processes on
// a shared machine slow them less than wall time) and of wall time. Qhull runs for d <= 8 only,
// once per configuration when one run takes longer than 1 s, and not at all for a (kind, d) once
// a smaller N took more than S seconds (default 60). Both results are compared key for key, and
// every certificate is verified by check_certificates (outside the timing).
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <attn/analysis/hull.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "../tests/analysis/keys_fixture.hpp"

namespace {

using attn::index_t;

struct Times {
  double cpu_ms = 0, wall_ms = 0;
};

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Medians of `reps` runs after one warm-up run; a single run when the warm-up took > 1 s.
template <class F>
Times measure(int reps, F&& f) {
  std::vector<double> cpu, wall;
  const auto once = [&] {
    const double c0 = thread_cpu_seconds();
    const auto w0 = std::chrono::steady_clock::now();
    f();
    wall.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count());
    cpu.push_back((thread_cpu_seconds() - c0) * 1e3);
  };
  once();
  if (wall.back() < 1000) {
    cpu.clear(), wall.clear();
    for (int r = 0; r < reps; ++r) once();
  }
  std::sort(cpu.begin(), cpu.end());
  std::sort(wall.begin(), wall.end());
  return {cpu[cpu.size() / 2], wall[wall.size() / 2]};
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  double qhull_limit = 60, sigma = 1.0;
  std::vector<index_t> sizes{64, 128, 512}, dims{4, 8, 16, 64};
  CLI::App app{"bench_hull: certified_vertices against Qhull, one thread"};
  app.add_option("--reps", reps, "timed runs per configuration (median)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--qhull-limit", qhull_limit,
                 "seconds after which Qhull stops for larger N of a (kind, d)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--sizes", sizes, "key counts N")
      ->delimiter(',')
      ->check(CLI::Range(index_t{1}, index_t{1} << 20));
  app.add_option("--dims", dims, "dimensions d")
      ->delimiter(',')
      ->check(CLI::Range(index_t{1}, index_t{4096}));
  app.add_option("--sigma", sigma, "log-normal spread of the realistic keys' norms")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  attn::set_num_threads(1);
  std::printf("vertex detection, one thread; times: median CPU ms (wall ms) of %d runs\n", reps);
  std::printf("%-9s %5s %4s | %8s %9s | %17s %17s %8s | %s\n", "keys", "N", "d", "vertices",
              "interior", "certified", "qhull", "ratio",
              "certified: vertices by whitened/random/min-norm (iterations), interior by simplex");
  bool agree = true;
  for (int kind = 0; kind < 2; ++kind)
    for (const index_t d : dims) {
      bool qhull_too_slow = d > 8;
      for (const index_t n : sizes) {
        attn::Rng rng(std::uint64_t(1000 * kind + 10 * d + n));
        const attn::Tensor<double> keys = kind == 0 ? attn::test::gaussian_keys(n, d, rng)
                                                    : attn::test::realistic_keys(n, d, rng, sigma);
        attn::analysis::CertifiedVertices c;
        const Times tc = measure(reps, [&] { c = attn::analysis::certified_vertices(keys); });
        const auto check = attn::analysis::check_certificates(keys, c);
        if (!check.ok) {
          std::printf("CERTIFICATE CHECK FAILED: %s\n", check.failure.c_str());
          agree = false;
        }
        char qh[64] = "-", ratio[32] = "-";
        if (!qhull_too_slow) {
          std::vector<index_t> v;
          const Times tq = measure(reps, [&] { v = attn::analysis::hull_vertices(keys); });
          if (v != c.vertices) {
            std::printf("QHULL AND CERTIFIED DISAGREE (%zu vs %zu vertices)\n", v.size(),
                        c.vertices.size());
            agree = false;
          }
          std::snprintf(qh, sizeof qh, "%8.2f (%7.2f)", tq.cpu_ms, tq.wall_ms);
          std::snprintf(ratio, sizeof ratio, "%7.1fx", tq.cpu_ms / tc.cpu_ms);
          qhull_too_slow = tq.wall_ms > 1000 * qhull_limit;
        }
        std::printf(
            "%-9s %5lld %4lld | %8zu %9lld | %8.2f (%6.2f) %17s %8s | %lld/%lld/%lld (%lld), "
            "%lld\n",
            kind == 0 ? "gaussian" : "realistic", (long long)n, (long long)d, c.vertices.size(),
            (long long)c.interior, tc.cpu_ms, tc.wall_ms, qh, ratio, (long long)c.by_whitened,
            (long long)c.by_random, (long long)c.by_min_norm, (long long)c.min_norm_iterations,
            (long long)c.by_simplex);
        std::fflush(stdout);
      }
    }
  std::printf("%s\n",
              agree ? "every certificate verified; Qhull and certified agree wherever Qhull ran"
                    : "DISAGREEMENT (see above)");
  return agree ? 0 : 1;
}
