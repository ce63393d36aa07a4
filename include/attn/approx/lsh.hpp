// attn/approx/lsh.hpp: LSH attention (Kitaev et al. 2020, "Reformer"), as the value-aware study
// runs it: queries and keys are hashed by random rotations into buckets, sorted by (bucket,
// position) and chunked; each query chunk attends to its own and the previous key chunk; the
// keys found over several hash rounds are merged and attention is normalised over them.
// Does not share queries and keys (Reformer's tied QK), reorder values in memory, or train:
// it computes attention for given q, k, v, touching only the selected pairs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "../attention/attention.hpp"
#include "../attention/reference.hpp"  // reference_features: φ in double

namespace attn::approx {

// Hash rounds, chunk size B and bucket count C. Per round, a query attends to at most 2B keys
// (its chunk and the one before), so B = r/2 for a budget of r keys per round.
struct LshConfig {
  index_t chunk = 32;      // B
  index_t rounds = 1;      // hash rounds; the keys found in any round are used once each
  index_t buckets = 0;     // C (even); 0: 2·⌈Tk / B⌉, Kitaev et al.'s choice C = 2L/B
  std::uint64_t seed = 0;  // the rotations of round t, head h depend on (seed, t, h) only

  void validate() const {
    ATTN_CHECK(chunk >= 1 && rounds >= 1 && buckets >= 0 && buckets % 2 == 0, value_error,
               "LshConfig: need chunk >= 1, rounds >= 1 and an even buckets >= 0 (0 = automatic), "
               "got chunk ",
               chunk, ", rounds ", rounds, ", buckets ", buckets);
  }
  index_t bucket_count(index_t tk) const {
    return buckets > 0 ? buckets : 2 * std::max<index_t>(1, (tk + chunk - 1) / chunk);
  }
};

namespace detail {

// The random matrix R [C/2, d] of standard normals for round t of head h.
inline Eigen::MatrixXd lsh_rotation(const LshConfig& c, index_t round, index_t head, index_t half,
                                    index_t dim) {
  Rng rng(c.seed ^ (static_cast<std::uint64_t>(round) * 0x9E3779B97F4A7C15ull) ^
          (static_cast<std::uint64_t>(head + 1) * 0xD1B54A32D192ED03ull));
  Eigen::MatrixXd r(half, dim);
  for (index_t a = 0; a < half; ++a)
    for (index_t b = 0; b < dim; ++b) r(a, b) = rng.normal();
  return r;
}

// h_R(x) = argmax([−Rx; Rx]) ∈ {0, …, C − 1} for the n rows of x [n, d] (first maximum on ties).
template <class T>
std::vector<index_t> lsh_hash(const T* x, index_t n, index_t dim, const Eigen::MatrixXd& r) {
  std::vector<index_t> bucket(static_cast<std::size_t>(n));
  const index_t half = r.rows();
  Eigen::VectorXd xi(dim), p(half);
  for (index_t i = 0; i < n; ++i) {
    for (index_t b = 0; b < dim; ++b) xi(b) = static_cast<double>(x[i * dim + b]);
    p.noalias() = r * xi;
    index_t best = 0;
    double best_v = -p(0);
    for (index_t a = 0; a < half; ++a)
      if (-p(a) > best_v) best_v = -p(a), best = a;
    for (index_t a = 0; a < half; ++a)
      if (p(a) > best_v) best_v = p(a), best = half + a;
    bucket[static_cast<std::size_t>(i)] = best;
  }
  return bucket;
}

// The chunk of every item once the items are sorted by (bucket, position) and cut into chunks
// of `chunk`.
inline std::vector<index_t> lsh_chunks(const std::vector<index_t>& bucket, index_t chunk) {
  std::vector<index_t> order(bucket.size());
  std::iota(order.begin(), order.end(), index_t{0});
  std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) {
    return bucket[static_cast<std::size_t>(a)] < bucket[static_cast<std::size_t>(b)];
  });
  std::vector<index_t> c(bucket.size());
  for (std::size_t rank = 0; rank < order.size(); ++rank)
    c[static_cast<std::size_t>(order[rank])] = static_cast<index_t>(rank) / chunk;
  return c;
}

}  // namespace detail

// For query head (b, h) of q [B, H, Tq, Dh] and k [B, Hk, Tk, Dh]: the sorted keys each query
// sees, the union over rounds of {j : chunk_k(j) ∈ {chunk_q(i) − 1, chunk_q(i)}}, restricted to
// the pairs the mask allows. The chunks come from sorting queries and keys separately by
// (bucket, position) under the same rotations.
template <class T, MaskPolicy Mask = mask::None>
std::vector<std::vector<index_t>> lsh_candidates(const Tensor<T>& q, const Tensor<T>& k, index_t b,
                                                 index_t h, const LshConfig& config,
                                                 const Mask& mask = {}) {
  config.validate();
  const attn::detail::AttentionGeometry g =
      attn::detail::attention_geometry(q.shape(), k.shape(), k.shape(), "lsh_candidates");
  ATTN_CHECK(b >= 0 && b < g.B && h >= 0 && h < g.H, value_error, "lsh_candidates: head (", b, ", ",
             h, ") outside ", q.shape());
  mask.validate(g.B, g.Tq, g.Tk);
  const index_t hk = h / g.group(), half = config.bucket_count(g.Tk) / 2;
  const index_t key_chunks = (g.Tk + config.chunk - 1) / config.chunk;
  std::vector<std::vector<index_t>> seen(static_cast<std::size_t>(g.Tq));
  std::vector<std::vector<index_t>> by_chunk;  // the keys of each key chunk, this round
  for (index_t t = 0; t < config.rounds; ++t) {
    const Eigen::MatrixXd r = detail::lsh_rotation(config, t, h, half, g.Dh);
    const auto qc = detail::lsh_chunks(detail::lsh_hash(q.data() + g.q_off(b, h, 0), g.Tq, g.Dh, r),
                                       config.chunk);
    const auto kc = detail::lsh_chunks(
        detail::lsh_hash(k.data() + g.k_off(b, hk, 0), g.Tk, g.Dh, r), config.chunk);
    by_chunk.assign(static_cast<std::size_t>(key_chunks), {});
    for (index_t j = 0; j < g.Tk; ++j)
      by_chunk[static_cast<std::size_t>(kc[static_cast<std::size_t>(j)])].push_back(j);
    for (index_t i = 0; i < g.Tq; ++i) {
      const index_t c = qc[static_cast<std::size_t>(i)];
      for (index_t cc = std::max<index_t>(0, c - 1); cc <= std::min(c, key_chunks - 1); ++cc)
        for (const index_t j : by_chunk[static_cast<std::size_t>(cc)])
          if (mask.allowed(b, i, j, g.Tq, g.Tk)) seen[static_cast<std::size_t>(i)].push_back(j);
    }
  }
  for (auto& keys : seen) {
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  }
  return seen;
}

// Attention of query head (b, h) restricted to given key sets: for every query i,
//     o_i = Σ_{j ∈ S_i} κ(q_i, k_j) v_j / Σ_{j ∈ S_i} κ(q_i, k_j)      (o_i = 0 when the sum is 0),
// with κ the model's kernel of its score: exp(s − max over S_i) for Softmax (the max cancels),
// s^C for Polynomial<C>, φ(c·q)·φ(c·k) for the exact feature maps (EluPlusOne, Relu, TaylorExp; c
// as in Attention). Only the |S_i| selected pairs are scored: O(Σ_i |S_i|·(Dh + Dv)). Writes out[b,
// h] ([B, H, Tq, Dv]).
template <ScorePolicy Score, KernelPolicy Kernel, class T>
void restricted_attention(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v,
                          const Score& score, const Kernel& kernel, index_t b, index_t h,
                          const std::vector<std::vector<index_t>>& keys, Tensor<T>& out) {
  static_assert(!std::is_same_v<Kernel, kernel::RandomFeatures>,
                "attn: restricted attention scores exact kernels; random features estimate one");
  const attn::detail::AttentionGeometry g =
      attn::detail::attention_geometry(q.shape(), k.shape(), v.shape(), "restricted_attention");
  ATTN_CHECK(out.shape() == (Shape{g.B, g.H, g.Tq, g.Dv}), shape_error,
             "restricted_attention: out is ", out.shape(), ", expected ",
             Shape{g.B, g.H, g.Tq, g.Dv});
  ATTN_CHECK(static_cast<index_t>(keys.size()) == g.Tq, shape_error,
             "restricted_attention: ", keys.size(), " key sets for ", g.Tq, " queries");
  const index_t hk = h / g.group();
  const auto vec = [&](const T* x) {
    std::vector<double> r(static_cast<std::size_t>(g.Dh));
    for (index_t d = 0; d < g.Dh; ++d) r[static_cast<std::size_t>(d)] = static_cast<double>(x[d]);
    return r;
  };
  // Feature maps: φ of every key once.
  std::vector<std::vector<double>> fk;
  [[maybe_unused]] const double c = attn::detail::feature_input_scale<Score>(g.Dh);
  const auto phi = [&](const T* x, FeatureSide side) {  // φ(c x), used by feature maps only
    std::vector<double> r = vec(x);
    for (double& xi : r) xi *= c;
    if constexpr (Kernel::feature_map)
      return attn::detail::reference_features(kernel, r, g.Dh, side);
    else
      return r;
  };
  if constexpr (Kernel::feature_map) {
    static_assert(std::is_same_v<Score, score::Dot> || std::is_same_v<Score, score::ScaledDot>,
                  "attn: feature-map kernels need an inner-product score (score::Dot or "
                  "score::ScaledDot)");
    for (index_t j = 0; j < g.Tk; ++j)
      fk.push_back(phi(k.data() + g.k_off(b, hk, j), FeatureSide::key));
  }
  std::vector<double> kappa, acc(static_cast<std::size_t>(g.Dv));
  for (index_t i = 0; i < g.Tq; ++i) {
    const auto& s_i = keys[static_cast<std::size_t>(i)];
    kappa.assign(s_i.size(), 0.0);
    if constexpr (Kernel::feature_map) {
      const auto fq = phi(q.data() + g.q_off(b, h, i), FeatureSide::query);
      for (std::size_t n = 0; n < s_i.size(); ++n) {
        const auto& f = fk[static_cast<std::size_t>(s_i[n])];
        double dot = 0;
        for (std::size_t a = 0; a < f.size(); ++a) dot += fq[a] * f[a];
        kappa[n] = dot;
      }
    } else {
      double smax = -std::numeric_limits<double>::infinity();
      for (std::size_t n = 0; n < s_i.size(); ++n) {
        kappa[n] = score(q.data() + g.q_off(b, h, i), k.data() + g.k_off(b, hk, s_i[n]), g.Dh);
        smax = std::max(smax, kappa[n]);
      }
      for (double& x : kappa) {
        // exp(s − max): the same weights after normalising, without overflow.
        if constexpr (std::is_same_v<Kernel, kernel::Softmax>)
          x = std::exp(x - smax);
        else
          x = kernel.value(x);
      }
    }
    double z = 0;
    for (const double x : kappa) z += x;
    std::fill(acc.begin(), acc.end(), 0.0);
    if (z != 0)
      for (std::size_t n = 0; n < s_i.size(); ++n) {
        const T* vj = v.data() + g.v_off(b, hk, s_i[n]);
        for (index_t d = 0; d < g.Dv; ++d)
          acc[static_cast<std::size_t>(d)] += kappa[n] / z * static_cast<double>(vj[d]);
      }
    T* o = out.data() + g.o_off(b, h, i);
    for (index_t d = 0; d < g.Dv; ++d) o[d] = static_cast<T>(acc[static_cast<std::size_t>(d)]);
  }
}

// LSH attention: q [B, H, Tq, Dh], k [B, Hk, Tk, Dh], v [B, Hk, Tk, Dv] -> [B, H, Tq, Dv], each
// query attending (under the model's score and kernel, and the mask) to the keys lsh_candidates
// finds for it. Heads run in parallel; the result does not depend on the thread count. With
// `key_counts`, it receives the number of keys each query attended to, [B·H·Tq] in row order.
template <ScorePolicy Score, KernelPolicy Kernel, MaskPolicy Mask, class T>
Tensor<T> lsh_attention(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v,
                        const Score& score, const Kernel& kernel, const Mask& mask,
                        const LshConfig& config, std::vector<index_t>* key_counts = nullptr) {
  config.validate();
  const attn::detail::AttentionGeometry g =
      attn::detail::attention_geometry(q.shape(), k.shape(), v.shape(), "lsh_attention");
  mask.validate(g.B, g.Tq, g.Tk);
  Tensor<T> out(Shape{g.B, g.H, g.Tq, g.Dv});
  if (key_counts != nullptr) key_counts->assign(static_cast<std::size_t>(g.B * g.H * g.Tq), 0);
  const double per_head =
      double(g.Tq) * double(config.rounds) * double(2 * config.chunk) * double(g.Dh + g.Dv);
  parallel_for(g.B * g.H, per_head, [&](index_t bh) {
    const index_t b = bh / g.H, h = bh % g.H;
    const auto keys = lsh_candidates(q, k, b, h, config, mask);
    restricted_attention(q, k, v, score, kernel, b, h, keys, out);
    if (key_counts != nullptr)
      for (index_t i = 0; i < g.Tq; ++i)
        (*key_counts)[static_cast<std::size_t>(g.row(b, h, i))] =
            static_cast<index_t>(keys[static_cast<std::size_t>(i)].size());
  });
  return out;
}

}  // namespace attn::approx
