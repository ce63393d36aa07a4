// attn/analysis/stolen.hpp: the statistics of the stolen-attention study for recorded heads: per
// query, which keys are hull vertices, the largest weight on a vertex and on an interior key, the
// variance of query–key angles and of key norms; per token, the largest weight it ever received as
// a vertex and as an interior key. Records come from MultiHeadAttention's evaluation probe.
// Does not run models or write files (examples/stolen_attention does) and needs no Qhull.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <vector>

#include "../attention/multi_head.hpp"
#include "certified.hpp"

namespace attn::analysis {

// One query of one head: its vector, the keys it attends to, their weights and token ids.
struct HeadRecord {
  std::vector<double> query;         // [Dh]
  Tensor<double> keys;               // [T, Dh]
  std::vector<double> weights;       // [T], the exact attention weights of the query over the keys
  std::vector<std::int32_t> tokens;  // [T], the token id at each key position
};

// The record of query position t of head h in sequence b of a probe step, over the keys at
// positions 0..t (what a causal head sees; the weights beyond t are zero). tokens [B, T] are the
// model's input ids. Grouped-query heads read key head h / (H / Hk).
template <class T>
HeadRecord head_record(const AttentionStep<T>& step, const Tensor<std::int32_t>& tokens, index_t b,
                       index_t h, index_t t) {
  ATTN_CHECK(step.q.rank() == 4 && step.k.rank() == 4 && step.weights.rank() == 4, shape_error,
             "head_record: the step's q, k and weights must be rank 4, got ", step.q.shape(), ", ",
             step.k.shape(), ", ", step.weights.shape());
  const index_t B = step.q.dim(0), H = step.q.dim(1), Tq = step.q.dim(2), Dh = step.q.dim(3);
  const index_t Hk = step.k.dim(1), Tk = step.k.dim(2);
  ATTN_CHECK(b >= 0 && b < B && h >= 0 && h < H && t >= 0 && t < Tq && t < Tk, value_error,
             "head_record: (b, h, t) = (", b, ", ", h, ", ", t, ") outside q ", step.q.shape(),
             " / k ", step.k.shape());
  ATTN_CHECK(tokens.rank() == 2 && tokens.dim(0) == B && tokens.dim(1) >= t + 1, shape_error,
             "head_record: tokens ", tokens.shape(), " do not cover batch ", B, " and position ",
             t);
  const index_t kh = h / (H / Hk);
  HeadRecord r;
  r.query.resize(std::size_t(Dh));
  for (index_t c = 0; c < Dh; ++c) r.query[std::size_t(c)] = double(step.q(b, h, t, c));
  r.keys = Tensor<double>(Shape{t + 1, Dh});
  for (index_t j = 0; j <= t; ++j)
    for (index_t c = 0; c < Dh; ++c) r.keys(j, c) = double(step.k(b, kh, j, c));
  for (index_t j = 0; j <= t; ++j) {
    r.weights.push_back(double(step.weights(b, h, t, j)));
    r.tokens.push_back(tokens(b, j));
  }
  return r;
}

// The statistics of one record.
struct ContextStats {
  index_t context = 0;   // keys
  index_t vertices = 0;  // of them, vertices of their convex hull
  double vertex_proportion = 0;
  double max_weight_vertex = std::numeric_limits<double>::quiet_NaN();    // NaN: no vertex key
  double max_weight_interior = std::numeric_limits<double>::quiet_NaN();  // NaN: no interior key
  double angle_variance = 0;    // variance over keys of ∠(q, k_j) in radians (population)
  double norm_variance = 0;     // variance over keys of ‖k_j‖ (population)
  std::vector<char> is_vertex;  // [context]
};

// Per token id, over every record added: the largest weight it received while its key was a
// vertex and while it was interior (NaN when never), and how often it was each.
struct TokenStats {
  double max_weight_vertex = std::numeric_limits<double>::quiet_NaN();
  double max_weight_interior = std::numeric_limits<double>::quiet_NaN();
  index_t as_vertex = 0, as_interior = 0;
};

struct StolenStats {
  std::vector<ContextStats> contexts;  // one per record, in order
  std::map<std::int32_t, TokenStats> tokens;

  // Classifies the record's keys with certified_vertices and accumulates; returns its row.
  const ContextStats& add(const HeadRecord& r, const CertifyOptions& options = {}) {
    const index_t n = r.keys.rank() == 2 ? r.keys.dim(0) : -1;
    ATTN_CHECK(n > 0 && r.keys.dim(1) == index_t(r.query.size()) &&
                   index_t(r.weights.size()) == n && index_t(r.tokens.size()) == n,
               shape_error, "StolenStats::add: keys ", r.keys.shape(), ", query [", r.query.size(),
               "], weights [", r.weights.size(), "] and tokens [", r.tokens.size(),
               "] do not fit together");
    const CertifiedVertices cv = certified_vertices(r.keys, options);
    ContextStats c;
    c.context = n;
    c.is_vertex.resize(std::size_t(n));
    const index_t d = r.keys.dim(1);
    double qn = 0;
    for (const double v : r.query) qn += v * v;
    qn = std::sqrt(qn);
    std::vector<double> angles, norms;
    const auto update_max = [](double& m, double w) { m = std::isnan(m) ? w : std::max(m, w); };
    for (index_t j = 0; j < n; ++j) {
      const bool vertex = cv.is_vertex(j);
      c.is_vertex[std::size_t(j)] = vertex;
      const double w = r.weights[std::size_t(j)];
      TokenStats& tok = tokens[r.tokens[std::size_t(j)]];
      if (vertex) {
        ++c.vertices, ++tok.as_vertex;
        update_max(c.max_weight_vertex, w), update_max(tok.max_weight_vertex, w);
      } else {
        ++tok.as_interior;
        update_max(c.max_weight_interior, w), update_max(tok.max_weight_interior, w);
      }
      double dot = 0, kn = 0;
      for (index_t e = 0; e < d; ++e) {
        dot += r.query[std::size_t(e)] * r.keys(j, e);
        kn += r.keys(j, e) * r.keys(j, e);
      }
      kn = std::sqrt(kn);
      norms.push_back(kn);
      // ∠(q, k) = acos(q·k / (‖q‖ ‖k‖)); a zero vector has no angle and is left out.
      if (qn > 0 && kn > 0) angles.push_back(std::acos(std::clamp(dot / (qn * kn), -1.0, 1.0)));
    }
    c.vertex_proportion = double(c.vertices) / double(n);
    c.angle_variance = variance(angles);
    c.norm_variance = variance(norms);
    contexts.push_back(std::move(c));
    return contexts.back();
  }

 private:
  static double variance(const std::vector<double>& v) {
    if (v.empty()) return 0;
    double mean = 0, s = 0;
    for (const double x : v) mean += x / double(v.size());
    for (const double x : v) s += (x - mean) * (x - mean);
    return s / double(v.size());
  }
};

// The statistics of records of one head (see StolenStats::add).
inline StolenStats stolen_stats(std::span<const HeadRecord> records,
                                const CertifyOptions& options = {}) {
  StolenStats s;
  for (const HeadRecord& r : records) s.add(r, options);
  return s;
}

}  // namespace attn::analysis
