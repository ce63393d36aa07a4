// attn/autodiff/nn_ops.hpp: the neural-network primitives with hand-written backward: softmax,
// log_softmax, layer_norm, rms_norm, embedding, cross_entropy, dropout. All work along the last
// axis.
// Does not hold parameters; nn/ modules own them and call these.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "reduce.hpp"

namespace attn {

namespace detail {

// Rows of a tensor seen as [R, D] with D the last axis.
template <class T>
index_t row_count(const Tensor<T>& t) {
  return t.numel() / std::max<index_t>(t.shape().last(), 1);
}

struct SoftmaxOp {
  std::int32_t x;

  // y = softmax(x) per row: dx_j = y_j (dy_j − Σ_k dy_k y_k).
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    if (!tape.requires_grad(x)) return;
    const index_t D = self.value->shape().last(), R = row_count(*self.value);
    const T* y = self.value->data();
    const T* gy = self.grad->data();
    const auto gx = tape.grad_write(x);
    parallel_for(R, double(D) * 4, [&](index_t r) {
      const T* yr = y + r * D;
      const T* gr = gy + r * D;
      T dot = 0;
      for (index_t j = 0; j < D; ++j) dot += gr[j] * yr[j];
      T* out = gx.data + r * D;
      if (gx.accumulate)
        for (index_t j = 0; j < D; ++j) out[j] += yr[j] * (gr[j] - dot);
      else
        for (index_t j = 0; j < D; ++j) out[j] = yr[j] * (gr[j] - dot);
    });
  }
};

struct LogSoftmaxOp {
  std::int32_t x;

  // y = x − logΣexp(x) per row: dx_j = dy_j − softmax_j Σ_k dy_k, with softmax_j = exp(y_j).
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    if (!tape.requires_grad(x)) return;
    const index_t D = self.value->shape().last(), R = row_count(*self.value);
    const T* y = self.value->data();
    const T* gy = self.grad->data();
    const auto gx = tape.grad_write(x);
    parallel_for(R, double(D) * 8, [&](index_t r) {
      const T* yr = y + r * D;
      const T* gr = gy + r * D;
      T* out = gx.data + r * D;
      if (!std::isfinite(static_cast<double>(yr[0])) && yr[0] < 0 &&
          std::all_of(yr, yr + D, [](T v) { return v == -std::numeric_limits<T>::infinity(); })) {
        if (!gx.accumulate) std::fill(out, out + D, T{0});
        return;  // a row with no finite input has no gradient
      }
      T total = 0;
      for (index_t j = 0; j < D; ++j) total += gr[j];
      if (gx.accumulate)
        for (index_t j = 0; j < D; ++j) out[j] += gr[j] - exp_fast(yr[j]) * total;
      else
        for (index_t j = 0; j < D; ++j) out[j] = gr[j] - exp_fast(yr[j]) * total;
    });
  }
};

// Σ_{j < n} f(j) in `Lanes` interleaved partial sums of type A, added at the end: a loop the
// compiler vectorises (a plain running sum it may not reorder). The order depends on n only, so
// the result does not depend on the thread count.
template <class A, int Lanes = 16, class F>
A lane_sum(index_t n, F&& f) {
  A part[Lanes] = {};
  index_t j = 0;
  for (; j + Lanes <= n; j += Lanes)
    for (int l = 0; l < Lanes; ++l) part[l] += f(j + l);
  A s = 0;
  for (; j < n; ++j) s += f(j);
  for (int l = 0; l < Lanes; ++l) s += part[l];
  return s;
}

// Row maximum, and log Σ exp(x − max): the two halves of a stable log-sum-exp. Subtracting the
// max keeps every exp in (0, 1], so logits of ±1e4 neither overflow nor underflow to 0/0.
template <class T>
std::pair<T, T> max_and_log_sum_exp(const T* row, index_t D) {
  T m = -std::numeric_limits<T>::infinity();
  for (index_t j = 0; j < D; ++j) m = std::max(m, row[j]);
  if (m == -std::numeric_limits<T>::infinity()) return {m, T{0}};
  const T s = lane_sum<T>(D, [&](index_t j) { return exp_fast(row[j] - m); });
  return {m, std::log(s)};
}

struct LayerNormOp {
  std::int32_t x, gamma, beta;
  // self.saved[0] holds [R, 2]: each row's mean and 1/σ.

  // x̂ = (x − μ)/σ, y = γ x̂ + β. With dx̂ = dy γ:
  //   dγ = Σ_rows dy x̂,  dβ = Σ_rows dy,  dx = (1/σ)(dx̂ − mean(dx̂) − x̂ mean(dx̂ x̂)).
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    const Tensor<T>& xv = tape.value(x);
    const index_t D = xv.shape().last(), R = row_count(xv);
    const T* stats = self.saved[0].data();
    const T* gy = self.grad->data();
    const T* g = tape.value(gamma).data();
    const T* xd = xv.data();
    if (tape.requires_grad(x)) {
      const auto dx = tape.grad_write(x);
      T* gx = dx.data;
      parallel_for(R, double(D) * 10, [&](index_t r) {
        const T mu = stats[2 * r], rstd = stats[2 * r + 1];
        const T* xr = xd + r * D;
        const T* gr = gy + r * D;
        const T m1 = lane_sum<T>(D, [&](index_t j) { return gr[j] * g[j]; }) / T(D);
        const T m2 =
            lane_sum<T>(D, [&](index_t j) { return gr[j] * g[j] * ((xr[j] - mu) * rstd); }) / T(D);
        T* out = gx + r * D;
        if (dx.accumulate)
          for (index_t j = 0; j < D; ++j)
            out[j] += rstd * (gr[j] * g[j] - m1 - (xr[j] - mu) * rstd * m2);
        else
          for (index_t j = 0; j < D; ++j)
            out[j] = rstd * (gr[j] * g[j] - m1 - (xr[j] - mu) * rstd * m2);
      });
    }
    const bool need_g = tape.requires_grad(gamma), need_b = tape.requires_grad(beta);
    if (!need_g && !need_b) return;
    T* gg = need_g ? tape.grad(gamma).data() : nullptr;
    T* gb = need_b ? tape.grad(beta).data() : nullptr;
    // Column blocks: each column's sum over rows runs on one thread, in row order.
    constexpr index_t cb = 64;
    parallel_for(block_count(D, cb), double(R * cb) * 4, [&](index_t blk) {
      const index_t c0 = blk * cb, c1 = std::min(D, c0 + cb);
      for (index_t r = 0; r < R; ++r) {
        const T mu = stats[2 * r], rstd = stats[2 * r + 1];
        for (index_t j = c0; j < c1; ++j) {
          const T dy = gy[r * D + j];
          if (gg) gg[j] += dy * (xd[r * D + j] - mu) * rstd;
          if (gb) gb[j] += dy;
        }
      }
    });
  }
};

struct RmsNormOp {
  std::int32_t x, gamma;
  // self.saved[0] holds [R]: each row's 1/rms.

  // x̂ = x / rms, y = γ x̂. With dx̂ = dy γ:  dγ = Σ_rows dy x̂,  dx = (1/rms)(dx̂ − x̂ mean(dx̂ x̂)).
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    const Tensor<T>& xv = tape.value(x);
    const index_t D = xv.shape().last(), R = row_count(xv);
    const T* inv = self.saved[0].data();
    const T* gy = self.grad->data();
    const T* g = tape.value(gamma).data();
    const T* xd = xv.data();
    if (tape.requires_grad(x)) {
      const auto dx = tape.grad_write(x);
      parallel_for(R, double(D) * 8, [&](index_t r) {
        const T rr = inv[r];
        const T* xr = xd + r * D;
        const T* gr = gy + r * D;
        const T m = lane_sum<T>(D, [&](index_t j) { return gr[j] * g[j] * (xr[j] * rr); }) / T(D);
        T* out = dx.data + r * D;
        if (dx.accumulate)
          for (index_t j = 0; j < D; ++j) out[j] += rr * (gr[j] * g[j] - xr[j] * rr * m);
        else
          for (index_t j = 0; j < D; ++j) out[j] = rr * (gr[j] * g[j] - xr[j] * rr * m);
      });
    }
    if (!tape.requires_grad(gamma)) return;
    T* gg = tape.grad(gamma).data();
    // Column blocks: each column's sum over rows runs on one thread, in row order.
    constexpr index_t cb = 64;
    parallel_for(block_count(D, cb), double(R * cb) * 3, [&](index_t blk) {
      const index_t c0 = blk * cb, c1 = std::min(D, c0 + cb);
      for (index_t r = 0; r < R; ++r)
        for (index_t j = c0; j < c1; ++j) gg[j] += gy[r * D + j] * xd[r * D + j] * inv[r];
    });
  }
};

struct EmbeddingOp {
  std::int32_t table;
  // self.saved_index holds the token ids.

  // y[n] = W[id_n]: dW[id_n] += dy[n], summed over positions in order (ids repeat).
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    if (!tape.requires_grad(table)) return;
    Tensor<T>& gw = tape.grad(table);
    const index_t D = gw.shape().last();
    const T* gy = self.grad->data();
    // Split the columns, not the positions, so repeated ids never race.
    constexpr index_t cb = 64;
    const auto n = static_cast<index_t>(self.saved_index.size());
    parallel_for(block_count(D, cb), double(n * cb), [&](index_t blk) {
      const index_t c0 = blk * cb, c1 = std::min(D, c0 + cb);
      for (index_t p = 0; p < n; ++p) {
        T* row = gw.data() + self.saved_index[static_cast<std::size_t>(p)] * D;
        for (index_t j = c0; j < c1; ++j) row[j] += gy[p * D + j];
      }
    });
  }
};

struct CrossEntropyOp {
  std::int32_t logits;
  std::int32_t ignore_index;
  index_t count;  // targets not ignored
  // self.saved[0] holds each row's log Σ exp (max included); self.saved_index the targets.

  // loss = (1/n) Σ_r (logΣexp(x_r) − x_r[t_r]):  dx_r = (dloss/n)(softmax(x_r) − onehot(t_r)).
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    if (!tape.requires_grad(logits) || count == 0) return;
    const Tensor<T>& xv = tape.value(logits);
    const index_t V = xv.shape().last(), R = row_count(xv);
    const T scale = (*self.grad)[0] / T(count);
    const T* lse = self.saved[0].data();
    const auto gx = tape.grad_write(logits);
    parallel_for(R, double(V) * 8, [&](index_t r) {
      const std::int32_t t = self.saved_index[static_cast<std::size_t>(r)];
      T* gr = gx.data + r * V;
      if (t == ignore_index) {
        if (!gx.accumulate) std::fill(gr, gr + V, T{0});
        return;
      }
      const T* xr = xv.data() + r * V;
      const T l = lse[r];
      if (gx.accumulate)
        for (index_t j = 0; j < V; ++j) gr[j] += scale * exp_fast(xr[j] - l);
      else
        for (index_t j = 0; j < V; ++j) gr[j] = scale * exp_fast(xr[j] - l);
      gr[t] -= scale;
    });
  }
};

// f(lo, n) for the blocks [lo, lo + n) of [0, total) that dropout's loops run in parallel.
template <class F>
void dropout_blocks(index_t total, F&& f) {
  constexpr index_t block = 4096;
  parallel_for(block_count(total, block), 4.0 * double(block), [&](index_t blk) {
    const index_t lo = blk * block;
    f(lo, std::min(block, total - lo));
  });
}

struct DropoutOp {
  std::int32_t x;
  double p;
  std::uint64_t seed;

  // y = x m / (1 − p), m_i ~ Bernoulli(1 − p) from (seed, i): dx = dy m / (1 − p), with the
  // mask recomputed from the seed instead of stored.
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    if (!tape.requires_grad(x)) return;
    const auto gx = tape.grad_write(x);
    const T* gy = self.grad->data();
    const DropoutMask mask(seed, p);
    dropout_blocks(self.grad->numel(), [&](index_t lo, index_t n) {
      if (gx.accumulate)
        mask.apply_add(gy + lo, gx.data + lo, n, static_cast<std::uint64_t>(lo));
      else
        mask.apply(gy + lo, gx.data + lo, n, static_cast<std::uint64_t>(lo));
    });
  }
};

}  // namespace detail

// softmax along the last axis, stable (the row max is subtracted). A row whose entries are all
// −∞ (everything masked) gives zeros, not NaN.
template <Operand X>
auto softmax(const X& x_in) {
  const auto x = eval(x_in);
  using T = typename decltype(x)::value_type;
  Tape<T>& tape = x.tape();
  tape.check(x, "softmax");
  ATTN_CHECK(x.shape().rank() >= 1, shape_error, "softmax: needs rank >= 1, got shape ", x.shape());
  auto [y, node] = tape.push(x.shape(), "softmax", x.requires_grad());
  const index_t D = x.shape().last(), R = detail::row_count(x.value());
  const T* xv = x.value().data();
  T* yv = node.value->data();
  parallel_for(R, double(D) * 8, [&](index_t r) {
    const auto [m, lse] = detail::max_and_log_sum_exp(xv + r * D, D);
    const bool empty = m == -std::numeric_limits<T>::infinity();
    // (x − m) − lse, not x − (m + lse): m + lse would round at the scale of m (logits of 1e4).
    for (index_t j = 0; j < D; ++j)
      yv[r * D + j] = empty ? T{0} : exp_fast(xv[r * D + j] - m - lse);
  });
  tape.set_backward(node, detail::SoftmaxOp{x.index()});
  return y;
}

// log softmax along the last axis: x − max − log Σ exp(x − max). A row of all −∞ stays −∞ and
// passes no gradient.
template <Operand X>
auto log_softmax(const X& x_in) {
  const auto x = eval(x_in);
  using T = typename decltype(x)::value_type;
  Tape<T>& tape = x.tape();
  tape.check(x, "log_softmax");
  ATTN_CHECK(x.shape().rank() >= 1, shape_error, "log_softmax: needs rank >= 1, got shape ",
             x.shape());
  auto [y, node] = tape.push(x.shape(), "log_softmax", x.requires_grad());
  const index_t D = x.shape().last(), R = detail::row_count(x.value());
  const T* xv = x.value().data();
  T* yv = node.value->data();
  parallel_for(R, double(D) * 8, [&](index_t r) {
    const auto [m, lse] = detail::max_and_log_sum_exp(xv + r * D, D);
    for (index_t j = 0; j < D; ++j) yv[r * D + j] = xv[r * D + j] - m - lse;
  });
  tape.set_backward(node, detail::LogSoftmaxOp{x.index()});
  return y;
}

// Layer normalisation over the last axis (Ba, Kiros & Hinton 2016):
// y = γ (x − μ) / √(σ² + eps) + β, with μ, σ² the row's mean and biased variance.
template <Operand X, Operand G, Operand B>
auto layer_norm(const X& x_in, const G& gamma_in, const B& beta_in, double eps = 1e-5) {
  const auto x = eval(x_in);
  const auto gamma = eval(gamma_in);
  const auto beta = eval(beta_in);
  using T = typename decltype(x)::value_type;
  Tape<T>& tape = x.tape();
  tape.check(x, "layer_norm");
  tape.check(gamma, "layer_norm");
  tape.check(beta, "layer_norm");
  const index_t D = x.shape().last();
  ATTN_CHECK(gamma.numel() == D && beta.numel() == D, shape_error, "layer_norm: gamma ",
             gamma.shape(), " and beta ", beta.shape(), " must have the last dimension of x ",
             x.shape());
  ATTN_CHECK(eps >= 0, value_error, "layer_norm: eps must be >= 0, got ", eps);
  auto [y, node] = tape.push(x.shape(), "layer_norm",
                             x.requires_grad() || gamma.requires_grad() || beta.requires_grad());
  const index_t R = detail::row_count(x.value());
  node.saved.resize(1);
  node.saved[0].resize(Shape{R, 2});
  T* stats = node.saved[0].data();
  const T* xv = x.value().data();
  const T* g = gamma.value().data();
  const T* b = beta.value().data();
  T* yv = node.value->data();
  parallel_for(R, double(D) * 6, [&](index_t r) {
    const T* xr = xv + r * D;
    // Mean and biased variance in double, in two passes (no cancellation).
    const double mu =
        detail::lane_sum<double, 8>(D, [&](index_t j) { return double(xr[j]); }) / double(D);
    auto square = [&](index_t j) {
      const double c = xr[j] - mu;
      return c * c;
    };
    const double var = detail::lane_sum<double, 8>(D, square) / double(D);
    const T rstd = T(1.0 / std::sqrt(var + eps));
    stats[2 * r] = T(mu);
    stats[2 * r + 1] = rstd;
    for (index_t j = 0; j < D; ++j) yv[r * D + j] = g[j] * (xr[j] - T(mu)) * rstd + b[j];
  });
  tape.set_backward(node, detail::LayerNormOp{x.index(), gamma.index(), beta.index()});
  return y;
}

// Root-mean-square normalisation over the last axis ("Root Mean Square Layer Normalization",
// Biao Zhang and Rico Sennrich): y = γ x / √(mean(x²) + eps), no centring and no bias, as
// Llama's RMSNorm and PyTorch's nn.RMSNorm compute it (eps inside the root).
template <Operand X, Operand G>
auto rms_norm(const X& x_in, const G& gamma_in, double eps = 1e-6) {
  const auto x = eval(x_in);
  const auto gamma = eval(gamma_in);
  using T = typename decltype(x)::value_type;
  Tape<T>& tape = x.tape();
  tape.check(x, "rms_norm");
  tape.check(gamma, "rms_norm");
  const index_t D = x.shape().last();
  ATTN_CHECK(gamma.numel() == D, shape_error, "rms_norm: gamma ", gamma.shape(),
             " must have the last dimension of x ", x.shape());
  ATTN_CHECK(eps >= 0, value_error, "rms_norm: eps must be >= 0, got ", eps);
  auto [y, node] = tape.push(x.shape(), "rms_norm", x.requires_grad() || gamma.requires_grad());
  const index_t R = detail::row_count(x.value());
  node.saved.resize(1);
  node.saved[0].resize(Shape{R});
  T* inv = node.saved[0].data();
  const T* xv = x.value().data();
  const T* g = gamma.value().data();
  T* yv = node.value->data();
  parallel_for(R, double(D) * 4, [&](index_t r) {
    const T* xr = xv + r * D;
    const double ms =
        detail::lane_sum<double, 8>(D, [&](index_t j) { return double(xr[j]) * double(xr[j]); }) /
        double(D);
    const T rr = T(1.0 / std::sqrt(ms + eps));
    inv[r] = rr;
    for (index_t j = 0; j < D; ++j) yv[r * D + j] = g[j] * (xr[j] * rr);
  });
  tape.set_backward(node, detail::RmsNormOp{x.index(), gamma.index()});
  return y;
}

// Rows of `table` [V, D] picked by integer ids of any shape (rank <= 3): result ids.shape + [D].
template <class T>
Var<T> embedding(const Var<T>& table, const Tensor<std::int32_t>& ids) {
  Tape<T>& tape = table.tape();
  tape.check(table, "embedding");
  ATTN_CHECK(table.shape().rank() == 2, shape_error, "embedding: the table must be [V, D], got ",
             table.shape());
  ATTN_CHECK(ids.rank() <= 3, shape_error, "embedding: ids must have rank <= 3, got ", ids.shape());
  const index_t V = table.shape()[0], D = table.shape()[1];
  for (index_t i = 0; i < ids.numel(); ++i)
    ATTN_CHECK(ids[i] >= 0 && ids[i] < V, value_error, "embedding: id ", ids[i], " at position ", i,
               " is outside the table's ", V, " rows");
  std::array<index_t, 4> dims{};
  for (int i = 0; i < ids.rank(); ++i) dims[static_cast<std::size_t>(i)] = ids.shape()[i];
  dims[static_cast<std::size_t>(ids.rank())] = D;
  const Shape out(std::span<const index_t>(dims.data(), static_cast<std::size_t>(ids.rank() + 1)));
  auto [y, node] = tape.push(out, "embedding", table.requires_grad());
  const T* w = table.value().data();
  T* yv = node.value->data();
  parallel_for(ids.numel(), double(D),
               [&](index_t p) { std::copy_n(w + ids[p] * D, D, yv + p * D); });
  if (node.requires_grad) node.saved_index.assign(ids.begin(), ids.end());
  tape.set_backward(node, detail::EmbeddingOp{table.index()});
  return y;
}

// Mean negative log-likelihood of integer targets under softmax(logits) along the last axis.
// logits [..., V]; targets have the logits' shape without the last axis. Targets equal to
// ignore_index are left out of the mean; if every target is ignored the loss is 0 (not NaN).
template <Operand X>
auto cross_entropy(const X& logits_in, const Tensor<std::int32_t>& targets,
                   std::int32_t ignore_index = -100) {
  const auto logits = eval(logits_in);
  using T = typename decltype(logits)::value_type;
  Tape<T>& tape = logits.tape();
  tape.check(logits, "cross_entropy");
  const Shape& s = logits.shape();
  ATTN_CHECK(
      s.rank() >= 1 && targets.numel() * s.last() == s.numel() && targets.rank() == s.rank() - 1,
      shape_error, "cross_entropy: targets ", targets.shape(), " do not match logits ", s,
      " without the last axis");
  const index_t V = s.last(), R = targets.numel();
  index_t count = 0;
  for (index_t i = 0; i < R; ++i) {
    const std::int32_t t = targets[i];
    if (t == ignore_index) continue;
    ATTN_CHECK(t >= 0 && t < V, value_error, "cross_entropy: target ", t, " at position ", i,
               " is outside the vocabulary of ", V, " classes");
    ++count;
  }
  auto [loss, node] = tape.push(Shape{}, "cross_entropy", logits.requires_grad());
  node.saved.resize(1);
  node.saved[0].resize(Shape{R});
  T* lse = node.saved[0].data();
  const T* xv = logits.value().data();
  parallel_for(R, double(V) * 4, [&](index_t r) {
    const auto [m, l] = detail::max_and_log_sum_exp(xv + r * V, V);
    lse[r] = m + l;
  });
  double total = 0;  // summed in row order, in double
  for (index_t r = 0; r < R; ++r)
    if (targets[r] != ignore_index) total += double(lse[r]) - double(xv[r * V + targets[r]]);
  (*node.value)[0] = count ? T(total / double(count)) : T{0};
  if (node.requires_grad) node.saved_index.assign(targets.begin(), targets.end());
  tape.set_backward(node, detail::CrossEntropyOp{logits.index(), ignore_index, count});
  return loss;
}

// Inverted dropout: zeroes each element with probability p and scales the rest by 1/(1 − p).
// The mask comes from one draw of `rng` hashed with the element index, so it is the same for
// every thread count. With training = false (or p = 0) it is the identity.
template <Operand X>
auto dropout(const X& x_in, double p, Rng& rng, bool training = true) {
  const auto x = eval(x_in);
  using T = typename decltype(x)::value_type;
  ATTN_CHECK(p >= 0.0 && p <= 1.0, value_error, "dropout: p must be in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  Tape<T>& tape = x.tape();
  tape.check(x, "dropout");
  const std::uint64_t seed = rng.split();
  auto [y, node] = tape.push(x.shape(), "dropout", x.requires_grad());
  const DropoutMask mask(seed, p);
  const T* xv = x.value().data();
  T* yv = node.value->data();
  detail::dropout_blocks(x.numel(), [&](index_t lo, index_t n) {
    mask.apply(xv + lo, yv + lo, n, static_cast<std::uint64_t>(lo));
  });
  tape.set_backward(node, detail::DropoutOp{x.index(), p, seed});
  return y;
}

}  // namespace attn
