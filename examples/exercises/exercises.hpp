// examples/exercises/exercises.hpp: the math of the classic attention exercises (copying, an
// average of two, the fragility of one head, two heads, key-query-value separation, √d scaling),
// shared by the exercises program (which prints it) and tests/teaching (which asserts it).
// Does not print anything and holds no training: each function computes one exercise's numbers
// with attn's reference attention (score::Dot, softmax) or its autodiff tape, in double.
//
// Notation (XCS224N problem set 5, question 3): a query q, keys k_1..k_n, values v_1..v_n,
//     α_i = exp(k_iᵀ q) / Σ_j exp(k_jᵀ q),      c = Σ_i α_i v_i.
#pragma once

#include <attn/attention/reference.hpp>
#include <attn/autodiff/autodiff.hpp>

#include <Eigen/Cholesky>
#include <Eigen/QR>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace exercises {

using attn::index_t;
using Matrix = attn::RowMatrix<double>;  // one vector per row
using Vector = Eigen::VectorXd;

// ---- attention itself ---------------------------------------------------------------------------

struct Attended {
  Matrix weights;  // [m, n]: α for each of the m queries
  Matrix out;      // [m, dv]: c for each query
};

// α and c for every row of `queries` against `keys` [n, d] and `values` [n, dv]: the formula
// above, evaluated by attn::reference_attention with the unscaled dot-product score.
inline Attended attend(const Matrix& queries, const Matrix& keys, const Matrix& values) {
  ATTN_CHECK(queries.cols() == keys.cols() && keys.rows() == values.rows(), attn::shape_error,
             "exercises::attend: queries [", queries.rows(), ", ", queries.cols(), "], keys [",
             keys.rows(), ", ", keys.cols(), "] and values [", values.rows(), ", ", values.cols(),
             "] do not fit");
  const auto as_tensor = [](const Matrix& m) {  // [1, 1, rows, cols]: one batch entry, one head
    attn::Tensor<double> t(attn::Shape{1, 1, m.rows(), m.cols()});
    t.matrix(0, 0) = m;
    return t;
  };
  const auto r =
      attn::reference_attention<attn::score::Dot, attn::kernel::Softmax, attn::mask::None>(
          as_tensor(queries), as_tensor(keys), as_tensor(values));
  return {r.weights.matrix(0, 0), r.out.matrix(0, 0)};
}

// One query: c = Σ α_i v_i as a vector, α into `alpha` when given.
inline Vector attend_one(const Vector& q, const Matrix& keys, const Matrix& values,
                         Vector* alpha = nullptr) {
  const Attended a = attend(q.transpose(), keys, values);
  if (alpha != nullptr) *alpha = a.weights.row(0).transpose();
  return a.out.row(0).transpose();
}

// n orthonormal vectors of R^d as rows (n <= d): the Q factor of a Gaussian matrix.
inline Matrix orthonormal_rows(index_t n, index_t d, attn::Rng& rng) {
  ATTN_CHECK(n >= 1 && n <= d, attn::value_error, "exercises::orthonormal_rows: need 1 <= n <= d, ",
             "got n = ", n, ", d = ", d);
  Eigen::MatrixXd g(d, n);
  for (index_t i = 0; i < d; ++i)
    for (index_t j = 0; j < n; ++j) g(i, j) = rng.normal();
  const Eigen::MatrixXd q = Eigen::HouseholderQR<Eigen::MatrixXd>(g).householderQ();
  return q.leftCols(n).transpose();
}

inline Matrix gaussian_rows(index_t n, index_t d, attn::Rng& rng) {
  Matrix m(n, d);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < d; ++j) m(i, j) = rng.normal();
  return m;
}

// max_i ‖v_i − target‖: how far from `target` any convex combination of the values can be.
inline double farthest_value(const Matrix& values, const Vector& target) {
  double m = 0;
  for (index_t i = 0; i < values.rows(); ++i)
    m = std::max(m, (values.row(i).transpose() - target).norm());
  return m;
}

// ---- 1. copying ---------------------------------------------------------------------------------
// With q = β k_j, the scores are s_i = β k_iᵀ k_j. If k_j is the key most aligned with itself,
// gap = min_{i≠j} (k_jᵀ k_j − k_iᵀ k_j) > 0, then
//     1 − α_j = Σ_{i≠j} α_i ≤ Σ_{i≠j} e^{s_i − s_j} ≤ (n − 1) e^{−β·gap},
//     ‖c − v_j‖ = ‖Σ_i α_i (v_i − v_j)‖ ≤ (1 − α_j) max_i ‖v_i − v_j‖,
// so c → v_j exponentially fast in β: attention copies a value when one key's score dominates.

inline double copy_gap(const Matrix& keys, index_t j) {
  double gap = std::numeric_limits<double>::infinity();
  const double own = keys.row(j).squaredNorm();
  for (index_t i = 0; i < keys.rows(); ++i)
    if (i != j) gap = std::min(gap, own - keys.row(i).dot(keys.row(j)));
  return gap;
}

struct CopyRow {
  double beta;
  double weight;  // α_j
  double error;   // ‖c − v_j‖
  double bound;   // (n − 1) e^{−β·gap} max_i ‖v_i − v_j‖
};

inline std::vector<CopyRow> copying(const Matrix& keys, const Matrix& values, index_t j,
                                    const std::vector<double>& betas) {
  const double gap = copy_gap(keys, j);
  const Vector vj = values.row(j).transpose();
  const double spread = farthest_value(values, vj);
  std::vector<CopyRow> rows;
  for (const double beta : betas) {
    Vector alpha;
    const Vector c = attend_one(beta * keys.row(j).transpose(), keys, values, &alpha);
    rows.push_back({beta, alpha[j], (c - vj).norm(),
                    double(keys.rows() - 1) * std::exp(-beta * gap) * spread});
  }
  return rows;
}

// ---- 2. an average of two -----------------------------------------------------------------------
// Orthonormal keys and q = β (k_a + k_b): s_a = s_b = β, every other s_i = 0, so
//     α_a = α_b = e^β / (2 e^β + n − 2)   exactly equal,
//     ‖c − ½(v_a + v_b)‖ ≤ (n − 2) / (2 e^β + n − 2) · max_i ‖v_i − ½(v_a + v_b)‖.

struct AverageRow {
  double beta;
  double weight_a, weight_b;  // α_a, α_b
  double error;               // ‖c − ½(v_a + v_b)‖
  double bound;
};

inline std::vector<AverageRow> average_of_two(const Matrix& keys, const Matrix& values, index_t a,
                                              index_t b, const std::vector<double>& betas) {
  const Vector target = 0.5 * (values.row(a) + values.row(b)).transpose();
  const double spread = farthest_value(values, target);
  const double others = double(keys.rows() - 2);
  std::vector<AverageRow> rows;
  for (const double beta : betas) {
    Vector alpha;
    const Vector c =
        attend_one(beta * (keys.row(a) + keys.row(b)).transpose(), keys, values, &alpha);
    rows.push_back({beta, alpha[a], alpha[b], (c - target).norm(),
                    others / (2 * std::exp(beta) + others) * spread});
  }
  return rows;
}

// ---- 3 and 4. noisy keys: one head against two
// ---------------------------------------------------- Keys k_i ~ N(μ_i, Σ_i) with orthonormal
// means, sampled as k_i = μ_i + L_i z, L_i L_iᵀ = Σ_i. One head, q = β (μ_a + μ_b): with Σ_i = εI
// the scores stay near β, β, 0, ... and c ≈ ½(v_a + v_b). With Σ_a = εI + ½ μ_a μ_aᵀ the key k_a ≈
// γ μ_a has a random length γ ~ N(1, ½), so s_a ≈ βγ against s_b ≈ β: α_a / α_b = e^{β(γ − 1)}
// swings to 0 or ∞ and c jumps between ≈ v_b and ≈ v_a. Two heads, q₁ = β μ_a and q₂ = β μ_b,
// output ½(c₁ + c₂): head 1 sees s_a ≈ βγ against 0, so c₁ ≈ v_a for every γ > 0 bounded away from
// 0 — only the sign of γ matters, not its size — and head 2 never sees k_a's length (μ_bᵀ μ_a = 0),
// so the output stays ≈ ½(v_a + v_b).

struct NoisyKeys {
  Matrix means;              // [n, d], orthonormal rows μ_i
  std::vector<Matrix> chol;  // L_i with L_i L_iᵀ = Σ_i
  Matrix values;             // [n, dv]
  index_t a = 0, b = 1;      // the two items to average
};

// Σ_i = εI for every i, plus ½ μ_a μ_aᵀ on item a when `vary_a_norm`.
inline NoisyKeys noisy_keys(const Matrix& means, const Matrix& values, index_t a, index_t b,
                            double eps, bool vary_a_norm) {
  NoisyKeys nk{means, {}, values, a, b};
  const index_t d = means.cols();
  for (index_t i = 0; i < means.rows(); ++i) {
    Eigen::MatrixXd sigma = eps * Eigen::MatrixXd::Identity(d, d);
    if (vary_a_norm && i == a) sigma += 0.5 * means.row(a).transpose() * means.row(a);
    nk.chol.push_back(Eigen::LLT<Eigen::MatrixXd>(sigma).matrixL().toDenseMatrix());
  }
  return nk;
}

inline Matrix sample_keys(const NoisyKeys& nk, attn::Rng& rng) {
  Matrix k = nk.means;
  const index_t d = nk.means.cols();
  for (index_t i = 0; i < k.rows(); ++i) {
    Vector z(d);
    for (index_t t = 0; t < d; ++t) z[t] = rng.normal();
    k.row(i) += (nk.chol[static_cast<std::size_t>(i)] * z).transpose();
  }
  return k;
}

struct NoisySample {
  double share_a;    // α_a / (α_a + α_b) (one head) or the mean of the heads' shares (two)
  double deviation;  // ‖output − ½(v_a + v_b)‖
  double qk_a;       // q·k_a (one head) or q₁·k_a (two heads): the exercise ignores q·k_a < 0
};

inline std::vector<NoisySample> one_head(const NoisyKeys& nk, double beta, int samples,
                                         attn::Rng& rng) {
  const Vector target = 0.5 * (nk.values.row(nk.a) + nk.values.row(nk.b)).transpose();
  const Vector q = beta * (nk.means.row(nk.a) + nk.means.row(nk.b)).transpose();
  std::vector<NoisySample> out;
  for (int s = 0; s < samples; ++s) {
    const Matrix k = sample_keys(nk, rng);
    Vector alpha;
    const Vector c = attend_one(q, k, nk.values, &alpha);
    out.push_back({alpha[nk.a] / (alpha[nk.a] + alpha[nk.b]), (c - target).norm(),
                   q.dot(k.row(nk.a).transpose())});
  }
  return out;
}

inline std::vector<NoisySample> two_heads(const NoisyKeys& nk, double beta, int samples,
                                          attn::Rng& rng) {
  const Vector target = 0.5 * (nk.values.row(nk.a) + nk.values.row(nk.b)).transpose();
  Matrix q(2, nk.means.cols());
  q.row(0) = beta * nk.means.row(nk.a);  // head 1 looks for item a
  q.row(1) = beta * nk.means.row(nk.b);  // head 2 looks for item b
  std::vector<NoisySample> out;
  for (int s = 0; s < samples; ++s) {
    const Matrix k = sample_keys(nk, rng);
    const Attended heads = attend(q, k, nk.values);  // the two heads as two queries
    const Vector c = 0.5 * (heads.out.row(0) + heads.out.row(1)).transpose();
    const double share = 0.5 * (heads.weights(0, nk.a) + heads.weights(1, nk.a)) /
                         (0.5 * (heads.weights(0, nk.a) + heads.weights(1, nk.a) +
                                 heads.weights(0, nk.b) + heads.weights(1, nk.b)));
    out.push_back({share, (c - target).norm(), q.row(0).dot(k.row(nk.a))});
  }
  return out;
}

// Counts of share_a in `bins` equal bins of [0, 1] (samples with q·k_a < 0 left out when asked).
inline std::vector<int> share_histogram(const std::vector<NoisySample>& samples, int bins,
                                        bool skip_negative) {
  std::vector<int> h(static_cast<std::size_t>(bins), 0);
  for (const NoisySample& s : samples) {
    if (skip_negative && s.qk_a < 0) continue;
    const int bin = std::clamp(int(s.share_a * bins), 0, bins - 1);
    ++h[static_cast<std::size_t>(bin)];
  }
  return h;
}

// Fraction of the samples (with q·k_a ≥ 0) whose output lies within `tol` of ½(v_a + v_b).
inline double fraction_near_average(const std::vector<NoisySample>& samples, double tol) {
  int kept = 0, near = 0;
  for (const NoisySample& s : samples) {
    if (s.qk_a < 0) continue;
    ++kept;
    near += s.deviation < tol ? 1 : 0;
  }
  return kept > 0 ? double(near) / double(kept) : 0.0;
}

// ---- 5. key-query-value separation --------------------------------------------------------------
// Orthogonal u_a, u_b, u_c, u_d of norm β, and x₁ = u_d + u_b, x₂ = u_a, x₃ = u_c + u_b.
// Without projections (q = k = v = x) every output is a convex combination of the x_j, and
//     min over convex α of ‖α₁x₁ + α₂x₂ + α₃x₃ − u_b‖² = β² min (α₁² + α₂² + α₃²) with Σα = 1
// ... which is β²·2/5 (at α = (2/5, 1/5, 2/5)): no query gets c₂ closer to u_b than β√(2/5).
// With projections (outer products; (u vᵀ) w = u (vᵀw) and vᵀw = 0 for orthogonal v, w):
//     V = (u_b u_bᵀ − u_c u_cᵀ) / β²             v₁ = u_b,  v₂ = 0,  v₃ = u_b − u_c
//     K = (u_a u_aᵀ + u_c u_cᵀ + u_d u_dᵀ) / β²   k₁ = u_d,  k₂ = u_a, k₃ = u_c
//     Q = (u_c u_dᵀ + u_d u_aᵀ) / β²             q₁ = u_c,  q₂ = u_d, q₃ = 0
// so q₂ matches only k₁ (score β²) and c₂ ≈ v₁ = u_b; q₁ matches only k₃ and c₁ ≈ v₃ = u_b − u_c.

struct Kqv {
  Matrix u;        // [4, d]: rows u_a, u_b, u_c, u_d
  Matrix x;        // [3, d]: rows x₁, x₂, x₃
  Matrix K, Q, V;  // [d, d], applied as k_i = K x_i
};

inline Kqv kqv_setup(index_t d, double beta, attn::Rng& rng) {
  ATTN_CHECK(d >= 4, attn::value_error, "exercises::kqv_setup: needs d >= 4, got ", d);
  Kqv e;
  e.u = beta * orthonormal_rows(4, d, rng);
  const auto u = [&](int i) -> Vector { return e.u.row(i).transpose(); };
  const Vector ua = u(0), ub = u(1), uc = u(2), ud = u(3);
  e.x.resize(3, d);
  e.x.row(0) = (ud + ub).transpose();
  e.x.row(1) = ua.transpose();
  e.x.row(2) = (uc + ub).transpose();
  const double b2 = beta * beta;
  e.V = (ub * ub.transpose() - uc * uc.transpose()) / b2;
  e.K = (ua * ua.transpose() + uc * uc.transpose() + ud * ud.transpose()) / b2;
  e.Q = (uc * ud.transpose() + ud * ua.transpose()) / b2;
  return e;
}

// Self-attention of the rows of x with q = k = v = x.
inline Attended plain_self_attention(const Matrix& x) {
  return attend(x, x, x);
}

// Self-attention with projections: q_i = Q x_i, k_i = K x_i, v_i = V x_i.
inline Attended kqv_self_attention(const Kqv& e) {
  const Matrix q = e.x * e.Q.transpose(), k = e.x * e.K.transpose(), v = e.x * e.V.transpose();
  return attend(q, k, v);
}

// The closest any convex combination of x₁, x₂, x₃ comes to u_b: β √(2/5).
inline double plain_distance_bound(double beta) {
  return beta * std::sqrt(0.4);
}

// ---- 6. the √d scaling
// ----------------------------------------------------------------------------- For q, k with
// independent N(0, 1) entries, q·k is a sum of d terms of variance 1: Var(q·k) = d. The scores of n
// keys then spread over ±√d, softmax puts nearly all weight on one key, and its Jacobian diag(α) −
// ααᵀ goes to 0: the gradient that reaches the scores (and q, k) vanishes. Dividing by √d keeps Var
// = 1 for every d. Measured by backward() on attn's tape:
//     s = K q · scale,   α = softmax(s),   L = Σ_i α_i g_i   (g ~ N(0, 1): some upstream gradient).

struct ScalingRow {
  index_t d;
  double variance;         // sample variance of q·k (≈ d)
  double scaled_variance;  // of q·k / √d: the same samples, so variance / d (≈ 1)
  double max_weight, scaled_max_weight;  // mean of max_i α_i
  double grad, scaled_grad;      // mean ‖∂L/∂s‖ (before the scale: the softmax's input)
  double grad_q, scaled_grad_q;  // mean ‖∂L/∂q‖
};

inline ScalingRow scaling(index_t d, index_t n, int trials, attn::Rng& rng) {
  ScalingRow row{d, 0, 0, 0, 0, 0, 0, 0, 0};
  double sum = 0, sum2 = 0;
  attn::Tape<double> tape;
  for (int t = 0; t < trials; ++t) {
    const auto q0 = attn::Tensor<double>::randn({1, d}, rng);
    const auto k0 = attn::Tensor<double>::randn({n, d}, rng);
    const auto g0 = attn::Tensor<double>::randn({1, n}, rng);
    for (const bool scaled : {false, true}) {
      tape.clear();
      const attn::Var<double> q = tape.leaf(q0, true), k = tape.leaf(k0);
      const attn::Var<double> dots = attn::matmul(q, k, false, true);  // [1, n]: k_i·q
      const attn::Var<double> s = dots * (scaled ? 1 / std::sqrt(double(d)) : 1.0);
      const attn::Var<double> alpha = attn::softmax(s);
      const attn::Var<double> loss = attn::sum(alpha * tape.leaf(g0));
      tape.backward(loss);
      const double m = alpha.value().array().maxCoeff();
      const double gs = s.grad().array().matrix().norm(), gq = q.grad().array().matrix().norm();
      (scaled ? row.scaled_max_weight : row.max_weight) += m / trials;
      (scaled ? row.scaled_grad : row.grad) += gs / trials;
      (scaled ? row.scaled_grad_q : row.grad_q) += gq / trials;
      if (!scaled)
        for (index_t i = 0; i < n; ++i) {
          sum += dots.value()[i];
          sum2 += dots.value()[i] * dots.value()[i];
        }
    }
  }
  const double count = double(trials) * double(n), mean = sum / count;
  row.variance = (sum2 / count - mean * mean) * count / (count - 1);
  row.scaled_variance = row.variance / double(d);
  return row;
}

}  // namespace exercises
