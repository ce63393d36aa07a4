// benchmarks/approx.cpp: the per-query cost of the value-aware oracles against the exact
// attention output, one query at a time on one thread, float values of width d:
//   exact Σα_i v_i      o = Vᵀα from given weights (the weighted sum alone)
//   exact attention     from the query: s = Kq/√d, softmax, o = Vᵀα (what a query costs)
//   value_aware_1       from α: o = Vᵀα, then argmin ½‖v_i‖² − ⟨v_i, o⟩ (V o)
//   value_aware_1 | o   given the exact output (the model has it): V o only
//   caratheodory        reduction to <= d + 1 values (double inside)
//   top_r, value_aware_r(r = 16)   for scale
// ‖v_i‖² is computed once per head (HeadValues) and reported on its own line.
//
//   bench_approx [--lengths 512,4096] [--dim 64] [--queries 32] [--reps 5]
//
// Both wall time and the thread's CPU time are printed; ratios use CPU time, which a shared
// machine disturbs less.
#include <algorithm>
#include <attn/approx/approx.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <span>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using attn::index_t;
namespace approx = attn::approx;

// CPU time of the calling thread, µs: on a shared machine it counts only the time this thread
// ran, where wall time also counts the time others ran on its core.
double thread_cpu_us() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e6 + double(t.tv_nsec) * 1e-3;
}

struct Time {
  double wall = 0, cpu = 0;  // µs per query
};

// Medians over `reps` passes of the mean wall and CPU time per call of f(query) over every
// query (after one warm-up pass).
template <class F>
Time per_query(int reps, index_t queries, F&& f) {
  for (index_t qi = 0; qi < queries; ++qi) f(qi);
  std::vector<double> wall, cpu;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    const double c0 = thread_cpu_us();
    for (index_t qi = 0; qi < queries; ++qi) f(qi);
    cpu.push_back((thread_cpu_us() - c0) / double(queries));
    wall.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
                   double(queries));
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], cpu[cpu.size() / 2]};
}

volatile double sink = 0;  // keeps results alive

void run(index_t L, index_t d, index_t queries, int reps) {
  attn::Rng rng(7);
  const auto k = attn::Tensor<float>::randn({L, d}, rng);
  const auto v = attn::Tensor<float>::randn({L, d}, rng);
  const auto q = attn::Tensor<float>::randn({queries, d}, rng);
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Vec = Eigen::VectorXf;
  const Eigen::Map<const Mat> km(k.data(), L, d), vm(v.data(), L, d), qm(q.data(), queries, d);
  // Each query's softmax weights and exact output.
  Mat alpha(queries, L), out(queries, d);
  for (index_t i = 0; i < queries; ++i) {
    Vec s = km * qm.row(i).transpose() / std::sqrt(float(d));
    s = (s.array() - s.maxCoeff()).exp();
    alpha.row(i) = s.transpose() / s.sum();
    out.row(i) = (vm.transpose() * alpha.row(i).transpose()).transpose();
  }
  const auto row = [&](const Mat& m, index_t i) {
    return std::span<const float>(m.data() + i * m.cols(), std::size_t(m.cols()));
  };

  const Time t_heads = per_query(reps, 1, [&](index_t) {
    const approx::HeadValues<float> hv(v.data(), L, d);
    sink = sink + hv.norm2(0);
  });
  const approx::HeadValues<float> values(v.data(), L, d);
  Vec o(d), s(L);
  const Time t_sum = per_query(reps, queries, [&](index_t i) {
    o.noalias() = vm.transpose() * alpha.row(i).transpose();
    sink = sink + o(0);
  });
  const Time t_attn = per_query(reps, queries, [&](index_t i) {
    s.noalias() = km * qm.row(i).transpose();
    s *= 1.0f / std::sqrt(float(d));
    s = (s.array() - s.maxCoeff()).exp();
    s /= s.sum();
    o.noalias() = vm.transpose() * s;
    sink = sink + o(0);
  });
  const Time t_va1 = per_query(reps, queries, [&](index_t i) {
    sink = sink + double(approx::value_aware_1(row(alpha, i), values).index[0]);
  });
  const Time t_va1o = per_query(reps, queries, [&](index_t i) {
    sink = sink + double(approx::value_aware_1(row(alpha, i), values, row(out, i)).index[0]);
  });
  const int slow_reps = std::max(1, reps / 2);
  index_t support = 0;
  double worst = 0;
  const Time t_cara = per_query(slow_reps, queries, [&](index_t i) {
    const approx::Sparse sp = approx::caratheodory(row(alpha, i), values);
    support = std::max(support, sp.size());
    sink = sink + sp.weight[0];
  });
  for (index_t i = 0; i < queries; ++i) {
    const approx::Sparse sp = approx::caratheodory(row(alpha, i), values);
    worst = std::max(worst, std::sqrt(approx::squared_error(sp, row(alpha, i), values.v)) /
                                values.v.cast<double>().rowwise().norm().maxCoeff());
  }
  const Time t_top = per_query(reps, queries, [&](index_t i) {
    sink = sink + double(approx::top_r(row(alpha, i), d + 1).size());
  });
  const Time t_var = per_query(slow_reps, queries, [&](index_t i) {
    sink = sink + double(approx::value_aware_r(row(alpha, i), values, 16).size());
  });

  std::printf("L = %lld, d = %lld, %lld queries, median of %d (slow rows %d) passes\n",
              (long long)L, (long long)d, (long long)queries, reps, slow_reps);
  std::printf("  %-34s %10s %10s | CPU time / exact Σα_i v_i, / exact attention\n", "", "wall us",
              "CPU us");
  const auto line = [&](const char* name, Time t) {
    std::printf("  %-34s %10.2f %10.2f | %8.2fx %8.2fx\n", name, t.wall, t.cpu, t.cpu / t_sum.cpu,
                t.cpu / t_attn.cpu);
  };
  line("HeadValues (‖v_i‖², once per head)", t_heads);
  line("exact Σα_i v_i (given α)", t_sum);
  line("exact attention (from q)", t_attn);
  line("value_aware_1 (from α)", t_va1);
  line("value_aware_1 (given o)", t_va1o);
  line("top_r, r = d + 1", t_top);
  line("value_aware_r, r = 16 (heuristic)", t_var);
  line("caratheodory", t_cara);
  std::printf("  caratheodory: largest support %lld (d + 1 = %lld), largest error / max‖v‖ %.2e\n",
              (long long)support, (long long)(d + 1), worst);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<index_t> lengths{512, 4096};
  index_t d = 64, queries = 32;
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--lengths" && i + 1 < argc) {
      lengths.clear();
      for (const char* p = argv[++i]; *p;) {
        lengths.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
        if (*p == ',') ++p;
      }
    } else if (a == "--dim" && i + 1 < argc) {
      d = std::atoll(argv[++i]);
    } else if (a == "--queries" && i + 1 < argc) {
      queries = std::atoll(argv[++i]);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--lengths 512,4096] [--dim 64] [--queries 32] [--reps 5]\n",
                   argv[0]);
      return 2;
    }
  }
  attn::set_num_threads(1);
  std::printf("approx per-query costs, float values, one thread\n");
  for (const index_t L : lengths) run(L, d, queries, reps);
}
