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
// So the support never exceeds d + 1. The coordinates come from an LU factorisation of the basis,
// recomputed every block of d + 1 points (O(d³), so O(d²) per point) and updated by simplex
// pivots within a block (O(d) per remaining point of the block); recomputing keeps rounding from
// accumulating. At the end, the weights on the final support are refitted by least squares
// (Householder QR of the support's lifted points against [0; 1]) and the better of the two
// (refitted, or as accumulated) by output error is returned.
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
  const auto lift = [&](index_t i, auto&& column) {
    column.head(dim) = (v.row(i).transpose().template cast<double>() - o) / scale;
    column(dim) = 1.0;
  };

  // A slack coordinate above this is a direction the basis points do not span (lifted
  // coordinates are at most 1 in magnitude); one below it is rounding.
  constexpr double independent_tol = 1e-11;
  // A basis coordinate must be below −pivot_tol to limit t (Harris' ratio test): pivoting on a
  // rounding-sized entry would blow up the tableau.
  constexpr double pivot_tol = 1e-12;

  std::vector<index_t> basis(static_cast<std::size_t>(n), -1);  // point per column, −1 = slack
  Eigen::VectorXd w = Eigen::VectorXd::Zero(n);                 // weights of the basis points
  Eigen::MatrixXd bmat(n, n), block, tab;
  Eigen::PartialPivLU<Eigen::MatrixXd> lu(n);
  const index_t block_size = n;

  // Pivot on (row r, column jj): column jj's point takes basis column r; the coordinates of the
  // block's later points follow (the simplex method's tableau update).
  const auto pivot = [&](index_t r, index_t jj) {
    const double p = tab(r, jj);
    for (index_t c = jj + 1; c < tab.cols(); ++c) {
      const double f = tab(r, c) / p;
      if (f == 0) continue;
      tab.col(c) -= f * tab.col(jj);
      tab(r, c) = f;
    }
  };

  for (index_t start = 0; start < count; start += block_size) {
    const index_t m = std::min(block_size, count - start);
    for (index_t c = 0; c < n; ++c) {
      if (basis[static_cast<std::size_t>(c)] >= 0) {
        lift(basis[static_cast<std::size_t>(c)], bmat.col(c));
      } else {
        bmat.col(c).setZero();
        bmat(c, c) = 1.0;
      }
    }
    block.resize(n, m);
    for (index_t jj = 0; jj < m; ++jj)
      lift(order[static_cast<std::size_t>(start + jj)], block.col(jj));
    lu.compute(bmat);
    tab = lu.solve(block);  // [n, m]: coordinates of the block's points in the basis

    for (index_t jj = 0; jj < m; ++jj) {
      const index_t j = order[static_cast<std::size_t>(start + jj)];
      const double aj = weight_of(j);
      index_t slack = -1;
      double best = independent_tol;
      for (index_t c = 0; c < n; ++c)
        if (basis[static_cast<std::size_t>(c)] < 0 && std::abs(tab(c, jj)) > best)
          best = std::abs(tab(c, jj)), slack = c;
      if (slack >= 0) {  // a new direction: j enters in place of the slack, with its own weight
        pivot(slack, jj);
        basis[static_cast<std::size_t>(slack)] = j;
        w(slack) = aj;
        continue;
      }
      double t = aj;
      index_t leave = -1;
      for (index_t c = 0; c < n; ++c)
        if (basis[static_cast<std::size_t>(c)] >= 0 && tab(c, jj) < -pivot_tol) {
          const double ratio = w(c) / -tab(c, jj);
          if (ratio < t) t = ratio, leave = c;
        }
      for (index_t c = 0; c < n; ++c)
        if (basis[static_cast<std::size_t>(c)] >= 0) w(c) = std::max(0.0, w(c) + t * tab(c, jj));
      if (leave >= 0) {  // basis point `leave` reached weight 0: j takes its place
        pivot(leave, jj);
        basis[static_cast<std::size_t>(leave)] = j;
        w(leave) = aj - t;
      }
    }
  }

  // The support and its accumulated weights.
  std::vector<index_t> support;
  std::vector<double> acc;
  for (index_t c = 0; c < n; ++c)
    if (basis[static_cast<std::size_t>(c)] >= 0 && w(c) > 0) {
      support.push_back(basis[static_cast<std::size_t>(c)]);
      acc.push_back(w(c));
    }
  const auto k = static_cast<index_t>(support.size());
  Eigen::VectorXd accumulated = Eigen::Map<const Eigen::VectorXd>(acc.data(), k);
  accumulated /= accumulated.sum();

  // Least-squares refit on the support: min ‖U_S β − [0; 1]‖, then β clamped to >= 0.
  Eigen::MatrixXd us(n, k);
  for (index_t c = 0; c < k; ++c) lift(support[static_cast<std::size_t>(c)], us.col(c));
  Eigen::VectorXd target = Eigen::VectorXd::Zero(n);
  target(dim) = 1.0;
  Eigen::VectorXd refit = us.colPivHouseholderQr().solve(target).cwiseMax(0.0);
  const double refit_sum = refit.sum();
  const bool refit_ok = std::isfinite(refit_sum) && refit_sum > 0;
  if (refit_ok) refit /= refit_sum;

  const Eigen::VectorXd& best =
      refit_ok && detail::combination_error(support, refit, v, o) <
                      detail::combination_error(support, accumulated, v, o)
          ? refit
          : accumulated;
  Sparse s;
  for (index_t c = 0; c < k; ++c)
    if (best(c) > 0) {
      s.index.push_back(support[static_cast<std::size_t>(c)]);
      s.weight.push_back(best(c));
    }
  return s;
}

}  // namespace attn::approx
