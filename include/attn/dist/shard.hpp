// attn/dist/shard.hpp: the data-parallel split of a training step that needs no MPI: which rows of
// a global batch each shard runs, which shards each rank runs, each shard's dropout seed, and the
// fixed order in which the shards' gradients are summed (ShardGradients, in one process).
// Does not communicate (attn/dist/mpi.hpp does) and does not run a model: a trainer computes each
// shard's gradient and hands it over.
//
// The contract every data-parallel step of attn follows, with S shards of a global batch of B rows
// and a model with P parameters:
//
//   shard s runs rows [⌊s·B/S⌋, ⌊(s+1)·B/S⌋) with its own dropout seed (shard_seeds), starting
//   from zero gradients; its gradient g_s and loss l_s are computed alone;
//   the step's gradient is the left fold  g = (((g_0 + g_1) + g_2) + … + g_{S−1})  elementwise in
//   the gradient's own type, and the loss  l = ((l_0 + l_1) + …) + l_{S−1}  in double.
//
// Floating-point addition is not associative, so this order is part of the result. One process
// running all S shards (ShardGradients) and R ranks running S/R shards each (dist::GradientReducer)
// perform exactly these additions, so they give the same bits for every R that divides S.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/rng.hpp"
#include "../core/shape.hpp"
#include "../optim/param_group.hpp"

namespace attn::dist {

// Rows [begin, end) of a batch.
struct RowRange {
  index_t begin = 0, end = 0;
  index_t size() const { return end - begin; }
  friend bool operator==(const RowRange&, const RowRange&) = default;
};

// The rows of shard `shard` of `shards` in a batch of `rows` rows:
//   [⌊shard·rows/shards⌋, ⌊(shard+1)·rows/shards⌋)
// contiguous, in order, sizes differing by at most one; a shard is empty when rows < shards.
inline RowRange shard_rows(index_t rows, index_t shards, index_t shard) {
  ATTN_CHECK(rows >= 0 && shards >= 1 && shard >= 0 && shard < shards, value_error,
             "dist::shard_rows: need rows >= 0 and 0 <= shard < shards, got rows = ", rows,
             ", shards = ", shards, ", shard = ", shard);
  return {shard * rows / shards, (shard + 1) * rows / shards};
}

// Which shards rank `rank` of `ranks` runs: the `ranks` ranks split the `shards` shards into equal
// contiguous runs, rank r running shards [r·k, (r+1)·k) with k = shards / ranks. Every rank
// derives its part of every global batch from (step, shards, rank) alone: no communication and no
// barrier decides who reads what.
struct ShardPlan {
  index_t shards = 1, ranks = 1, rank = 0;

  // Throws value_error unless 1 <= ranks, 0 <= rank < ranks and ranks divides shards.
  ShardPlan(index_t shards_, index_t ranks_, index_t rank_)
      : shards(shards_), ranks(ranks_), rank(rank_) {
    ATTN_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, value_error, "dist::ShardPlan: rank ", rank,
               " of ", ranks, " ranks does not exist");
    ATTN_CHECK(shards >= 1 && shards % ranks == 0, value_error, "dist::ShardPlan: ", shards,
               " shards cannot be split evenly over ", ranks,
               " ranks (the shard count must be a multiple of the rank count)");
  }

  index_t per_rank() const { return shards / ranks; }
  index_t first() const { return rank * per_rank(); }  // this rank's first shard
  bool runs(index_t shard) const { return shard >= first() && shard < first() + per_rank(); }
};

// The dropout seed of each of `shards` shards of a step whose seed is `step_seed`: the s-th draw
// of Rng(step_seed).split() for shard s, the same rule a trainer's micro-batches use for chunks.
inline std::vector<std::uint64_t> shard_seeds(std::uint64_t step_seed, index_t shards) {
  ATTN_CHECK(shards >= 1, value_error, "dist::shard_seeds: shards must be >= 1, got ", shards);
  Rng r(step_seed);
  std::vector<std::uint64_t> seeds(static_cast<std::size_t>(shards));
  for (auto& s : seeds) s = r.split();
  return seeds;
}

namespace detail {

// acc ← acc + x elementwise: one step of the left fold. Each element's additions happen in the
// order of the calls, whatever the vector width the compiler picks (no reassociation: there is
// nothing to reassociate in one addition per element).
template <class T>
void fold_into(T* acc, const T* x, index_t n) {
  for (index_t i = 0; i < n; ++i) acc[i] += x[i];
}

// Calls f(parameter index, first element within it, flat offset, count) for the pieces of the
// flat range [begin, end) of the parameters laid end to end in list order.
template <class T, class F>
void for_each_piece(const std::vector<optim::NamedParameter<T>>& params, index_t begin, index_t end,
                    F&& f) {
  index_t offset = 0;
  for (std::size_t i = 0; i < params.size() && offset < end; ++i) {
    const index_t n = params[i].param->grad.numel();
    const index_t lo = std::max(begin, offset), hi = std::min(end, offset + n);
    if (lo < hi) f(i, lo - offset, lo, hi - lo);
    offset += n;
  }
}

}  // namespace detail

// The gradients of the shards one process runs in a step, and the fixed-order fold of them.
//
//   ShardGradients<float> g(params, /*local=*/2);      // this process runs 2 shards a step
//   for (j = 0; j < 2; ++j) { backward of shard j; g.capture(j, loss_j); }
//   const double loss = g.fold();                       // gradients now in params, loss folded
//
// With blocks == 1 (one process runs every shard) capture(j) folds shard j in at once, so the
// object holds one gradient-sized buffer. With blocks = R > 1 (R ranks, attn/dist/mpi.hpp) it keeps
// each local shard's gradient, laid out block-major for the reduce-scatter: the gradient vector is
// cut into R contiguous blocks [⌊b·P/R⌋, ⌊(b+1)·P/R⌋), and block b of every local shard lies
// together, shard by shard, so that what rank b receives is one contiguous piece.
template <std::floating_point T>
class ShardGradients {
 public:
  ShardGradients(std::vector<optim::NamedParameter<T>> params, index_t local, index_t blocks = 1)
      : params_(std::move(params)), local_(local), blocks_(blocks) {
    ATTN_CHECK(local >= 1 && blocks >= 1, value_error,
               "dist::ShardGradients: need local shards >= 1 and blocks >= 1, got ", local, " and ",
               blocks);
    ATTN_CHECK(!params_.empty(), value_error, "dist::ShardGradients: no parameters");
    for (const auto& p : params_) {
      ATTN_CHECK(p.param != nullptr, value_error, "dist::ShardGradients: parameter '", p.name,
                 "' is a null pointer");
      sizes_.push_back(p.param->grad.numel());
      size_ += sizes_.back();
    }
    buffer_.assign(static_cast<std::size_t>(blocks_ == 1 ? size_ : size_ * local_), T(0));
    losses_.assign(static_cast<std::size_t>(local_), 0.0);
  }

  // The same layout (count and sizes of the gradients) for other Parameter objects, e.g. a new
  // model of the same configuration; throws shape_error when the sizes differ.
  void rebind(std::vector<optim::NamedParameter<T>> params) {
    ATTN_CHECK(fits(params), shape_error, "dist::ShardGradients::rebind: ", params.size(),
               " parameters do not have the sizes of the ", params_.size(), " it was set up for");
    params_ = std::move(params);
  }
  // Whether `params` has the count and sizes of these gradients.
  bool fits(const std::vector<optim::NamedParameter<T>>& params) const {
    if (params.size() != params_.size()) return false;
    for (std::size_t i = 0; i < params.size(); ++i)
      if (params[i].param == nullptr || params[i].param->grad.numel() != sizes_[i]) return false;
    return true;
  }

  index_t size() const { return size_; }  // P, the elements of all gradients together
  index_t local() const { return local_; }
  index_t blocks() const { return blocks_; }
  // Block b of the gradient vector: [block_begin(b), block_begin(b + 1)).
  index_t block_begin(index_t b) const { return b * size_ / blocks_; }
  index_t block_size(index_t b) const { return block_begin(b + 1) - block_begin(b); }
  const std::vector<optim::NamedParameter<T>>& parameters() const { return params_; }

  // Takes local shard j's gradient out of the parameters (leaving them zero for the next shard)
  // and records its loss. Shards are captured in order, j = 0, 1, …, local() − 1.
  void capture(index_t j, double loss) {
    ATTN_CHECK(j == captured_ && j < local_, value_error, "dist::ShardGradients::capture: shard ",
               j, " captured out of order (expected ", captured_, " of ", local_, ")");
    for (std::size_t i = 0; i < params_.size(); ++i)
      ATTN_CHECK(params_[i].param->grad.numel() == sizes_[i], shape_error,
                 "dist::ShardGradients::capture: the gradient of '", params_[i].name, "' has ",
                 params_[i].param->grad.numel(), " elements, ", sizes_[i],
                 " when the shards were set up");
    if (blocks_ == 1) {
      T* acc = buffer_.data();
      index_t offset = 0;
      for (const auto& p : params_) {  // shard 0 starts the fold, the others add to it
        const index_t n = p.param->grad.numel();
        if (j == 0)
          std::copy_n(p.param->grad.data(), n, acc + offset);
        else
          detail::fold_into(acc + offset, p.param->grad.data(), n);
        offset += n;
      }
    } else {
      for (index_t b = 0; b < blocks_; ++b) {
        T* dst = buffer_.data() + local_ * block_begin(b) + j * block_size(b);
        detail::for_each_piece(params_, block_begin(b), block_begin(b + 1),
                               [&](std::size_t i, index_t first, index_t flat, index_t count) {
                                 std::copy_n(params_[i].param->grad.data() + first, count,
                                             dst + (flat - block_begin(b)));
                               });
      }
    }
    for (const auto& p : params_) p.param->grad.zero();
    losses_[static_cast<std::size_t>(j)] = loss;
    ++captured_;
  }

  // One process, every shard local (blocks() == 1): writes g = (g_0 + g_1) + … into the parameters'
  // gradients and returns l = (l_0 + l_1) + …. Starts the next step's captures.
  double fold() {
    ATTN_CHECK(blocks_ == 1, value_error, "dist::ShardGradients::fold: the gradients are split in ",
               blocks_, " blocks for ranks; reduce them with dist::GradientReducer");
    ATTN_CHECK(captured_ == local_, value_error, "dist::ShardGradients::fold: ", captured_, " of ",
               local_, " shards captured");
    scatter(buffer_.data());
    captured_ = 0;
    return fold_losses(losses_);
  }

  // Writes the flat gradient vector g [P] into the parameters' gradients.
  void scatter(const T* g) {
    index_t offset = 0;
    for (const auto& p : params_) {
      std::copy_n(g + offset, p.param->grad.numel(), p.param->grad.data());
      offset += p.param->grad.numel();
    }
  }

  // l = ((l_0 + l_1) + …) + l_{n−1}, the loss of a step from its shards' losses in shard order.
  static double fold_losses(std::span<const double> l) {
    double s = l.empty() ? 0.0 : l[0];
    for (std::size_t i = 1; i < l.size(); ++i) s += l[i];
    return s;
  }

  // The block-major buffer (local() shards of every block) and the captured losses, for the
  // reducer; after reading them it calls done() to start the next step's captures.
  const T* data() const { return buffer_.data(); }
  std::span<const double> losses() const { return losses_; }
  index_t captured() const { return captured_; }
  void done() { captured_ = 0; }

 private:
  std::vector<optim::NamedParameter<T>> params_;
  std::vector<index_t> sizes_;  // elements of each parameter's gradient
  index_t local_ = 1, blocks_ = 1, size_ = 0, captured_ = 0;
  std::vector<T> buffer_;
  std::vector<double> losses_;
};

}  // namespace attn::dist
