// examples/exercises: the classic attention exercises (XCS224N problem set 5, question 3, and the
// √d scaling of "Attention is all you need") as a program: each section explains the claim,
// computes it with attn and prints the numbers, with a terminal heatmap of the weights.
// Does not prove anything by itself: tests/teaching/test_exercises.cpp asserts every claim, with
// the same code (exercises.hpp).
#include <CLI/CLI.hpp>
#include <attn/train/plot.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "../common/cli.hpp"
#include "exercises.hpp"

namespace {

namespace plot = attn::train::plot;

using exercises::index_t;
using exercises::Matrix;
using exercises::Vector;

struct Options {
  std::vector<int> only;  // sections to run (empty: all)
  std::uint64_t seed = 1;
  index_t dim = 8;     // d of exercises 1 to 5
  index_t keys = 5;    // n of exercises 1 to 4
  int samples = 2000;  // key samples in exercises 3 and 4
  double beta = 20;    // the "large" query scale of exercises 3 and 4
  int trials = 400;    // exercise 6: random (q, K) draws per d
};

void section(int number, const char* title, const char* explanation) {
  std::printf("\n== %d. %s ==\n%s\n\n", number, title, explanation);
}

std::string vec(const Vector& v, int show = 4) {
  std::string s = "(";
  char buf[32];
  for (int i = 0; i < std::min<int>(show, int(v.size())); ++i) {
    std::snprintf(buf, sizeof buf, "%s%+.3f", i ? ", " : "", v[i]);
    s += buf;
  }
  return s + (v.size() > show ? ", ...)" : ")");
}

plot::Heatmap heatmap(const Matrix& w, std::vector<std::string> rows,
                      std::vector<std::string> cols) {
  plot::Heatmap h{
      {}, std::size_t(w.rows()), std::size_t(w.cols()), std::move(rows), std::move(cols)};
  for (index_t r = 0; r < w.rows(); ++r)
    for (index_t c = 0; c < w.cols(); ++c) h.values.push_back(w(r, c));
  return h;
}

std::vector<std::string> numbered(const char* prefix, index_t n) {
  std::vector<std::string> v;
  for (index_t i = 1; i <= n; ++i) v.push_back(prefix + std::to_string(i));
  return v;
}

void copying(const Options& o, attn::Rng& rng) {
  section(1, "Copying",
          "With q = beta * k_j the scores are beta * k_i.k_j. When k_j is the key most aligned\n"
          "with itself (gap = min_i k_j.(k_j - k_i) > 0), every other weight is at most\n"
          "exp(-beta * gap), so c = sum_i alpha_i v_i -> v_j exponentially fast in beta:\n"
          "  |c - v_j| <= (n - 1) exp(-beta * gap) max_i |v_i - v_j|.\n"
          "Keys and values here are random Gaussian vectors; j is the key of largest norm.");
  const Matrix keys = exercises::gaussian_rows(o.keys, o.dim, rng);
  const Matrix values = exercises::gaussian_rows(o.keys, o.dim, rng);
  index_t j = 0;
  for (index_t i = 1; i < keys.rows(); ++i)
    if (keys.row(i).norm() > keys.row(j).norm()) j = i;
  std::printf("j = %lld, gap = %.3f\n\n", static_cast<long long>(j + 1),
              exercises::copy_gap(keys, j));
  std::printf("%8s %10s %12s %12s\n", "beta", "alpha_j", "|c - v_j|", "bound");
  const auto rows = exercises::copying(keys, values, j, {0, 0.25, 0.5, 1, 2, 4, 8});
  for (const auto& r : rows)
    std::printf("%8.2f %10.6f %12.3e %12.3e\n", r.beta, r.weight, r.error, r.bound);
  Matrix w(index_t(rows.size()), keys.rows());
  std::vector<std::string> labels;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    Vector alpha;
    exercises::attend_one(rows[r].beta * keys.row(j).transpose(), keys, values, &alpha);
    w.row(index_t(r)) = alpha.transpose();
    char buf[32];
    std::snprintf(buf, sizeof buf, "beta=%g", rows[r].beta);
    labels.push_back(buf);
  }
  std::printf("\nweights alpha_i (one row per beta):\n%s",
              plot::ascii_heatmap(heatmap(w, labels, numbered("k", keys.rows()))).c_str());
}

void average(const Options& o, attn::Rng& rng) {
  section(2, "An average of two",
          "Orthonormal keys and q = beta (k_a + k_b): the scores are beta for a and b, 0 for the\n"
          "rest, so alpha_a = alpha_b exactly and c -> (v_a + v_b) / 2 as beta grows:\n"
          "  |c - (v_a + v_b)/2| <= (n - 2) / (2 e^beta + n - 2) max_i |v_i - (v_a + v_b)/2|.");
  const Matrix keys = exercises::orthonormal_rows(o.keys, o.dim, rng);
  const Matrix values = exercises::gaussian_rows(o.keys, o.dim, rng);
  std::printf("%8s %10s %10s %14s %12s\n", "beta", "alpha_a", "alpha_b", "|c - avg|", "bound");
  for (const auto& r : exercises::average_of_two(keys, values, 0, 1, {0, 1, 2, 4, 8, 16}))
    std::printf("%8.1f %10.6f %10.6f %14.3e %12.3e\n", r.beta, r.weight_a, r.weight_b, r.error,
                r.bound);
}

void print_histogram(const std::vector<int>& h) {
  int total = 0, peak = 1;
  for (const int c : h) total += c, peak = std::max(peak, c);
  for (std::size_t b = 0; b < h.size(); ++b) {
    const double lo = double(b) / double(h.size()), hi = double(b + 1) / double(h.size());
    std::printf("  [%.1f, %.1f%s %5.1f%% %s\n", lo, hi, b + 1 == h.size() ? "]" : ")",
                100.0 * h[b] / std::max(total, 1),
                std::string(std::size_t(50 * h[b] / peak), '#').c_str());
  }
}

// Means, values and the tolerance of sections 3 and 4.
struct NoisySetup {
  Matrix means, values;
  double eps = 1e-6;
  double tol = 0;  // "close to the average": within 0.1 |v_a - v_b|
};

NoisySetup noisy_setup(const Options& o, attn::Rng& rng) {
  NoisySetup s{exercises::orthonormal_rows(o.keys, o.dim, rng),
               exercises::gaussian_rows(o.keys, o.dim, rng)};
  s.tol = 0.1 * (s.values.row(0) - s.values.row(1)).norm();
  return s;
}

void fragility(const Options& o, attn::Rng& rng) {
  section(
      3, "The fragility of one head",
      "Keys k_i ~ N(mu_i, Sigma_i) with orthonormal means and q = beta (mu_a + mu_b).\n"
      "With Sigma_i = eps I (eps tiny) the scores stay close to beta, beta, 0, ... and c stays\n"
      "close to (v_a + v_b)/2. With Sigma_a = eps I + mu_a mu_a^T / 2, k_a ~ gamma mu_a has a\n"
      "random length gamma ~ N(1, 1/2): alpha_a / alpha_b = exp(beta (gamma - 1)), so for\n"
      "large beta c jumps to ~v_a when gamma > 1 and to ~v_b when gamma < 1.\n"
      "Printed: the distribution of t = alpha_a / (alpha_a + alpha_b) over the samples\n"
      "(c ~ t v_a + (1 - t) v_b); t = 0.5 is the average the query was built for.");
  const NoisySetup setup = noisy_setup(o, rng);
  for (const bool vary : {false, true}) {
    const auto nk = exercises::noisy_keys(setup.means, setup.values, 0, 1, setup.eps, vary);
    const auto s = exercises::one_head(nk, o.beta, o.samples, rng);
    std::printf("%s, beta = %g, %d samples:\n",
                vary ? "Sigma_a = eps I + mu_a mu_a^T / 2" : "Sigma_i = eps I (eps = 1e-6)", o.beta,
                o.samples);
    print_histogram(exercises::share_histogram(s, 10, false));
    std::printf("  output within 0.1 |v_a - v_b| of (v_a + v_b)/2 in %.1f%% of the samples\n\n",
                100 * exercises::fraction_near_average(s, setup.tol));
  }
}

void two_heads(const Options& o, attn::Rng& rng) {
  section(
      4, "Two heads fix it",
      "Head 1 uses q1 = beta mu_a, head 2 q2 = beta mu_b; the output is (c1 + c2) / 2.\n"
      "Head 1 weighs k_a by exp(beta gamma) against exp(0) for the others, so c1 ~ v_a for any\n"
      "length gamma that is not near 0 (its size no longer competes with another key), and\n"
      "head 2 never sees k_a's length at all (mu_b . mu_a = 0): the output stays\n"
      "~ (v_a + v_b)/2. Samples with q1 . k_a < 0 (gamma < 0, about 8%) are left out, as in\n"
      "the problem set.");
  const NoisySetup setup = noisy_setup(o, rng);
  const auto nk = exercises::noisy_keys(setup.means, setup.values, 0, 1, setup.eps, true);
  const auto one = exercises::one_head(nk, o.beta, o.samples, rng);
  const auto two = exercises::two_heads(nk, o.beta, o.samples, rng);
  std::printf("Sigma_a = eps I + mu_a mu_a^T / 2, beta = %g, t over the samples with q.k_a >= 0:\n",
              o.beta);
  std::printf("one head:\n");
  print_histogram(exercises::share_histogram(one, 10, true));
  std::printf("two heads (t averaged over the heads):\n");
  print_histogram(exercises::share_histogram(two, 10, true));
  std::printf("output within 0.1 |v_a - v_b| of (v_a + v_b)/2: one head %.1f%%, two heads %.1f%%\n",
              100 * exercises::fraction_near_average(one, setup.tol),
              100 * exercises::fraction_near_average(two, setup.tol));
}

void kqv(const Options& o, attn::Rng& rng) {
  section(5, "Key-query-value separation",
          "u_a, u_b, u_c, u_d orthogonal of norm beta; x1 = u_d + u_b, x2 = u_a, x3 = u_c + u_b.\n"
          "Plain self-attention (q = k = v = x) gives c2 ~ x2 = u_a, and no query at all can do\n"
          "better than distance beta sqrt(2/5) from u_b: outputs are convex combinations of the\n"
          "x_j, and u_b is not one. Projections separate 'where to look' from 'what to take':\n"
          "  V = (u_b u_b^T - u_c u_c^T)/beta^2          v1 = u_b, v2 = 0, v3 = u_b - u_c\n"
          "  K = (u_a u_a^T + u_c u_c^T + u_d u_d^T)/beta^2  k1 = u_d, k2 = u_a, k3 = u_c\n"
          "  Q = (u_c u_d^T + u_d u_a^T)/beta^2          q1 = u_c, q2 = u_d, q3 = 0\n"
          "so q2 finds k1 (c2 ~ u_b) and q1 finds k3 (c1 ~ u_b - u_c); q3 = 0 weighs all equally.");
  const double beta = 4;
  const exercises::Kqv e = exercises::kqv_setup(o.dim, beta, rng);
  const Vector ub = e.u.row(1).transpose(), uc = e.u.row(2).transpose(),
               ua = e.u.row(0).transpose();
  const auto plain = exercises::plain_self_attention(e.x);
  std::printf("beta = %g (scores up to beta^2 = %g)\n", beta, beta * beta);
  std::printf("plain:      |c2 - u_a| = %.3e   |c2 - u_b| = %.3f  (bound beta sqrt(2/5) = %.3f)\n",
              (plain.out.row(1).transpose() - ua).norm(),
              (plain.out.row(1).transpose() - ub).norm(), exercises::plain_distance_bound(beta));
  std::printf(
      "%s",
      plot::ascii_heatmap(heatmap(plain.weights, {"q1", "q2", "q3"}, {"x1", "x2", "x3"})).c_str());
  const auto sep = exercises::kqv_self_attention(e);
  std::printf("K, Q, V:    |c2 - u_b| = %.3e   |c1 - (u_b - u_c)| = %.3e   (|u_b| = %g)\n",
              (sep.out.row(1).transpose() - ub).norm(),
              (sep.out.row(0).transpose() - (ub - uc)).norm(), beta);
  std::printf(
      "%s",
      plot::ascii_heatmap(heatmap(sep.weights, {"q1", "q2", "q3"}, {"k1", "k2", "k3"})).c_str());
  std::printf("c2 = %s\nu_b = %s\n", vec(sep.out.row(1).transpose()).c_str(), vec(ub).c_str());
}

void scaling(const Options& o, attn::Rng& rng) {
  section(
      6, "Why divide by sqrt(d)",
      "For q, k with independent N(0, 1) entries, q.k sums d terms of variance 1: Var = d.\n"
      "The scores of n = 16 keys then spread over +-sqrt(d), softmax puts nearly all weight on\n"
      "one key and its Jacobian diag(alpha) - alpha alpha^T tends to 0: the gradient reaching\n"
      "the scores vanishes. Dividing by sqrt(d) keeps the variance at 1 for every d.\n"
      "(dL/dq = sum_i (dL/ds_i) k_i is also multiplied by the keys' length ~ sqrt(d), which\n"
      "outgrows the shrinking softmax gradient over this range of d: what vanishes is the\n"
      "gradient through the softmax, dL/ds.)\n"
      "Measured with attn's tape: L = sum_i softmax(s)_i g_i, g ~ N(0, 1), backward().");
  std::printf("%6s %10s %10s | %9s %9s | %11s %11s | %11s %11s\n", "d", "Var(q.k)", "Var/d",
              "max a", "scaled", "|dL/ds|", "scaled", "|dL/dq|", "scaled");
  for (const index_t d : {4, 16, 64, 256, 1024}) {
    const auto r = exercises::scaling(d, 16, o.trials, rng);
    std::printf("%6lld %10.1f %10.3f | %9.3f %9.3f | %11.3e %11.3e | %11.3e %11.3e\n",
                static_cast<long long>(d), r.variance, r.scaled_variance, r.max_weight,
                r.scaled_max_weight, r.grad, r.scaled_grad, r.grad_q, r.scaled_grad_q);
  }
  std::printf(
      "(Var/d is the variance of the scaled score q.k/sqrt(d); 'max a' the mean largest "
      "weight.)\n");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"exercises: the classic attention exercises, computed and printed"};
  Options o;
  app.add_option("--only", o.only, "run only these sections (1-6)")
      ->check(CLI::Range(1, 6))
      ->expected(1, 6);
  app.add_option("--seed", o.seed, "seed for every random draw")
      ->check(examples::unsigned_integer());
  app.add_option("--dim", o.dim, "vector dimension d of sections 1-5")->check(CLI::Range(5, 512));
  app.add_option("--keys", o.keys, "number of keys n of sections 1-4 (<= --dim)")
      ->check(CLI::Range(3, 512));
  app.add_option("--samples", o.samples, "key samples in sections 3-4")
      ->check(CLI::Range(10, 1000000));
  app.add_option("--beta", o.beta, "query scale of sections 3-4")
      ->check(examples::number_in(1, 200));
  app.add_option("--trials", o.trials, "random draws per d in section 6")
      ->check(CLI::Range(10, 100000));
  return examples::run_main(app, argc, argv, [&] {
    if (o.keys > o.dim)
      throw CLI::ValidationError("--keys", "--keys (" + std::to_string(o.keys) +
                                               ") must not exceed --dim (" + std::to_string(o.dim) +
                                               ")");
    const auto run = [&](int n) {
      return o.only.empty() || std::find(o.only.begin(), o.only.end(), n) != o.only.end();
    };
    attn::Rng rng(o.seed);
    if (run(1)) copying(o, rng);
    if (run(2)) average(o, rng);
    if (run(3)) fragility(o, rng);
    if (run(4)) two_heads(o, rng);
    if (run(5)) kqv(o, rng);
    if (run(6)) scaling(o, rng);
    return 0;
  });
}
