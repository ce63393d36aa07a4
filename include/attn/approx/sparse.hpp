// attn/approx/sparse.hpp: sparse approximations of one query's attention output
// o = Σ_i α_i v_i by a convex combination of a few values, and the value-oblivious ones:
// top_r (keep the r largest weights) and sliding_window_r (keep the r nearest positions).
// Does not look at the values to choose (value_aware.hpp and caratheodory.hpp do) nor compute
// weights from queries and keys: it starts from a row α of attention weights.
//
// Conventions shared by every per-query function in approx/:
//  * α is one row of attention weights over L keys, finite and >= 0. It is normalised first
//    (divided by its sum), so any positive multiple gives the same answer; a row that sums to 0
//    (no allowed key) gives the empty combination, whose output is 0, as attention's is.
//  * Keys with α_i = 0 are treated as masked: no approximation puts weight on them (a causal query
//    must not use a future value, whatever it would gain).
//  * The values of a head are a row-major [L, d] matrix, v_i its row i.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>
#include <vector>

#include "../core/error.hpp"
#include "../core/tensor.hpp"

namespace attn::approx {

// A convex combination õ = Σ_k weight[k] v_{index[k]} of at most a few values: weights >= 0
// summing to 1 (or no entries at all, õ = 0). Indices are distinct.
struct Sparse {
  std::vector<index_t> index;
  std::vector<double> weight;

  index_t size() const { return static_cast<index_t>(index.size()); }
};

// The values of one head, v [L, d] row-major, with their squared norms ‖v_i‖² (the diagonal of
// the Gram matrix VVᵀ), computed once and shared by every query of the head.
template <class T>
struct HeadValues {
  ConstMatrixMap<T> v;                        // [L, d]
  Eigen::Matrix<T, Eigen::Dynamic, 1> norm2;  // [L]

  HeadValues(const T* data, index_t length, index_t dim) : v(data, length, dim) {
    ATTN_CHECK(length >= 0 && dim > 0, shape_error,
               "HeadValues: values must be [L, d] with d > 0, got [", length, ", ", dim, "]");
    norm2 = v.rowwise().squaredNorm();
  }

  index_t length() const { return v.rows(); }
  index_t dim() const { return v.cols(); }
};

namespace detail {

// Checks a weight row against L keys (size, finite, >= 0) and returns its sum. Two vectorised
// passes (sum, min); the element-by-element search runs only to name a bad entry.
template <class T>
double check_weight_row(std::span<const T> alpha, index_t length, const char* who) {
  ATTN_CHECK(static_cast<index_t>(alpha.size()) == length, shape_error, who, ": ", alpha.size(),
             " weights for ", length, " values");
  if (length == 0) return 0;
  const Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> a(alpha.data(), length);
  const double total = a.template cast<double>().sum();
  if (std::isfinite(total) && a.minCoeff() >= T{0}) return total;
  for (std::size_t i = 0; i < alpha.size(); ++i) {
    const double x = static_cast<double>(alpha[i]);
    ATTN_CHECK(std::isfinite(x) && x >= 0, value_error, who,
               ": attention weights must be finite and >= 0, got ", x, " at key ", i);
  }
  ATTN_CHECK(false, value_error, who, ": the attention weights sum to ", total);
  return total;
}

// The combination of the keys in `keys` with weights α_k / Σ α (renormalised over the keys).
template <class T>
Sparse renormalised(std::span<const T> alpha, std::vector<index_t> keys) {
  Sparse s;
  double total = 0;
  for (const index_t k : keys) total += static_cast<double>(alpha[static_cast<std::size_t>(k)]);
  if (total <= 0) return s;
  s.index = std::move(keys);
  for (const index_t k : s.index)
    s.weight.push_back(static_cast<double>(alpha[static_cast<std::size_t>(k)]) / total);
  return s;
}

// o = Σ_i α_i v_i / Σ α in double (0 for a row summing to 0).
template <class T>
Eigen::VectorXd exact_output(std::span<const T> alpha, ConstMatrixMap<T> v, double total) {
  Eigen::VectorXd o = Eigen::VectorXd::Zero(v.cols());
  if (total <= 0) return o;
  for (index_t i = 0; i < v.rows(); ++i) {
    const double a = static_cast<double>(alpha[static_cast<std::size_t>(i)]);
    if (a > 0) o += (a / total) * v.row(i).transpose().template cast<double>();
  }
  return o;
}

}  // namespace detail

// õ = Σ_k weight[k] v_{index[k]}, written to out[0, d) (accumulated in double).
template <class T>
void combine(const Sparse& s, ConstMatrixMap<T> v, T* out) {
  const index_t d = v.cols();
  Eigen::VectorXd acc = Eigen::VectorXd::Zero(d);
  for (std::size_t k = 0; k < s.index.size(); ++k)
    acc += s.weight[k] * v.row(s.index[k]).transpose().template cast<double>();
  for (index_t c = 0; c < d; ++c) out[c] = static_cast<T>(acc(c));
}

// ‖o − õ‖² in double, with o = Σ α_i v_i / Σ α the exact output of the row.
template <class T>
double squared_error(const Sparse& s, std::span<const T> alpha, ConstMatrixMap<T> v) {
  const double total = detail::check_weight_row(alpha, v.rows(), "squared_error");
  Eigen::VectorXd diff = -detail::exact_output(alpha, v, total);
  for (std::size_t k = 0; k < s.index.size(); ++k)
    diff += s.weight[k] * v.row(s.index[k]).transpose().template cast<double>();
  return diff.squaredNorm();
}

// optimal-v-oblivious-r (OVO-r): the r largest weights, renormalised,
//     õ = Σ_{i ∈ S} α_i v_i / Σ_{i ∈ S} α_i,   S = the r indices of largest α (ties: lower index),
// which is what sparse attention schemes that rank keys by their score try to reach. O(L log r).
template <class T>
Sparse top_r(std::span<const T> alpha, index_t r) {
  ATTN_CHECK(r >= 1, value_error, "top_r: r must be >= 1, got ", r);
  const double total = detail::check_weight_row(alpha, static_cast<index_t>(alpha.size()), "top_r");
  if (total <= 0) return {};
  std::vector<index_t> keys;
  for (std::size_t i = 0; i < alpha.size(); ++i)
    if (alpha[i] > T{0}) keys.push_back(static_cast<index_t>(i));
  const auto larger = [&](index_t a, index_t b) {
    const T wa = alpha[static_cast<std::size_t>(a)], wb = alpha[static_cast<std::size_t>(b)];
    return wa > wb || (wa == wb && a < b);
  };
  if (static_cast<index_t>(keys.size()) > r) {
    std::nth_element(keys.begin(), keys.begin() + (r - 1), keys.end(), larger);
    keys.resize(static_cast<std::size_t>(r));
  }
  std::sort(keys.begin(), keys.end());
  return detail::renormalised(alpha, std::move(keys));
}

// Which side of the query a sliding window covers.
enum class Window {
  causal,  // the r most recent positions p − r + 1 … p (a causal language model)
  centered,  // ⌊r/2⌋ positions before p, p itself, and r − ⌊r/2⌋ − 1 after (a bidirectional model)
};

// sliding-window-r: the keys at the r positions nearest the query's position p (p indexes keys;
// for self-attention p = i, end-aligned p = i + Tk − Tq), with the weights renormalised:
//     õ = Σ_{j ∈ W} α_j v_j / Σ_{j ∈ W} α_j.
// That is attention under mask::SlidingWindow (causal: {r − 1, 0}; centered: {⌊r/2⌋,
// r − ⌊r/2⌋ − 1}) intersected with the row's own mask, computed from the exact weights.
template <class T>
Sparse sliding_window_r(std::span<const T> alpha, index_t position, index_t r,
                        Window side = Window::causal) {
  ATTN_CHECK(r >= 1, value_error, "sliding_window_r: r must be >= 1, got ", r);
  const auto length = static_cast<index_t>(alpha.size());
  ATTN_CHECK(position >= 0 && position < length, value_error, "sliding_window_r: position ",
             position, " outside [0, ", length, ")");
  detail::check_weight_row(alpha, length, "sliding_window_r");
  const index_t before = side == Window::causal ? r - 1 : r / 2;
  const index_t after = side == Window::causal ? 0 : r - r / 2 - 1;
  std::vector<index_t> keys;
  for (index_t j = std::max<index_t>(0, position - before);
       j <= std::min(length - 1, position + after); ++j)
    if (alpha[static_cast<std::size_t>(j)] > T{0}) keys.push_back(j);
  return detail::renormalised(alpha, std::move(keys));
}

}  // namespace attn::approx
