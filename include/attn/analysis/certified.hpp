// attn/analysis/certified.hpp: which keys are vertices of the convex hull of all keys, exactly, in
// any dimension, with a certificate per key that check_certificates() verifies independently.
// Does not compute facets (their number grows exponentially with d; analysis/hull.hpp does that
// with Qhull for low d) and does not need anything but Eigen.
//
// Why it matters (the stolen-attention bound): if k_i = Σ_j λ_j k_j with λ ≥ 0, Σ λ = 1, j ≠ i,
// then for every query q, q·k_i = Σ_j λ_j q·k_j ≤ max_{j: λ_j > 0} q·k_j, so under Dot or
// ScaledDot softmax some other key gets at least k_i's weight, and α_i ≤ 1/2. A vertex k_i has a
// direction w with w·k_i > max_{j≠i} w·k_j, and the query t·w drives α_i → 1 as t → ∞.
//
// The algorithm, per key (all in double, on an orthonormal basis of the keys' affine hull):
//   1. cheap vertex certificates: the key's own whitened direction w = Σ⁻¹(k_i − mean) (when the
//      dimension is above 8: in low dimension most keys are interior) and the maximiser and
//      minimiser of 64 random whitened directions; each key they separate by the margin below is
//      a vertex, with that w as its certificate;
//   2. for the rest, deepest (smallest whitened norm) first, the minimum-norm point x of
//      conv{k_j − k_i : j ≠ i} by Wolfe's algorithm (1976), run on the whitened keys (where
//      per-dimension scales do not slow it down; its gaps are scaled so that its answers meet the
//      policy below in the original coordinates): x is the point of the others' hull nearest to
//      k_i, minus k_i. The loop stops as soon as the duality bound min_j ⟨x, k_j − k_i⟩ / ‖x‖ (a
//      lower bound on the distance) proves the key outside, then w = −x certifies a vertex; or
//      when ‖x‖ is within the tolerance, then x's convex weights λ certify an interior key. This is
//      the dual of the "margin" LP max t s.t. ⟨w, k_i − k_j⟩ ≥ t ‖w‖ (the margin is the distance),
//      solved in the d-dimensional space of w; the feasibility LP in N − 1 variables is never
//      formed. An interior key right after another starts from that one's certificate;
//   3. each interior certificate that is a full simplex (d + 1 keys) is tested against all keys
//      still to do at once: those with non-negative barycentric coordinates in it are interior,
//      with those as weights (most keys, in low dimension; given up where simplices stay empty).
//
// Tolerance policy. Let spread = max_j ‖k_j − mean‖ and τ = tol · spread (tol = 1e-9 by default):
//   * copies: a key within τ/8 of an earlier distinct key is its copy (exact duplicates always
//     are); copies share their representative's status and certificate, and are excluded from
//     each other's certificates (two copies of a corner are both vertices, as for one point);
//   * vertex: ⟨w, k_i − k_j⟩ ≥ (τ/4)‖w‖ for every key j that is not a copy of k_i, i.e. k_i lies at
//     least τ/4 outside the hull of the others (so it is a vertex in exact arithmetic);
//   * interior: λ ≥ 0, Σλ = 1, supported on keys that are not copies of k_i, ‖Σ λ_j k_j − k_i‖ ≤ τ.
//   A key inside the others' hull is always reported interior and a key more than τ outside it a
//   vertex; in between (a band of width < τ) either may be reported, each with a valid certificate.
//   Directions whose singular value is below τ/(8√d) are dropped (the keys are projected onto
//   their affine hull), which moves no key by more than τ/8; this is what makes rank-deficient
//   keys (N ≤ d, or keys in a subspace) work.
#pragma once

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <Eigen/LU>
#include <Eigen/QR>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "../core/gemm.hpp"
#include "../core/rng.hpp"
#include "../core/tensor.hpp"

namespace attn::analysis {

struct CertifyOptions {
  double tol = 1e-9;               // τ = tol · spread (see the policy above)
  index_t random_directions = 64;  // cheap certificates: each tries the max and min key
  std::uint64_t seed = 0;          // of the random directions; only keys in the band depend on it
  // Wolfe's algorithm on the whitened keys (robust to badly scaled axes, faster); false runs it
  // on the keys' own coordinates, the fallback otherwise taken only when whitening fails.
  bool whiten_min_norm = true;
};

// The certificate of one key: a separating direction (vertex) or convex weights (interior).
struct KeyCertificate {
  bool vertex = false;
  std::vector<double> direction;  // vertex: w, length d
  std::vector<index_t> support;   // interior: keys j with λ_j > 0 ...
  std::vector<double> weights;    // ... and their λ_j
};

struct CertifiedVertices {
  index_t n = 0, dim = 0;
  std::vector<index_t> vertices;             // ascending key indices
  std::vector<KeyCertificate> certificates;  // one per key
  std::vector<index_t> representative;       // the first key of each key's copies (itself if none)
  double spread = 0;                         // max_j ‖k_j − mean‖
  double tau = 0;                            // tol · spread
  index_t affine_dimension = 0;              // dimension of the keys' affine hull
  // How the keys were decided (for benchmarks and docs): distinct keys by stage.
  index_t by_whitened = 0, by_random = 0, by_min_norm = 0, interior = 0;
  index_t by_simplex = 0;           // of the interior keys, those inside an earlier one's simplex
  index_t min_norm_iterations = 0;  // Wolfe major iterations, summed over keys

  bool is_vertex(index_t i) const { return certificates[static_cast<std::size_t>(i)].vertex; }
};

namespace detail {

using Mat = Eigen::MatrixXd;
using Vec = Eigen::VectorXd;

// aᵀ b for column-major a [k, m] and b [k, n] through attn::gemm, whose blocks do not depend on
// the thread count (Eigen's own threads would change the rounding, DESIGN.md). A column-major
// [k, m] matrix is the row-major [m, k] one, so aᵀ b = (bᵀ a)ᵀ is bᵀ a in row-major.
inline Mat gemm_tn(const Mat& a, const Mat& b) {
  Mat c(a.cols(), b.cols());
  gemm(b.data(), false, a.data(), true, c.data(), b.cols(), a.cols(), a.rows());
  return c;
}

// The Gram matrix yᵀ y [M, M] of y's columns: the lower triangle as one triangular product (half
// gemm_tn's multiply-adds; Eigen runs it on the calling thread, so the rounding does not depend
// on the thread count), mirrored in 8 × 8 blocks (an element-by-element mirror reads rows M apart
// and took 4 times as long at M = 512).
inline Mat gram(const Mat& y) {
  const index_t n = y.cols();
  Mat g(n, n);
  g.triangularView<Eigen::Lower>() = y.transpose() * y;
  constexpr index_t b = 8;
  const index_t whole = n / b * b;
  for (index_t j0 = 0; j0 < whole; j0 += b)
    for (index_t i0 = j0 + b; i0 < whole; i0 += b)
      g.block<b, b>(j0, i0) = g.block<b, b>(i0, j0).transpose();
  for (index_t i = 0; i < n; ++i)  // the diagonal blocks and the last rows, element by element
    for (index_t j = i >= whole ? 0 : i / b * b; j < i; ++j) g(j, i) = g(i, j);
  return g;
}

template <class T>
Mat keys_as_matrix(const Tensor<T>& keys, const char* op) {
  ATTN_CHECK(keys.rank() == 2, shape_error, op, ": keys must be [N, d], got ", keys.shape());
  const index_t n = keys.dim(0), d = keys.dim(1);
  Mat x(n, d);
  for (index_t i = 0; i < n; ++i)
    for (index_t c = 0; c < d; ++c) {
      const double v = static_cast<double>(keys[i * d + c]);
      ATTN_CHECK(std::isfinite(v), value_error, op, ": key ", i, " has a non-finite coordinate ", v,
                 " at ", c);
      x(i, c) = v;
    }
  return x;
}

// Groups keys closer than `radius` (in index order: a key joins the first earlier representative
// within radius). Returns, per key, its representative. Candidates are found by sorting on a
// random projection, so only keys whose projections are within radius·‖u‖ are compared.
inline std::vector<index_t> merge_copies(const Mat& x, double radius) {
  const index_t n = x.rows(), d = x.cols();
  std::vector<index_t> rep(static_cast<std::size_t>(n));
  Rng rng(0x5eed);
  Vec u(d);
  for (index_t c = 0; c < d; ++c) u(c) = rng.normal();
  const Vec v = x * u;
  const double window = radius * u.norm();
  std::vector<std::pair<double, index_t>> by_v(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) by_v[std::size_t(i)] = {v(i), i};
  std::sort(by_v.begin(), by_v.end());
  std::vector<index_t> sorted(by_v.size()), at(by_v.size());
  for (index_t k = 0; k < n; ++k) {
    sorted[std::size_t(k)] = by_v[std::size_t(k)].second;
    at[std::size_t(by_v[std::size_t(k)].second)] = k;
  }
  for (index_t i = 0; i < n; ++i) {
    // The earlier representatives whose projections are within the window, on both sides.
    index_t found = -1;
    const auto consider = [&](index_t j) {
      if (j < i && rep[std::size_t(j)] == j && (found < 0 || j < found) &&
          (x.row(i) - x.row(j)).norm() <= radius)
        found = j;
    };
    for (index_t k = at[std::size_t(i)] - 1; k >= 0 && v(sorted[std::size_t(k)]) >= v(i) - window;
         --k)
      consider(sorted[std::size_t(k)]);
    for (index_t k = at[std::size_t(i)] + 1; k < n && v(sorted[std::size_t(k)]) <= v(i) + window;
         ++k)
      consider(sorted[std::size_t(k)]);
    rep[std::size_t(i)] = found < 0 ? i : found;
  }
  return rep;
}

// Wolfe's minimum-norm-point algorithm (Wolfe 1976) for conv{z_j − z_i : j ≠ i}, columns of z as
// points, stopped as soon as the answer is decided: "vertex" once the duality bound
// min_j ⟨x, z_j − z_i⟩ / ‖x‖ (a lower bound on the distance, since every point p of the hull has
// ⟨x/‖x‖, p⟩ ≥ it) exceeds vertex_gap; "interior" once ‖x‖ ≤ interior_gap.
// With a metric L (lower triangular; z = L⁻¹ z' for the caller's points z'), both are decided in
// the caller's coordinates: the direction −x is −L⁻ᵀx there and the residual x is L x.
//
// The linear oracle (argmin_j ⟨x, z_j⟩, the costly step) runs over a working set of columns, the
// most promising ones first; a decision reached on the working set is confirmed by one oracle over
// all columns, which adds the columns that still improve x when it is not (column generation).
// The corral S (the points whose affine hull holds the iterate) keeps the Cholesky factor R of
// G̃ = 1 1ᵀ + PᵀP, P = [z_s − z_i]_{s∈S}: the affine minimiser of the corral is α ∝ G̃⁻¹ 1
// (on Σα = 1, αᵀG̃α = ‖Pα‖² + 1), and adding or removing a point updates R in O(|S|²).
// With the Gram matrix of z's columns (`gram`: the caller's whitened Gram), R's new column reads
// the corral's inner products off it (⟨z_s − z_i, z_j − z_i⟩ = G_sj − G_si − G_ij + G_ii, O(|S|)
// instead of a gemv over r rows); their rounding (ε max_k G_kk instead of ε ‖z_s − z_i‖ ‖z_j −
// z_i‖) only steers the iterations, since every answer and certificate comes from x = Pλ itself.
class MinNormPoint {
 public:
  struct Result {
    bool vertex = false;
    bool decided = true;
    Vec x;  // the last iterate: x = Σ λ_s (z_s − z_i); −x separates a vertex
    std::vector<index_t> point;  // the corral (columns of z) ...
    std::vector<double> lambda;  // ... and its convex weights
    index_t iterations = 0;
  };

  // s_min and s_max bound L's singular values (only used to skip exact norms when not needed).
  // gram: zᵀz, or null (see above).
  MinNormPoint(const Mat& z, double vertex_gap, double interior_gap, const Mat* metric = nullptr,
               double s_min = 1, double s_max = 1, const Mat* gram = nullptr)
      : z_(z),
        vertex_gap_(vertex_gap),
        interior_gap_(interior_gap),
        metric_(metric),
        s_min_(s_min),
        s_max_(s_max),
        gram_(gram) {
    const index_t r = z.rows(), cap = r + 2, m = z.cols();
    chol_.resize(cap, cap);
    inv_diag_.resize(cap);
    f_.resize(cap);
    p_.resize(r, cap);
    lambda_.resize(cap);
    v_.resize(cap);
    u_.resize(cap);
    b_.resize(cap);
    zw_.resize(r, m);
    if (r <= 8) zt_ = z.transpose(), zwt_.resize(m, r);
    in_w_.assign(std::size_t(m), 0);
    pos_.assign(std::size_t(m), 0);
    all_scores_.resize(m);
  }

  // The working set starts with the columns `start` and `warm` (any that are i are skipped). A
  // non-empty `warm` (typically the corral that certified a nearby interior key) is the starting
  // corral, at its centroid: when z_i lies inside its simplex the first minor cycle ends at x = 0.
  // The result lives in this object until the next run.
  const Result& run(index_t i, const std::vector<index_t>& start,
                    const std::vector<index_t>& warm = {}) {
    const index_t m = z_.cols(), r = z_.rows();
    // The working set's first entries stay when they are this start's first entries (the caller
    // often passes a list that only grew since the previous run).
    std::size_t keep = 0;
    while (keep < start.size() && keep < wglob_.size() && wglob_[keep] == start[keep] &&
           start[keep] != i)
      ++keep;
    for (std::size_t k = keep; k < wglob_.size(); ++k) in_w_[std::size_t(wglob_[k])] = 0;
    in_w_[std::size_t(i_)] = 0;
    wglob_.resize(keep);
    i_ = i;
    zi_ = z_.col(i);
    size_ = 0;
    corral_.clear();
    in_w_[std::size_t(i)] = 1;  // never a candidate
    for (std::size_t k = keep; k < start.size(); ++k)
      if (!in_w_[std::size_t(start[k])]) enter(start[k]);
    for (const index_t j : warm)
      if (!in_w_[std::size_t(j)]) enter(j);
    if (wglob_.empty())
      for (index_t j = 0; j < m && wglob_.empty(); ++j)
        if (j != i) enter(j);

    Result& res = res_;
    res.vertex = false;
    res.decided = true;
    res.iterations = 0;
    if (!warm_start(i, warm)) {
      // Start from the nearest working-set point.
      size_ = 0;
      corral_.clear();
      index_t first = 0;
      double best = std::numeric_limits<double>::infinity();
      for (index_t a = 0; a < index_t(wglob_.size()); ++a) {
        const double n2 = (z_.col(wglob_[std::size_t(a)]) - zi_).squaredNorm();
        if (n2 < best) best = n2, first = a;
      }
      if (!add(first)) return stalled(res);
      lambda_(0) = 1.0;
      x_ = p_.col(0);
    }
    const index_t max_iterations = 30 * (r + 1) + 300;
    Vec scores;
    for (res.iterations = 1; res.iterations <= max_iterations; ++res.iterations) {
      const index_t w = index_t(wglob_.size());
      if (r <= 8)
        scores.noalias() = zwt_.topRows(w) * x_;
      else
        scores.noalias() = zw_.leftCols(w).transpose() * x_;
      const double xzi = x_.dot(zi_), xx = x_.squaredNorm(), xnorm = std::sqrt(xx);
      if (within(xnorm, interior_gap_)) return interior(res);
      index_t j = 0;
      double low = std::numeric_limits<double>::infinity();
      for (index_t a = 0; a < w; ++a)
        if (scores(a) - xzi < low) low = scores(a) - xzi, j = a;
      const bool local_vertex = separates(low, xnorm, vertex_gap_);
      const bool local_optimum =
          xx - low <= 1e-12 * std::max(xx, (z_.col(wglob_[std::size_t(j)]) - zi_).squaredNorm());
      if (local_vertex || local_optimum) {
        // Confirm on every column; columns outside the working set that improve x join it.
        if (r <= 8)
          all_scores_.noalias() = zt_ * x_;
        else
          all_scores_.noalias() = z_.transpose() * x_;
        all_scores_(i) = std::numeric_limits<double>::infinity();
        if (separates(all_scores_.minCoeff() - xzi, xnorm, vertex_gap_)) {
          res.vertex = true;
          return finish(res);
        }
        improving_.clear();
        const double bar = xzi + xx * (1 - 1e-12);  // ⟨x, z_k − z_i⟩ < ‖x‖²: z_k improves x
        for (index_t k = 0; k < m; ++k)
          if (all_scores_(k) < bar && !in_w_[std::size_t(k)])
            improving_.emplace_back(all_scores_(k) - xzi, k);
        if (improving_.empty()) return stalled(res);
        // The 32 that improve most join.
        const std::size_t batch = std::min<std::size_t>(improving_.size(), 32);
        std::nth_element(improving_.begin(), improving_.begin() + std::ptrdiff_t(batch - 1),
                         improving_.end());
        for (std::size_t a = 0; a < batch; ++a) enter(improving_[a].second);
        continue;
      }
      if (!add(j)) return stalled(res);
      lambda_(size_ - 1) = 0.0;
      if (!affine_step()) return stalled(res);
    }
    return stalled(res);
  }

 private:
  // Column j of z joins the working set.
  void enter(index_t j) {
    pos_[std::size_t(j)] = index_t(wglob_.size());
    if (z_.rows() <= 8)
      zwt_.row(index_t(wglob_.size())) = z_.col(j).transpose();
    else
      zw_.col(index_t(wglob_.size())) = z_.col(j);
    wglob_.push_back(j);
    in_w_[std::size_t(j)] = 1;
  }

  // The corral `warm` (those of its columns that are affinely independent), λ uniform, then one
  // minor cycle. False when nothing of it is usable.
  bool warm_start(index_t i, const std::vector<index_t>& warm) {
    size_ = 0;
    corral_.clear();
    for (const index_t j : warm)
      if (j != i) add(pos_[std::size_t(j)]);
    if (size_ < 2) return false;
    lambda_.head(size_).setConstant(1.0 / double(size_));
    x_.noalias() = p_.leftCols(size_) * lambda_.head(size_);
    return affine_step();
  }

  // Working-set column a joins the corral: R gains a row and column. Fails when the point is
  // (numerically) in the corral's affine hull, where G̃ would be singular.
  bool add(index_t a) {
    const index_t s = size_;
    if (s + 1 > chol_.rows()) return false;
    const index_t j = wglob_[std::size_t(a)];
    p_.col(s) = z_.col(j) - zi_;
    auto b = b_.head(s);
    b.setOnes();
    if (gram_) {
      const Mat& g = *gram_;
      const double gij = g(i_, j);
      for (index_t t = 0; t < s; ++t) b(t) += g(corral_[std::size_t(t)], j) - f_(t) - gij;
      f_(s) = gij - g(i_, i_);
    } else if (s > 0) {
      b.noalias() += p_.leftCols(s).transpose() * p_.col(s);
    }
    solve_upper_transposed(b);
    const double c = 1.0 + p_.col(s).squaredNorm();
    const double rho2 = c - b.squaredNorm();
    if (!(rho2 > 1e-13 * c)) return false;
    chol_.col(s).head(s) = b;
    chol_(s, s) = std::sqrt(rho2);
    inv_diag_(s) = 1.0 / chol_(s, s);
    v_(s) = (1.0 - b.dot(v_.head(s))) * inv_diag_(s);  // row s of Rᵀ v = 1
    corral_.push_back(j);
    ++size_;
    return true;
  }

  // Corral entry k leaves: column k of R is deleted and Givens rotations restore the triangle
  // (applied to v = R⁻ᵀ 1 too, whose last entry then drops).
  void remove(index_t k) {
    const index_t s = size_;
    for (index_t c = k; c + 1 < s; ++c) {
      chol_.col(c).head(s) = chol_.col(c + 1).head(s);
      p_.col(c) = p_.col(c + 1);
      lambda_(c) = lambda_(c + 1);
      f_(c) = f_(c + 1);
    }
    // Rows row and row + 1 turn by the rotation J = [c σ; −σ c] that zeroes R(row + 1, row).
    const auto rotate = [](double& a, double& b, double c, double sigma) {
      const double ra = a, rb = b;
      a = c * ra + sigma * rb;
      b = c * rb - sigma * ra;
    };
    for (index_t row = k; row + 1 < s; ++row) {
      // (Entries of R are at most √(1 + max ‖z_j − z_i‖²): no overflow to guard against.)
      const double a = chol_(row, row), b = chol_(row + 1, row), h = std::sqrt(a * a + b * b);
      const double c = a / h, sigma = b / h;
      chol_(row, row) = h;
      chol_(row + 1, row) = 0.0;
      for (index_t col = row + 1; col + 1 < s; ++col)
        rotate(chol_(row, col), chol_(row + 1, col), c, sigma);
      // Rᵀv = 1 minus equation k is R_delᵀ v = 1; with R' = J R_del, R'ᵀ (J v) = 1.
      rotate(v_(row), v_(row + 1), c, sigma);
      inv_diag_(row) = 1.0 / h;
    }
    corral_.erase(corral_.begin() + k);
    --size_;
  }

  // Wolfe's minor cycle: x moves toward the corral's affine minimiser; points whose weight reaches
  // zero leave, until the minimiser lies inside the corral's simplex.
  bool affine_step() {
    for (index_t guard = 0; guard <= chol_.rows(); ++guard) {
      const index_t s = size_;
      // G̃⁻¹ 1 = R⁻¹ (R⁻ᵀ 1) = R⁻¹ v, with v kept up to date by add() and remove().
      auto u = u_.head(s);
      u = v_.head(s);
      solve_upper(u);
      const double total = u.sum();
      if (!(std::abs(total) > 0) || !std::isfinite(total)) return false;
      u /= total;  // α
      if (u.minCoeff() > 0) {
        lambda_.head(s) = u;
        x_.noalias() = p_.leftCols(s) * lambda_.head(s);
        return true;
      }
      // The largest step θ toward α that keeps every weight non-negative.
      double theta = 1.0;
      index_t drop = -1;
      for (index_t a = 0; a < s; ++a)
        if (u(a) <= 0) {
          const double t = lambda_(a) / (lambda_(a) - u(a));
          if (t < theta) theta = t, drop = a;
        }
      if (drop < 0 || (drop == s - 1 && theta <= 0)) return false;  // no progress: stalled
      lambda_.head(s) = (1 - theta) * lambda_.head(s) + theta * u;
      lambda_(drop) = 0;
      for (index_t a = s - 1; a >= 0; --a)
        if (lambda_(a) <= 0) remove(a);
      lambda_.head(size_) /= lambda_.head(size_).sum();
      x_.noalias() = p_.leftCols(size_) * lambda_.head(size_);
    }
    return false;
  }

  // u ← R⁻¹ u for the corral's R (size_ × size_), column by column: an axpy over a contiguous
  // column per step, with the reciprocal diagonal (Eigen's blocked solver took about twice as
  // long at these sizes).
  template <class V>
  void solve_upper(V&& u) const {
    for (index_t k = u.size() - 1; k >= 0; --k) {
      const double uk = u(k) * inv_diag_(k);
      u(k) = uk;
      u.head(k) -= uk * chol_.col(k).head(k);
    }
  }
  // b ← R⁻ᵀ b, row by row: a dot product with R's column per step.
  template <class V>
  void solve_upper_transposed(V&& b) const {
    for (index_t k = 0; k < b.size(); ++k)
      b(k) = (b(k) - chol_.col(k).head(k).dot(b.head(k))) * inv_diag_(k);
  }

  Result& finish(Result& res) {
    res.x = x_;
    res.point = corral_;
    res.lambda.assign(lambda_.data(), lambda_.data() + size_);
    return res;
  }

  Result& interior(Result& res) {
    res.vertex = false;
    return finish(res);
  }

  // No further progress (x optimal to rounding, or a degenerate corral): decide from x.
  Result& stalled(Result& res) {
    finish(res);
    if (size_ == 0) {
      res.decided = false;
      return res;
    }
    const double xnorm = x_.norm();
    if (within(xnorm, 1.04 * interior_gap_)) return interior(res);
    all_scores_.noalias() = z_.transpose() * x_;
    const double xzi = x_.dot(zi_);
    double low = std::numeric_limits<double>::infinity();
    for (index_t k = 0; k < z_.cols(); ++k)
      if (k != i_) low = std::min(low, all_scores_(k) - xzi);
    // A vertex with less margin than asked for, but the 0.5 τ the policy needs.
    if (separates(low, xnorm, (0.5 / 0.6) * vertex_gap_)) {
      res.vertex = true;
      return res;
    }
    res.decided = false;
    return res;
  }

  const Mat& z_;
  // Whether x = x_ (of norm xnorm) is a residual within gap: ‖L x‖ ≤ gap.
  bool within(double xnorm, double gap) {
    if (!metric_) return xnorm <= gap;
    if (xnorm * s_min_ > gap) return false;
    tmp_.noalias() = metric_->triangularView<Eigen::Lower>() * x_;
    return tmp_.norm() <= gap;
  }
  // Whether low = min_j ⟨x, z_j − z_i⟩ proves a margin of gap in direction −x: low > gap ‖L⁻ᵀx‖.
  bool separates(double low, double xnorm, double gap) {
    if (!metric_) return low > gap * xnorm;
    if (!(low > gap * xnorm / s_max_)) return false;
    if (low > gap * xnorm / s_min_) return true;
    tmp_ = x_;
    metric_->transpose().triangularView<Eigen::Upper>().solveInPlace(tmp_);
    return low > gap * tmp_.norm();
  }

  double vertex_gap_, interior_gap_;
  const Mat* metric_;
  double s_min_, s_max_;
  const Mat* gram_;  // zᵀz or null
  Vec inv_diag_;     // 1 / diag(R)
  Vec f_;            // with a Gram: G_si − G_ii for the corral's points s
  Vec tmp_;
  Vec zi_, x_, lambda_, all_scores_, v_, u_, b_;
  index_t i_ = 0, size_ = 0;
  // The working set's points as columns (zw_) or, in low dimension, where a gemv over short
  // columns is slow, as rows (zwt_, with zt_ = zᵀ for all points).
  Mat chol_, p_, zw_, zt_, zwt_;
  std::vector<index_t> corral_, wglob_, pos_;
  Result res_;
  std::vector<std::pair<double, index_t>> improving_;
  std::vector<char> in_w_;
};

}  // namespace detail

// Certified vertex detection: which rows of keys [N, d] are vertices of their convex hull, with a
// certificate per key (see the top of this file for the algorithm and the tolerance policy).
template <class T>
CertifiedVertices certified_vertices(const Tensor<T>& keys, const CertifyOptions& options = {}) {
  using detail::Mat;
  using detail::Vec;
  ATTN_CHECK(options.tol > 0 && options.tol < 1e-2, value_error,
             "certified_vertices: tol must be in (0, 1e-2), got ", options.tol);
  ATTN_CHECK(options.random_directions >= 0, value_error,
             "certified_vertices: random_directions must be >= 0, got ", options.random_directions);
  const Mat x = detail::keys_as_matrix(keys, "certified_vertices");
  const index_t n = x.rows(), d = x.cols();
  CertifiedVertices out;
  out.n = n;
  out.dim = d;
  out.certificates.resize(static_cast<std::size_t>(n));
  if (n == 0) return out;

  const Eigen::RowVectorXd mean = x.colwise().mean();
  out.spread = (x.rowwise() - mean).rowwise().norm().maxCoeff();
  out.tau = options.tol * out.spread;
  const double tau = out.tau;
  out.representative = detail::merge_copies(x, tau / 8);
  std::vector<index_t> reps;
  for (index_t i = 0; i < n; ++i)
    if (out.representative[std::size_t(i)] == i) reps.push_back(i);
  const index_t m = static_cast<index_t>(reps.size());

  std::vector<KeyCertificate> rep_cert(static_cast<std::size_t>(m));
  if (m == 1) {
    rep_cert[0].vertex = true;  // one distinct point: nothing to separate it from
    rep_cert[0].direction.assign(std::size_t(d), 0.0);
    out.by_whitened = 1;
  } else {
    // Centred representatives in units of the spread, so every coordinate is O(1) and τ = tol.
    Mat c(m, d);
    for (index_t a = 0; a < m; ++a) c.row(a) = x.row(reps[std::size_t(a)]);
    c.rowwise() -= Eigen::RowVectorXd(c.colwise().mean());
    c /= out.spread;
    const double t = options.tol;
    // An orthonormal basis of their affine hull. Well-conditioned keys (σ_min > 1e-4 σ_max, read
    // off the covariance's eigenvalues, which are accurate to 1e-16 λ_max) keep their coordinates;
    // otherwise a rank-revealing QR gives the directions in which some key reaches past τ/(8√d).
    Mat cov = detail::gemm_tn(c, c) / double(m);
    bool full_rank = false;
    Vec spectrum;  // eigenvalues of the final cov, ascending (computed below when not full rank)
    if (m > d) {
      spectrum = Eigen::SelfAdjointEigenSolver<Mat>(cov, Eigen::EigenvaluesOnly).eigenvalues();
      full_rank = spectrum(0) > 1e-8 * spectrum(d - 1);
    }
    Mat basis, z;  // basis [d, r] (empty when full rank); z [r, M]
    index_t rank = d;
    if (full_rank) {
      z = c.transpose();
    } else {
      // Householder QR of the centred keys as columns [d, M] with column pivoting: at step k the
      // pivot is the key with the largest part outside the first k directions, |R_kk| its size,
      // so stopping where |R_kk| ≤ τ/(8√d) leaves every key within that of the span.
      const Eigen::ColPivHouseholderQR<Mat> qr(c.transpose());
      const double drop_below = t / (8 * std::sqrt(double(d)));
      rank = 0;
      while (rank < std::min(d, m) && std::abs(qr.matrixQR()(rank, rank)) > drop_below) ++rank;
      rank = std::max<index_t>(rank, 1);
      basis = qr.householderQ() * Mat::Identity(d, rank);
      z = detail::gemm_tn(basis, c.transpose());
      cov = detail::gemm_tn(z.transpose(), z.transpose()) / double(m);
    }
    out.affine_dimension = rank;
    const auto to_keys = [&](const Vec& w_r) {  // a direction in z coordinates, in key coordinates
      const Vec w = full_rank ? w_r : Vec(basis * w_r);
      return std::vector<double>(w.data(), w.data() + w.size());
    };

    // Cheap certificates in whitened coordinates y = L⁻¹ z (Σ = L Lᵀ = z zᵀ / M): the direction
    // w = Σ⁻¹ z_a gives ⟨w, z_b⟩ = ⟨y_a, y_b⟩ = G_ab, so key a is separated by its own direction
    // when G_aa − max_{b≠a} G_ab exceeds the margin.
    std::vector<char> decided(static_cast<std::size_t>(m), 0);
    const auto certify = [&](index_t a, const Vec& w_r, double margin) {
      // margin = min_{b≠a} ⟨w, z_a − z_b⟩, accepted above 0.6 τ ‖w‖ (room for copies).
      if (decided[std::size_t(a)] || !(margin > 0.6 * t * w_r.norm())) return false;
      rep_cert[std::size_t(a)].vertex = true;
      rep_cert[std::size_t(a)].direction = to_keys(w_r);
      decided[std::size_t(a)] = 1;
      return true;
    };
    const Eigen::LLT<Mat> llt(cov);
    const bool whitened = llt.info() == Eigen::Success;
    Mat y, g;  // whitened keys [r, M] and their Gram matrix [M, M]
    if (whitened) {
      y = llt.matrixL().solve(z);
      // The own-direction test costs O(M² r): worth it where most keys are vertices (r > 8);
      // in low dimension most keys are interior and the random directions find the vertices.
      if (rank > 8) {
        const Mat w_all = llt.matrixU().solve(y);  // Σ⁻¹ z, [r, M]
        g = detail::gram(y);
        for (index_t a = 0; a < m; ++a) {
          // max_{b≠a} G_ba as one vectorised column maximum, G_aa set aside meanwhile.
          const double own = g(a, a);
          g(a, a) = -std::numeric_limits<double>::infinity();
          const double best = g.col(a).maxCoeff();
          g(a, a) = own;
          if (certify(a, w_all.col(a), own - best)) ++out.by_whitened;
        }
      }
      // Random whitened directions u: the keys with the largest and smallest ⟨u, y⟩, all
      // directions scored in one product.
      if (options.random_directions > 0) {
        Rng rng(options.seed);
        Mat u(rank, options.random_directions);
        for (index_t k = 0; k < u.cols(); ++k)
          for (index_t e = 0; e < rank; ++e) u(e, k) = rng.normal();
        const Mat scores = detail::gemm_tn(u, y);  // [directions, M]
        const Mat w = llt.matrixU().solve(u);      // the directions in z: L⁻ᵀ u
        // Per direction: the largest and second largest score, the smallest and second smallest,
        // and the keys that have the extremes (the first on ties), one key at a time across all
        // directions (branch-free).
        const double inf = std::numeric_limits<double>::infinity();
        const index_t dirs = u.cols();
        Eigen::ArrayXd first = Eigen::ArrayXd::Constant(dirs, -inf), second = first;
        Eigen::ArrayXd last = Eigen::ArrayXd::Constant(dirs, inf), next_last = last;
        Eigen::ArrayXd top = Eigen::ArrayXd::Zero(dirs), bottom = top;
        for (index_t a = 0; a < m; ++a) {
          const auto v = scores.col(a).array();
          second = second.max(first.min(v));
          top = (v > first).select(double(a), top);
          first = first.max(v);
          next_last = next_last.min(last.max(v));
          bottom = (v < last).select(double(a), bottom);
          last = last.min(v);
        }
        for (index_t k = 0; k < dirs; ++k) {
          if (certify(index_t(top(k)), w.col(k), first(k) - second(k))) ++out.by_random;
          if (certify(index_t(bottom(k)), -w.col(k), next_last(k) - last(k))) ++out.by_random;
        }
      }
    }

    // Wolfe's minimum-norm point for the rest, deepest keys (smallest whitened norm) first: the
    // interior keys come first, and each interior certificate is a simplex of keys that may hold
    // later keys too.
    std::vector<index_t> todo;
    for (index_t a = 0; a < m; ++a)
      if (!decided[std::size_t(a)]) todo.push_back(a);
    if (whitened) {
      const Vec depth = y.colwise().squaredNorm().transpose();
      std::stable_sort(todo.begin(), todo.end(),
                       [&](index_t a, index_t b) { return depth(a) < depth(b); });
    }
    std::vector<char> pending(static_cast<std::size_t>(m), 0);
    for (const index_t a : todo) pending[std::size_t(a)] = 1;

    // Wolfe runs on the whitened keys y = L⁻¹ z, where per-dimension scales (realistic keys, badly
    // scaled axes) no longer slow it down or stall it, deciding in z through the metric L: a
    // direction w_y is w = L⁻ᵀ w_y in z, with ⟨w, z_a − z_b⟩ = ⟨w_y, y_a − y_b⟩, and a residual
    // Σ λ_b y_b − y_a is L times that in z. Where that fails (a stall, or no whitening) Wolfe runs
    // on z itself.
    double s_min = 0, s_max = 0;
    Mat ell;
    if (whitened) {
      if (!full_rank)
        spectrum = Eigen::SelfAdjointEigenSolver<Mat>(cov, Eigen::EigenvaluesOnly).eigenvalues();
      s_min = std::sqrt(std::max(spectrum(0), 0.0));
      s_max = std::sqrt(std::max(spectrum(rank - 1), 0.0));
      ell = llt.matrixL();
    }
    const bool wolfe_whitened = options.whiten_min_norm && whitened && s_min > 0;
    detail::MinNormPoint wolfe(z, 0.6 * t, 0.6 * t);
    // On y, whose Gram g the own-direction test formed (r > 8), R's columns come off g.
    detail::MinNormPoint wolfe_y(wolfe_whitened ? y : z, 0.6 * t, 0.6 * t,
                                 wolfe_whitened ? &ell : nullptr, s_min, s_max,
                                 wolfe_whitened && g.size() > 0 ? &g : nullptr);
    bool by_whitened_wolfe = false;  // the last min_norm() answered on y
    const auto min_norm = [&](index_t a, const std::vector<index_t>& start,
                              const std::vector<index_t>& warm) -> const auto& {
      by_whitened_wolfe = wolfe_whitened;
      if (wolfe_whitened) {
        const auto& res = wolfe_y.run(a, start, warm);
        out.min_norm_iterations += res.iterations;
        if (res.decided) return res;
        by_whitened_wolfe = false;
      }
      const auto& res = wolfe.run(a, start, warm);
      out.min_norm_iterations += res.iterations;
      return res;
    };

    // The keys still to do that lie in the simplex `cols` (r + 1 keys) are interior, with their
    // barycentric coordinates as weights; tested for all of them at once, on their homogeneous
    // coordinates h = [z; 1] in todo order (compacted as keys get decided). Thin simplices (high
    // dimension) rarely hold another key: after 4 in a row that held none, no more are tried.
    Mat h, bary;  // h: [todo, r + 1], a key's row [z_aᵀ 1]; bary: barycentric coordinates, same
    const auto fill_h = [&] {
      h.resize(index_t(todo.size()), rank + 1);
      for (index_t c = 0; c < h.rows(); ++c)
        h.row(c) << z.col(todo[std::size_t(c)]).transpose(), 1.0;
    };
    fill_h();
    Mat corners(rank + 1, rank + 1);
    Vec mix(rank), low;
    index_t barren = 0;
    std::size_t undecided = todo.size();  // keys of todo still pending
    const auto sweep = [&](const std::vector<index_t>& cols, std::size_t from) {
      const index_t count = index_t(todo.size()) - index_t(from);
      if (count <= 0) return;
      for (index_t k = 0; k <= rank; ++k) corners.col(k) << z.col(cols[std::size_t(k)]), 1.0;
      const Mat inverse = Eigen::PartialPivLU<Mat>(corners).inverse();
      // One column per barycentric coordinate, each a gemv over the keys (no GEMM packing).
      bary.resize(count, rank + 1);
      for (index_t k = 0; k <= rank; ++k) {
        bary.col(k).noalias() = h.bottomRows(count) * inverse.row(k).transpose();
        if (k == 0)
          low = bary.col(0);
        else
          low = low.cwiseMin(bary.col(k));
      }
      index_t hits = 0;
      for (index_t c = 0; c < count; ++c) {
        if (!(low(c) >= 0)) continue;
        const index_t a = todo[from + std::size_t(c)];
        const auto beta = bary.row(c);
        if (!pending[std::size_t(a)] || !(std::abs(beta.sum() - 1) < 1e-9) ||
            std::find(cols.begin(), cols.end(), a) != cols.end())
          continue;
        mix = -z.col(a);
        for (index_t k = 0; k <= rank; ++k) mix += beta(k) * z.col(cols[std::size_t(k)]);
        if (!(mix.norm() <= 0.6 * t)) continue;
        KeyCertificate& cert = rep_cert[std::size_t(a)];
        cert.support.reserve(std::size_t(rank + 1));
        cert.weights.reserve(std::size_t(rank + 1));
        for (index_t k = 0; k <= rank; ++k)
          if (beta(k) > 0) {
            cert.support.push_back(reps[std::size_t(cols[std::size_t(k)])]);
            cert.weights.push_back(beta(k));
          }
        pending[std::size_t(a)] = 0;
        --undecided;
        ++out.interior;
        ++out.by_simplex;
        ++hits;
      }
      barren = hits > 0 ? 0 : barren + 1;
    };

    // The working set: the vertices known so far while they are few (then an interior key is
    // usually certified without looking at the other keys at all; in low dimension they stay few),
    // else the r + 16 keys that beat key a most in its own whitened direction (or the nearest,
    // without whitening). An interior key right after another starts from its certificate.
    const index_t start_size = std::min<index_t>(m - 1, rank + 16);
    std::vector<index_t> known, start, order(static_cast<std::size_t>(m)), last_corral, no_corral;
    for (index_t a = 0; a < m; ++a)
      if (rep_cert[std::size_t(a)].vertex) known.push_back(a);
    Vec priority(m);
    bool last_interior = false;
    for (std::size_t next = 0; next < todo.size(); ++next) {
      if (undecided * 2 < todo.size() - next && todo.size() - next > 64) {  // compact todo and h
        todo.erase(std::remove_if(todo.begin() + std::ptrdiff_t(next), todo.end(),
                                  [&](index_t k) { return !pending[std::size_t(k)]; }),
                   todo.end());
        todo.erase(todo.begin(), todo.begin() + std::ptrdiff_t(next));
        next = 0;
        fill_h();
      }
      const index_t a = todo[next];
      if (!pending[std::size_t(a)]) continue;
      pending[std::size_t(a)] = 0;
      --undecided;
      KeyCertificate& cert = rep_cert[std::size_t(a)];
      if (index_t(known.size()) > rank && (rank <= 8 || index_t(known.size()) <= 3 * start_size)) {
        start = known;
      } else {
        if (g.size() > 0)
          priority = g.col(a);
        else if (whitened)
          priority.noalias() = y.transpose() * y.col(a);
        else
          priority = -(z.colwise() - z.col(a)).colwise().squaredNorm().transpose();
        priority(a) = -std::numeric_limits<double>::infinity();
        std::iota(order.begin(), order.end(), index_t{0});
        std::nth_element(order.begin(), order.begin() + start_size - 1, order.end(),
                         [&](index_t u, index_t v) { return priority(u) > priority(v); });
        start.assign(order.begin(), order.begin() + start_size);
      }
      const auto& res = min_norm(a, start, last_interior ? last_corral : no_corral);
      ATTN_CHECK(res.decided, value_error, "certified_vertices: key ", reps[std::size_t(a)],
                 " could not be certified: Wolfe's algorithm stalled at distance ",
                 res.x.norm() * out.spread, " from the other keys' hull, with tolerance ", tau,
                 " (numerically degenerate keys; try a larger tol)");
      last_interior = !res.vertex;
      if (res.vertex) {
        cert.vertex = true;
        cert.direction =
            to_keys(by_whitened_wolfe ? Vec(llt.matrixU().solve(-res.x)) : Vec(-res.x));
        ++out.by_min_norm;
        known.push_back(a);
        continue;
      }
      cert.weights = res.lambda;
      cert.support.resize(res.point.size());
      for (std::size_t k = 0; k < res.point.size(); ++k)
        cert.support[k] = reps[std::size_t(res.point[k])];
      ++out.interior;
      last_corral = res.point;
      if (index_t(res.point.size()) == rank + 1 && barren < 4) sweep(res.point, next + 1);
    }
  }

  // Every key takes its representative's certificate.
  std::vector<index_t> rep_slot(static_cast<std::size_t>(n), -1);
  for (index_t a = 0; a < m; ++a) rep_slot[std::size_t(reps[std::size_t(a)])] = a;
  for (index_t i = 0; i < n; ++i) {
    const index_t r = out.representative[std::size_t(i)];
    if (r == i)
      out.certificates[std::size_t(i)] = std::move(rep_cert[std::size_t(rep_slot[std::size_t(i)])]);
    else
      out.certificates[std::size_t(i)] = out.certificates[std::size_t(r)];  // r < i: already set
    if (out.certificates[std::size_t(i)].vertex) out.vertices.push_back(i);
  }
  return out;
}

// ---- the independent checker ---------------------------------------------------------------

struct CertificateCheck {
  bool ok = true;
  std::string failure;  // the first violated condition, "" when ok
  index_t vertices = 0, interior = 0;
  double min_vertex_margin = std::numeric_limits<double>::infinity();  // min ⟨w,k_i−k_j⟩/‖w‖ / τ
  double max_interior_residual = 0;  // max ‖Σλk − k_i‖ / τ
};

// Verifies every certificate of `c` against the keys directly, in long double, recomputing τ from
// `tol` (not trusting c.tau): copies within τ/8 of their representative; vertex directions with
// ⟨w, k_i − k_j⟩ ≥ (τ/4)‖w‖ against every non-copy j; interior weights non-negative, summing to 1,
// on non-copies, with ‖Σλ_j k_j − k_i‖ ≤ τ; and the vertex list equal to the vertex certificates.
// Shares no code with certified_vertices beyond reading the keys.
template <class T>
CertificateCheck check_certificates(const Tensor<T>& keys, const CertifiedVertices& c,
                                    double tol = CertifyOptions{}.tol) {
  using real = long double;
  CertificateCheck out;
  const auto fail = [&](auto&&... parts) {
    if (out.ok) out.failure = ::attn::detail::message(parts...);
    out.ok = false;
  };
  ATTN_CHECK(keys.rank() == 2, shape_error, "check_certificates: keys must be [N, d], got ",
             keys.shape());
  const index_t n = keys.dim(0), d = keys.dim(1);
  const auto k = [&](index_t i, index_t t) -> real { return static_cast<real>(keys[i * d + t]); };
  if (c.n != n || c.dim != d || index_t(c.certificates.size()) != n ||
      (n > 0 && index_t(c.representative.size()) != n)) {
    fail("sizes: the certificates are for ", c.n, " x ", c.dim, " keys, not ", n, " x ", d);
    return out;
  }
  if (n == 0) return out;
  std::vector<real> mean(std::size_t(d), 0);
  for (index_t i = 0; i < n; ++i)
    for (index_t t = 0; t < d; ++t) mean[std::size_t(t)] += k(i, t) / real(n);
  real spread = 0;
  for (index_t i = 0; i < n; ++i) {
    real s = 0;
    for (index_t t = 0; t < d; ++t)
      s += (k(i, t) - mean[std::size_t(t)]) * (k(i, t) - mean[std::size_t(t)]);
    spread = std::max(spread, std::sqrt(s));
  }
  const real tau = real(tol) * spread;
  // Rounding allowance of a dot product of length d in long double on values of size `scale`.
  const real eps = std::numeric_limits<real>::epsilon() * real(4 * (d + 2));
  const auto dist = [&](index_t i, index_t j) {
    real s = 0;
    for (index_t t = 0; t < d; ++t) s += (k(i, t) - k(j, t)) * (k(i, t) - k(j, t));
    return std::sqrt(s);
  };
  const auto rep = [&](index_t i) { return c.representative[std::size_t(i)]; };
  real kmax = 0;  // the largest key norm, for the rounding allowance
  for (index_t j = 0; j < n; ++j) {
    real kn = 0;
    for (index_t t = 0; t < d; ++t) kn += k(j, t) * k(j, t);
    kmax = std::max(kmax, std::sqrt(kn));
  }
  for (index_t i = 0; i < n; ++i) {
    const index_t r = rep(i);
    if (r < 0 || r > i || rep(r) != r) {
      fail("key ", i, ": representative ", r, " is not a representative key at or before it");
      return out;
    }
    if (dist(i, r) > tau / 8 * (1 + eps)) fail("key ", i, ": farther than tau/8 from its copy ", r);
    if (c.certificates[std::size_t(i)].vertex != c.certificates[std::size_t(r)].vertex)
      fail("key ", i, ": status differs from its copy ", r);
  }
  std::vector<index_t> listed;
  for (index_t i = 0; i < n; ++i) {
    const KeyCertificate& cert = c.certificates[std::size_t(i)];
    if (cert.vertex) {
      ++out.vertices;
      listed.push_back(i);
      if (index_t(cert.direction.size()) != d) {
        fail("key ", i, ": direction has length ", cert.direction.size(), ", not ", d);
        continue;
      }
      real wn = 0;
      for (index_t t = 0; t < d; ++t)
        wn += real(cert.direction[std::size_t(t)]) * cert.direction[std::size_t(t)];
      wn = std::sqrt(wn);
      for (index_t j = 0; j < n; ++j) {
        if (rep(j) == rep(i)) continue;
        real margin = 0;
        for (index_t t = 0; t < d; ++t)
          margin += real(cert.direction[std::size_t(t)]) * (k(i, t) - k(j, t));
        const real slack = eps * wn * 2 * kmax;
        if (tau > 0)
          out.min_vertex_margin = std::min(out.min_vertex_margin, double(margin / wn / tau));
        if (!(margin - slack >= tau / 4 * wn)) {
          fail("key ", i, ": its direction does not separate it from key ", j, " (margin ",
               double(margin), ", needs ", double(tau / 4 * wn), ")");
          break;
        }
      }
    } else {
      ++out.interior;
      if (cert.support.size() != cert.weights.size() || cert.support.empty()) {
        fail("key ", i, ": interior certificate without weights");
        continue;
      }
      real sum = 0;
      std::vector<real> mix(std::size_t(d), 0);
      bool bad = false;
      for (std::size_t a = 0; a < cert.support.size(); ++a) {
        const index_t j = cert.support[a];
        const real l = cert.weights[a];
        if (j < 0 || j >= n || rep(j) == rep(i) || !(l >= 0)) {
          fail("key ", i, ": weight ", double(l), " on key ", j, " is not allowed");
          bad = true;
          break;
        }
        sum += l;
        for (index_t t = 0; t < d; ++t) mix[std::size_t(t)] += l * k(j, t);
      }
      if (bad) continue;
      if (std::abs(sum - 1) > 1e-9L) fail("key ", i, ": weights sum to ", double(sum));
      real res = 0;
      for (index_t t = 0; t < d; ++t)
        res += (mix[std::size_t(t)] / sum - k(i, t)) * (mix[std::size_t(t)] / sum - k(i, t));
      res = std::sqrt(res);
      if (tau > 0)
        out.max_interior_residual = std::max(out.max_interior_residual, double(res / tau));
      if (!(res <= tau * (1 + eps) + eps * spread))
        fail("key ", i, ": the weights reproduce it only to ", double(res),
             " > tau = ", double(tau));
    }
  }
  if (listed != c.vertices) fail("the vertex list differs from the keys with vertex certificates");
  return out;
}

}  // namespace attn::analysis
