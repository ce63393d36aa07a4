// attn/approx/value_aware.hpp: value-aware sparse approximation of one query's attention output
// (Gupta & Berant, "Value-aware Approximate Attention"): choose the few values whose convex hull
// comes closest to o = Σ α_i v_i, instead of the largest weights α. value_aware_1 is the exact
// optimum for one value; value_aware_r (1 < r <= d) is a heuristic; r >= d + 1 is exact (zero
// error) by Carathéodory. Does not approximate the weights themselves (sparse.hpp's top_r does).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "caratheodory.hpp"
#include "sparse.hpp"

namespace attn::approx {

namespace detail {

template <class T>
struct ValueAwareScratch {
  Eigen::Matrix<T, Eigen::Dynamic, 1> o, proj;
};

template <class T>
ValueAwareScratch<T>& value_aware_scratch() {
  thread_local ValueAwareScratch<T> scratch;
  return scratch;
}

// argmin over keys with α_i > 0 of f_i = ½‖v_i‖² − ⟨v_i, o⟩ (ties: lower index).
template <class T>
index_t value_aware_1_index(std::span<const T> alpha, const HeadValues<T>& values,
                            const Eigen::Matrix<T, Eigen::Dynamic, 1>& o) {
  auto& proj = value_aware_scratch<T>().proj;
  proj.noalias() = values.v * o;  // [L]: ⟨v_i, o⟩
  const Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> a(alpha.data(), values.length());
  // f_i for allowed keys, +∞ for masked ones (vectorised), then the first minimum.
  proj = (a > T{0}).select(T(0.5) * values.norm2.array() - proj.array(),
                           std::numeric_limits<T>::infinity());
  // The smallest value by a vectorised reduction, then the first index holding it.
  const T smallest = proj.minCoeff();
  index_t best = 0;
  while (proj(best) != smallest) ++best;
  return best;
}

}  // namespace detail

// optimal-v-aware-1 (OVA-1): the single value closest to the output, argmin_i ‖o − v_i‖².
// Expanding ‖o − v_i‖² = ‖o‖² + ‖v_i‖² − 2⟨v_i, o⟩ and dropping ‖o‖² (the same for every i):
//     argmin_i ‖v_i‖²(½ − α_i) − Σ_{j≠i} α_j ⟨v_i, v_j⟩  =  argmin_i ½‖v_i‖² − ⟨v_i, o⟩,
// the Gram-matrix form of the paper (Σ_j α_j ⟨v_i, v_j⟩ = ⟨v_i, o⟩ is row i of G α, G = VVᵀ).
// With ‖v_i‖² precomputed per head (HeadValues) this is o = Vᵀα and V o: two passes over the
// values, O(L·d) per query, never the O(L²) product G α.
template <class T>
Sparse value_aware_1(std::span<const T> alpha, const HeadValues<T>& values) {
  const double total = detail::check_weight_row(alpha, values.length(), "value_aware_1");
  if (total <= 0) return {};
  auto& o = detail::value_aware_scratch<T>().o;
  const Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>> a(alpha.data(), values.length());
  o.noalias() = values.v.transpose() * a;
  o /= static_cast<T>(total);
  return Sparse{{detail::value_aware_1_index(alpha, values, o)}, {1.0}};
}

// The same, given the exact output o [d] (the model computed it already): one pass over the
// values, O(L·d), the cost of the weighted sum Σ α_i v_i itself.
template <class T>
Sparse value_aware_1(std::span<const T> alpha, const HeadValues<T>& values,
                     std::span<const T> output) {
  const double total = detail::check_weight_row(alpha, values.length(), "value_aware_1");
  ATTN_CHECK(static_cast<index_t>(output.size()) == values.dim(), shape_error,
             "value_aware_1: the output has ", output.size(), " entries, the values ", values.dim(),
             " columns");
  if (total <= 0) return {};
  auto& o = detail::value_aware_scratch<T>().o;
  o = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>(output.data(), values.dim());
  return Sparse{{detail::value_aware_1_index(alpha, values, o)}, {1.0}};
}

// Carathéodory for HeadValues (the norms are not needed).
template <class T>
Sparse caratheodory(std::span<const T> alpha, const HeadValues<T>& values) {
  return caratheodory(alpha, values.v);
}

namespace detail {

// Euclidean projection of x onto the probability simplex {β >= 0, Σ β = 1}
// (sort-based, Held, Wolfe & Crowder 1974; Duchi et al. 2008).
inline void project_to_simplex(Eigen::VectorXd& x) {
  std::vector<double> u(x.data(), x.data() + x.size());
  std::sort(u.begin(), u.end(), std::greater<>());
  double cum = 0, theta = 0;
  for (std::size_t k = 0; k < u.size(); ++k) {
    cum += u[k];
    const double t = (cum - 1.0) / static_cast<double>(k + 1);
    if (u[k] - t > 0) theta = t;
  }
  x = (x.array() - theta).cwiseMax(0.0);
}

// min over the simplex of f(β) = βᵀ G β, G the Gram matrix of the centred support values
// (v_k − o), i.e. ‖Σ β_k v_k − o‖²: accelerated projected gradient (FISTA) with restarts, started
// from the feasible β, returning the best iterate, so f never increases. Step 1/(2λ) with λ an
// upper bound of G's largest eigenvalue (min of the trace and the largest absolute row sum).
inline double simplex_least_squares(const Eigen::MatrixXd& gram, Eigen::VectorXd& beta,
                                    int iterations) {
  const auto f = [&](const Eigen::VectorXd& b) { return b.dot(gram * b); };
  double best_f = f(beta);
  const double lambda = std::min(gram.trace(), gram.cwiseAbs().rowwise().sum().maxCoeff());
  if (!(lambda > 0) || beta.size() < 2) return best_f;
  const double step = 0.5 / lambda;
  Eigen::VectorXd x = beta, y = beta, x_prev = beta;
  double t = 1, f_prev = best_f;
  for (int it = 0; it < iterations; ++it) {
    x = y - step * 2.0 * (gram * y);
    project_to_simplex(x);
    const double fx = f(x);
    if (fx < best_f) best_f = fx, beta = x;
    if (fx > f_prev) {  // restart the momentum when the objective goes up
      t = 1;
      y = x;
    } else {
      const double t_next = 0.5 * (1 + std::sqrt(1 + 4 * t * t));
      y = x + ((t - 1) / t_next) * (x - x_prev);
      t = t_next;
    }
    if (std::abs(f_prev - fx) <= 1e-15 * std::max(best_f, 1e-300) && it > 10) break;
    x_prev = x;
    f_prev = fx;
  }
  return best_f;
}

// Gram matrix of the centred values (v_k − o) of a support.
template <class T>
Eigen::MatrixXd centred_gram(const std::vector<index_t>& idx, ConstMatrixMap<T> v,
                             const Eigen::VectorXd& o) {
  Eigen::MatrixXd c(v.cols(), static_cast<index_t>(idx.size()));
  for (std::size_t k = 0; k < idx.size(); ++k)
    c.col(static_cast<index_t>(k)) = v.row(idx[k]).transpose().template cast<double>() - o;
  return c.transpose() * c;
}

// Refits the weights of `s` (feasible) on its support; returns the squared error.
template <class T>
double refit(Sparse& s, ConstMatrixMap<T> v, const Eigen::VectorXd& o, int iterations) {
  Eigen::VectorXd beta = Eigen::Map<const Eigen::VectorXd>(s.weight.data(), s.size());
  const double err = simplex_least_squares(centred_gram(s.index, v, o), beta, iterations);
  s.weight.assign(beta.data(), beta.data() + beta.size());
  return err;
}

}  // namespace detail

// value_aware_r, a HEURISTIC for optimal-v-aware-r with 1 < r <= d: the convex combination of
// at most r values closest to o. The exact problem is combinatorial (best subset of size r, then
// a simplex-constrained least squares), so this returns the best of a few candidates, each scored
// by its exact output error ‖õ − o‖²:
//   1. top_r (OVO-r);
//   2. value_aware_1 (OVA-1);
//   3. top_r's keys with refitted weights (simplex-constrained least squares);
//   4. greedy: from OVA-1's value, add the value that the residual e = õ − o points most away
//      from (argmin_j ⟨v_j − o, e⟩, the Frank–Wolfe vertex), up to r values, refitting after
//      each addition.
// Because 1 and 2 are candidates, its error is never above top_r's or value_aware_1's at the same
// r — by construction, not by luck. For r = 1 it is value_aware_1; for r >= d + 1 it returns the
// Carathéodory combination (exact, error 0 up to rounding); when the row has at most r keys it
// returns the row itself. Cost O(r·L·d) for the greedy search plus O(r²) per refit iteration.
template <class T>
Sparse value_aware_r(std::span<const T> alpha, const HeadValues<T>& values, index_t r) {
  ATTN_CHECK(r >= 1, value_error, "value_aware_r: r must be >= 1, got ", r);
  const double total = detail::check_weight_row(alpha, values.length(), "value_aware_r");
  if (total <= 0) return {};
  std::vector<index_t> keys;
  for (index_t i = 0; i < values.length(); ++i)
    if (alpha[static_cast<std::size_t>(i)] > T{0}) keys.push_back(i);
  if (static_cast<index_t>(keys.size()) <= r) return detail::renormalised(alpha, std::move(keys));
  if (r == 1) return value_aware_1(alpha, values);
  if (r > values.dim()) return caratheodory(alpha, values.v);

  const ConstMatrixMap<T>& v = values.v;
  const Eigen::VectorXd o = detail::exact_output(alpha, v, total);
  const auto error2 = [&](const Sparse& s) {
    Eigen::VectorXd e = -o;
    for (std::size_t k = 0; k < s.index.size(); ++k)
      e += s.weight[k] * v.row(s.index[k]).transpose().template cast<double>();
    return e.squaredNorm();
  };
  Sparse best = top_r(alpha, r);
  double best_err = error2(best);
  const auto consider = [&](Sparse s) {
    const double e = error2(s);
    if (e < best_err) best = std::move(s), best_err = e;
  };
  consider(value_aware_1(alpha, values));
  Sparse refitted = top_r(alpha, r);
  detail::refit(refitted, v, o, 200);
  consider(std::move(refitted));

  // Greedy Frank–Wolfe selection from OVA-1's value.
  Sparse greedy = value_aware_1(alpha, values);
  // Rows v_i − o of the keys with α > 0, row-major so that each row is contiguous.
  const auto n_keys = static_cast<index_t>(keys.size());
  RowMatrix<double> centred(n_keys, v.cols());
  std::vector<index_t> row_of(static_cast<std::size_t>(v.rows()), -1);
  for (index_t a = 0; a < n_keys; ++a) {
    const index_t i = keys[static_cast<std::size_t>(a)];
    centred.row(a) = v.row(i).template cast<double>() - o.transpose();
    row_of[static_cast<std::size_t>(i)] = a;
  }
  const auto centred_of = [&](index_t i) {
    return centred.row(row_of[static_cast<std::size_t>(i)]).transpose();
  };
  Eigen::VectorXd e = centred_of(greedy.index[0]), dots(n_keys);
  while (greedy.size() < r) {
    if (e.squaredNorm() == 0) break;
    dots.noalias() = centred * e;  // ⟨v_i − o, e⟩ for every key, one GEMV
    Eigen::Index best = 0;
    dots.minCoeff(&best);
    const index_t j = keys[static_cast<std::size_t>(best)];
    if (std::find(greedy.index.begin(), greedy.index.end(), j) != greedy.index.end()) break;
    // Exact line search towards v_j: min over γ ∈ [0, 1] of ‖(1 − γ) e + γ (v_j − o)‖².
    const Eigen::VectorXd dj = centred_of(j);
    const Eigen::VectorXd diff = e - dj;
    const double gamma =
        diff.squaredNorm() > 0 ? std::clamp(e.dot(diff) / diff.squaredNorm(), 0.0, 1.0) : 0.0;
    for (double& wk : greedy.weight) wk *= 1 - gamma;
    greedy.index.push_back(j);
    greedy.weight.push_back(gamma);
    detail::refit(greedy, v, o, greedy.size() == r ? 200 : 30);
    e.setZero();
    for (std::size_t k = 0; k < greedy.index.size(); ++k)
      e += greedy.weight[k] * centred_of(greedy.index[k]);
  }
  consider(std::move(greedy));

  // Drop keys whose weight the refits drove to 0.
  Sparse out;
  for (std::size_t k = 0; k < best.index.size(); ++k)
    if (best.weight[k] > 0) {
      out.index.push_back(best.index[k]);
      out.weight.push_back(best.weight[k]);
    }
  return out;
}

}  // namespace attn::approx
