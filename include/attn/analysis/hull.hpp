// attn/analysis/hull.hpp: the vertices of the convex hull of keys through Qhull (reentrant API,
// target attn::hull), for low dimension, with Qhull's traps handled before Qhull sees the points.
// Does not scale past d ≈ 8–10 (Qhull builds every facet, about ×10 more per +2 dimensions): use
// certified_vertices (analysis/certified.hpp, no Qhull) for d_h = 16, 32, 64, 128.
//
// The traps, each handled here and tested in tests/analysis/test_hull.cpp:
//   * Qhull refuses N ≤ d (an initial simplex needs d + 1 points): N ≤ r + 1 affinely independent
//     points (r the dimension of their affine hull) are all vertices, so Qhull is not called;
//   * rank-deficient keys (in a subspace or an affine plane) make Qhull fail with a flat initial
//     simplex: the keys are projected onto their affine hull with an SVD first (directions with
//     singular value ≤ rank_tol · σ_max dropped), and Qhull runs in that dimension;
//   * Qhull's joggle option QJ would hide that failure but returns wrong vertex sets on such
//     inputs (a point in the middle of a flat face becomes a vertex), so it is never used;
//   * duplicated keys: Qhull keeps one copy of a point and reports the other as interior, so
//     exact duplicates are merged first and every copy of a vertex is reported;
//   * Qhull errors (its exit code and message) become attn::value_error.
#pragma once

#include <libqhull_r/qhull_ra.h>

#include <Eigen/Core>
#include <Eigen/SVD>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "certified.hpp"

namespace attn::analysis {

struct HullOptions {
  double rank_tol = 1e-9;      // affine-hull directions with σ ≤ rank_tol · σ_max are dropped
  index_t max_dimension = 10;  // refuse larger affine dimensions (Qhull would take hours)
};

namespace detail {

// Qhull on points [n, dim] (rows) with a Qhull option string ("qhull ..."): the vertex row
// indices, ascending. Throws value_error with Qhull's message when Qhull fails. Exposed for the
// tests of the traps; hull_vertices() is the entry point.
inline std::vector<index_t> qhull_vertices(const Eigen::MatrixXd& points,
                                           const std::string& flags) {
  const int n = static_cast<int>(points.rows()), dim = static_cast<int>(points.cols());
  // Qhull reads coordinates point after point: row-major.
  std::vector<coordT> coords(static_cast<std::size_t>(n) * static_cast<std::size_t>(dim));
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < dim; ++c)
      coords[std::size_t(i) * std::size_t(dim) + std::size_t(c)] = points(i, c);
  std::string command = flags;
  char* messages = nullptr;
  std::size_t message_size = 0;
  FILE* err = open_memstream(&messages, &message_size);
  ATTN_CHECK(err != nullptr, value_error,
             "hull_vertices: cannot open a buffer for Qhull's messages");
  qhT qh_storage;
  qhT* qh = &qh_storage;  // the name Qhull's macros expect
  qh_zero(qh, err);
  const int exitcode = qh_new_qhull(qh, dim, n, coords.data(), False, command.data(), nullptr, err);
  std::vector<index_t> vertices;
  if (exitcode == 0) {
    vertexT* vertex;
    FORALLvertices vertices.push_back(qh_pointid(qh, vertex->point));
  }
  qh_freeqhull(qh, !qh_ALL);
  int curlong = 0, totlong = 0;
  qh_memfreeshort(qh, &curlong, &totlong);
  std::fclose(err);
  // Qhull explains at length; its first line holds the error code and the reason.
  std::string text = messages != nullptr ? std::string(messages, message_size) : "";
  std::free(messages);
  text = text.substr(0, text.find('\n'));
  ATTN_CHECK(exitcode == 0, value_error, "hull_vertices: Qhull failed (exit code ", exitcode,
             ") on ", n, " points in ", dim, " dimensions: ", text);
  std::sort(vertices.begin(), vertices.end());
  return vertices;
}

}  // namespace detail

// The rows of keys [N, d] that are vertices of their convex hull, ascending. Every copy of a
// duplicated vertex is listed. Throws value_error for non-finite keys, for an affine dimension
// above options.max_dimension, and when Qhull fails.
template <class T>
std::vector<index_t> hull_vertices(const Tensor<T>& keys, const HullOptions& options = {}) {
  using detail::Mat;
  const Mat x = detail::keys_as_matrix(keys, "hull_vertices");
  const index_t n = x.rows(), d = x.cols();
  if (n == 0) return {};

  // Exact duplicates: one representative per distinct row (the first).
  std::map<std::vector<double>, index_t> first_of;
  std::vector<index_t> rep(static_cast<std::size_t>(n)), unique;
  for (index_t i = 0; i < n; ++i) {
    std::vector<double> row(static_cast<std::size_t>(d));
    for (index_t c = 0; c < d; ++c) row[std::size_t(c)] = x(i, c);
    const auto [it, fresh] = first_of.emplace(std::move(row), i);
    rep[std::size_t(i)] = it->second;
    if (fresh) unique.push_back(i);
  }
  const index_t m = static_cast<index_t>(unique.size());

  // The distinct keys in coordinates of their affine hull: [m, r].
  Mat c(m, d);
  for (index_t a = 0; a < m; ++a) c.row(a) = x.row(unique[std::size_t(a)]);
  c.rowwise() -= Eigen::RowVectorXd(c.colwise().mean());
  Eigen::JacobiSVD<Mat> svd(c, Eigen::ComputeThinV);
  const Eigen::VectorXd& sigma = svd.singularValues();
  index_t r = 0;
  while (r < sigma.size() && sigma(r) > options.rank_tol * sigma(0)) ++r;
  std::vector<char> is_vertex(static_cast<std::size_t>(m), 0);
  if (m <= r + 1) {
    // One point, or affinely independent points (a simplex): every one is a vertex.
    std::fill(is_vertex.begin(), is_vertex.end(), char(1));
  } else if (r == 1) {
    // On a line: the two ends.
    const Eigen::VectorXd t = c * svd.matrixV().col(0);
    Eigen::Index lo = 0, hi = 0;
    t.minCoeff(&lo);
    t.maxCoeff(&hi);
    is_vertex[std::size_t(lo)] = is_vertex[std::size_t(hi)] = 1;
  } else {
    ATTN_CHECK(r <= options.max_dimension, value_error, "hull_vertices: the keys span ", r,
               " dimensions; Qhull's facets grow about 10x per 2 dimensions, so it is limited to ",
               options.max_dimension,
               " (HullOptions::max_dimension); use certified_vertices for high dimensions");
    const Mat z = c * svd.matrixV().leftCols(r);
    for (const index_t v : detail::qhull_vertices(z, "qhull")) is_vertex[std::size_t(v)] = 1;
  }

  std::vector<char> rep_vertex(static_cast<std::size_t>(n), 0);
  for (index_t a = 0; a < m; ++a)
    rep_vertex[std::size_t(unique[std::size_t(a)])] = is_vertex[std::size_t(a)];
  std::vector<index_t> out;
  for (index_t i = 0; i < n; ++i)
    if (rep_vertex[std::size_t(rep[std::size_t(i)])]) out.push_back(i);
  return out;
}

}  // namespace attn::analysis
