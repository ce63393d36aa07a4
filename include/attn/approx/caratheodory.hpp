// attn/approx/caratheodory.hpp: Carathéodory's theorem made constructive: a convex combination
// o = Σ α_i v_i of L points in R^d rewritten with at most d + 1 of them and the same o (up to
// rounding), in O(L·d²). This is the optimal value-aware approximation for r >= d + 1 (error 0).
// Does not choose among the many such subsets (any one will do) nor approximate: the output is o.
#pragma once

#include <Eigen/LU>
#include <Eigen/QR>
#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>
#include <vector>

#include "sparse.hpp"

namespace attn::approx {

namespace detail {

// ‖Σ_k w_k (v_{idx_k} − o)‖ for a candidate combination (the output error, in double).
template <class T>
double combination_error(const std::vector<index_t>& idx, const Eigen::VectorXd& w,
                         ConstMatrixMap<T> v, const Eigen::VectorXd& o) {
  Eigen::VectorXd e = Eigen::VectorXd::Zero(v.cols());
  for (std::size_t k = 0; k < idx.size(); ++k)
    e += w(static_cast<index_t>(k)) * (v.row(idx[k]).transpose().template cast<double>() - o);
  return e.norm();
}

}  // namespace detail

// A combination of at most d + 1 of the values with the same output as α (Carathéodory).
//
// Lift each point to u_i = [(v_i − o)/s; 1] ∈ R^{d+1} (centred at o and scaled by the largest
// coordinate s, for conditioning). A convex combination with Σ β_i u_i = [0; 1] has output o, and
// linearly independent u_i number at most d + 1. The points are taken one at a time, largest
// weight first, into a basis of d + 1 columns (points, or unit "slack" vectors where the points
// so far span less than R^{d+1}), whose point columns carry weights w > 0 with Σ w u = the
// lifted sum of the points taken so far. A new point j with weight α_j and coordinates c in the
// basis (B c = u_j):
//   * if it has a component outside the points' span (a slack coordinate |c_s| > tol), it
//     replaces that slack with weight α_j;
//   * otherwise u_j = Σ c_k u_k, and moving t of its weight onto the basis, w_k += t c_k, keeps the
//     sum. The largest t keeping w >= 0 is t = min(α_j, min_{c_k < 0} w_k / −c_k) (c sums to 1,
//     the lifted 1s, so the total weight is unchanged). If t = α_j, j is absorbed; otherwise the
//     basis point k that reached 0 is replaced by j with weight α_j − t.
// So the support never exceeds d + 1. The coordinates are c = B⁻¹ u_j with the inverse kept up to
// date by Gauss–Jordan pivots (O(d²) per point and per exchange) and recomputed from an LU
// factorisation every d + 1 exchanges, together with w, so that rounding does not accumulate.
// Once the points span R^{d+1}, runs of points are absorbed at once (w += B⁻¹ Σ α_j u_j) while
// that keeps w >= 0: with weights sorted, most of the tail goes this way at O(d) per point. At
// the end, the weights on the final support are refitted by least squares (Householder QR of the
// support's lifted points against [0; 1]) and the better of the two (refitted, or as
// accumulated) by output error is returned.
//
// Degenerate inputs are fine: a repeated point is absorbed into its twin (c = e_k), collinear
// points span a 2-dimensional lifted space and the support stays at 2, and identical points all
// collapse to one. Cost O(L·d²) time, O(d²) memory besides the input.
template <class T>
Sparse caratheodory(std::span<const T> alpha, ConstMatrixMap<T> v) {
  const index_t length = v.rows(), dim = v.cols();
  const double total = detail::check_weight_row(alpha, length, "caratheodory");
  ATTN_CHECK(dim > 0, shape_error, "caratheodory: values must have d > 0 columns");
  if (total <= 0) return {};

  // The points with positive weight, largest first: big weights enter the basis early, and the
  // many small ones after them are mostly absorbed without a pivot.
  std::vector<index_t> order;
  for (index_t i = 0; i < length; ++i)
    if (alpha[static_cast<std::size_t>(i)] > T{0}) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) {
    return alpha[static_cast<std::size_t>(a)] > alpha[static_cast<std::size_t>(b)];
  });
  const auto count = static_cast<index_t>(order.size());
  const index_t n = dim + 1;
  if (count <= n) return detail::renormalised(alpha, std::move(order));

  const Eigen::VectorXd o = detail::exact_output(alpha, v, total);
  double scale = 0;
  for (const index_t i : order)
    scale =
        std::max(scale, (v.row(i).transpose().template cast<double>() - o).cwiseAbs().maxCoeff());
  if (scale == 0) return Sparse{{order.front()}, {1.0}};  // every point is o
  const auto weight_of = [&](index_t i) {
    return static_cast<double>(alpha[static_cast<std::size_t>(i)]) / total;
  };
  const double inv_scale = 1.0 / scale;
  const auto lift = [&](index_t i, auto&& column) {
    column.head(dim) = (v.row(i).transpose().template cast<double>() - o) * inv_scale;
    column(dim) = 1.0;
  };

  // A slack coordinate above this is a direction the basis points do not span (lifted
  // coordinates are at most 1 in magnitude); one below it is rounding.
  constexpr double independent_tol = 1e-11;
  // A basis coordinate must be below −pivot_tol to limit t (Harris' ratio test): pivoting on a
  // rounding-sized entry would blow up the tableau.
  constexpr double pivot_tol = 1e-12;

  std::vector<index_t> basis(static_cast<std::size_t>(n), -1);  // point per column, −1 = slack
  index_t slacks = n;
  Eigen::ArrayXd is_point = Eigen::ArrayXd::Zero(n);  // 1 for point columns, 0 for slacks
  Eigen::VectorXd w = Eigen::VectorXd::Zero(n);       // weights of the basis columns
  Eigen::VectorXd target = Eigen::VectorXd::Zero(n);  // Σ α_j u_j over the points taken so far
  Eigen::MatrixXd inv = Eigen::MatrixXd::Identity(n, n);  // B⁻¹
  Eigen::MatrixXd bmat(n, n);
  Eigen::VectorXd u(n), c(n), sum(n);
  Eigen::ArrayXd ratio(n);
  index_t pivots = 0;  // since the last refactorisation

  // B⁻¹ from scratch (LU with partial pivoting), and w = B⁻¹ target with it: pivot updates and
  // weight updates drift by rounding, so every d + 1 pivots both are recomputed.
  const auto refactor = [&] {
    for (index_t k = 0; k < n; ++k) {
      if (basis[static_cast<std::size_t>(k)] >= 0) {
        lift(basis[static_cast<std::size_t>(k)], bmat.col(k));
      } else {
        bmat.col(k).setZero();
        bmat(k, k) = 1.0;
      }
    }
    inv = bmat.partialPivLu().inverse();
    w = (inv * target).cwiseMax(0.0);
    for (index_t k = 0; k < n; ++k)
      if (basis[static_cast<std::size_t>(k)] < 0) w(k) = 0;
    pivots = 0;
  };
  // Column r of the basis becomes the point with coordinates c (B c = u): Gauss–Jordan on the
  // inverse, B'⁻¹ = B⁻¹ − (c − e_r) (row r of B⁻¹) / c_r, O(d²).
  const auto pivot = [&](index_t r) {
    const Eigen::RowVectorXd row = inv.row(r) / c(r);
    c(r) -= 1.0;
    inv.noalias() -= c * row;
    if (++pivots >= n) refactor();
  };

  index_t bulk = n;  // points the fast path tries at once; doubles while it succeeds
  for (index_t next = 0; next < count;) {
    // Fast path, once the points span R^{d+1} (no slack left, so every point is dependent):
    // absorb a run of points at once, w += B⁻¹ Σ_j α_j u_j, when that keeps every w >= 0. That is
    // the sum of their one-at-a-time absorptions, at O(d) per point instead of O(d²).
    if (slacks == 0) {
      const index_t m = std::min(bulk, count - next);
      sum.setZero();
      for (index_t jj = next; jj < next + m; ++jj) {
        const index_t j = order[static_cast<std::size_t>(jj)];
        lift(j, u);
        sum += weight_of(j) * u;
      }
      c.noalias() = inv * sum;
      if ((w + c).minCoeff() >= 0) {
        w += c;
        target += sum;
        next += m;
        bulk *= 2;
        continue;
      }
      bulk = n;
    }
    // One point at a time, for the next d + 1 points.
    for (const index_t end = std::min(count, next + n); next < end; ++next) {
      const index_t j = order[static_cast<std::size_t>(next)];
      const double aj = weight_of(j);
      lift(j, u);
      target += aj * u;
      c.noalias() = inv * u;
      index_t slack = -1;
      double best = independent_tol;
      for (index_t k = 0; slacks > 0 && k < n; ++k)
        if (is_point(k) == 0 && std::abs(c(k)) > best) best = std::abs(c(k)), slack = k;
      if (slack >= 0) {  // a new direction: j enters in place of the slack, with its own weight
        basis[static_cast<std::size_t>(slack)] = j;
        is_point(slack) = 1;
        --slacks;
        w(slack) = aj;
        pivot(slack);
        continue;
      }
      // The ratio test, vectorised: w_k / −c_k over point columns with c_k < −pivot_tol.
      // (The minimum alone is a vectorised reduction; its index is searched for only when it
      // limits t, i.e. when a pivot follows.)
      ratio = (is_point > 0 && c.array() < -pivot_tol)
                  .select(w.array() / -c.array(), std::numeric_limits<double>::infinity());
      const double limit = ratio.minCoeff();
      const double t = std::min(aj, limit);
      index_t leave = -1;
      if (limit < aj)
        for (index_t k = 0; k < n && leave < 0; ++k)
          if (ratio(k) == limit) leave = k;
      w = (is_point > 0).select((w.array() + t * c.array()).cwiseMax(0.0), 0.0).matrix();
      if (leave >= 0) {  // basis point `leave` reached weight 0: j takes its place
        basis[static_cast<std::size_t>(leave)] = j;
        w(leave) = aj - t;
        pivot(leave);
      }
    }
  }

  // The support and its accumulated weights.
  std::vector<index_t> support;
  std::vector<double> acc;
  for (index_t col = 0; col < n; ++col)
    if (basis[static_cast<std::size_t>(col)] >= 0 && w(col) > 0) {
      support.push_back(basis[static_cast<std::size_t>(col)]);
      acc.push_back(w(col));
    }
  const auto k = static_cast<index_t>(support.size());
  Eigen::VectorXd accumulated = Eigen::Map<const Eigen::VectorXd>(acc.data(), k);
  accumulated /= accumulated.sum();

  // Least-squares refit on the support: min ‖U_S β − [0; 1]‖, then β clamped to >= 0.
  Eigen::MatrixXd us(n, k);
  for (index_t col = 0; col < k; ++col) lift(support[static_cast<std::size_t>(col)], us.col(col));
  Eigen::VectorXd lifted_o = Eigen::VectorXd::Zero(n);
  lifted_o(dim) = 1.0;
  Eigen::VectorXd refit = us.colPivHouseholderQr().solve(lifted_o).cwiseMax(0.0);
  const double refit_sum = refit.sum();
  const bool refit_ok = std::isfinite(refit_sum) && refit_sum > 0;
  if (refit_ok) refit /= refit_sum;

  const Eigen::VectorXd& best =
      refit_ok && detail::combination_error(support, refit, v, o) <
                      detail::combination_error(support, accumulated, v, o)
          ? refit
          : accumulated;
  Sparse s;
  for (index_t col = 0; col < k; ++col)
    if (best(col) > 0) {
      s.index.push_back(support[static_cast<std::size_t>(col)]);
      s.weight.push_back(best(col));
    }
  return s;
}

}  // namespace attn::approx
