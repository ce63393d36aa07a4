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
#include <algorithm>
#include <attn/approx/approx.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using attn::index_t;
namespace approx = attn::approx;

// Median over `reps` runs of the mean time per call, in µs, of f(query) over every query
// (after one warm-up pass).
template <class F>
double per_query_us(int reps, index_t queries, F&& f) {
  for (index_t qi = 0; qi < queries; ++qi) f(qi);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    for (index_t qi = 0; qi < queries; ++qi) f(qi);
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
                double(queries));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
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

  const double t_heads = per_query_us(reps, 1, [&](index_t) {
    const approx::HeadValues<float> hv(v.data(), L, d);
    sink = sink + hv.norm2(0);
  });
  const approx::HeadValues<float> values(v.data(), L, d);
  Vec o(d), s(L);
  const double t_sum = per_query_us(reps, queries, [&](index_t i) {
    o.noalias() = vm.transpose() * alpha.row(i).transpose();
    sink = sink + o(0);
  });
  const double t_attn = per_query_us(reps, queries, [&](index_t i) {
    s.noalias() = km * qm.row(i).transpose();
    s *= 1.0f / std::sqrt(float(d));
    s = (s.array() - s.maxCoeff()).exp();
    s /= s.sum();
    o.noalias() = vm.transpose() * s;
    sink = sink + o(0);
  });
  const double t_va1 = per_query_us(reps, queries, [&](index_t i) {
    sink = sink + double(approx::value_aware_1(row(alpha, i), values).index[0]);
  });
  const double t_va1o = per_query_us(reps, queries, [&](index_t i) {
    sink = sink + double(approx::value_aware_1(row(alpha, i), values, row(out, i)).index[0]);
  });
  const int slow_reps = std::max(1, reps / 2);
  index_t support = 0;
  double worst = 0;
  const double t_cara = per_query_us(slow_reps, queries, [&](index_t i) {
    const approx::Sparse sp = approx::caratheodory(row(alpha, i), values);
    support = std::max(support, sp.size());
    sink = sink + sp.weight[0];
  });
  for (index_t i = 0; i < queries; ++i) {
    const approx::Sparse sp = approx::caratheodory(row(alpha, i), values);
    worst = std::max(worst, std::sqrt(approx::squared_error(sp, row(alpha, i), values.v)) /
                                values.v.cast<double>().rowwise().norm().maxCoeff());
  }
  const double t_top = per_query_us(reps, queries, [&](index_t i) {
    sink = sink + double(approx::top_r(row(alpha, i), d + 1).size());
  });
  const double t_var = per_query_us(slow_reps, queries, [&](index_t i) {
    sink = sink + double(approx::value_aware_r(row(alpha, i), values, 16).size());
  });

  std::printf("L = %lld, d = %lld, %lld queries, median of %d (slow rows %d) passes\n",
              (long long)L, (long long)d, (long long)queries, reps, slow_reps);
  std::printf("  %-34s %10.2f us  (once per head)\n", "HeadValues (norms ‖v_i‖²)", t_heads);
  const auto line = [&](const char* name, double us) {
    std::printf("  %-34s %10.2f us  %6.2fx sum  %6.2fx attention\n", name, us, us / t_sum,
                us / t_attn);
  };
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
