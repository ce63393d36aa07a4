// attn/dist/data_parallel.hpp: data-parallel training steps for trainers: the ranks (MPI when the
// program is built with ATTN_WITH_MPI, links attn::dist and runs under mpirun; one process
// otherwise), the training step split into shards, and which rank prints and writes files (rank 0).
// Does not parse options or write files; without MPI it is one process that can still run a step
// as S shards, giving the bits that S ranks give.
//
// A run has a shard count S (saved in its checkpoints): every step splits its global batch into S
// shards (attn/dist/shard.hpp). One process runs all S in turn; R ranks run S/R each and reduce
// their gradients in shard order (GradientReducer): the same additions, so the same bits, for
// every R that divides S, which is also what lets a run resume with another rank count.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../optim/step.hpp"
#include "shard.hpp"

#ifdef ATTN_WITH_MPI
#include "mpi.hpp"
#endif

namespace attn::dist {

class DataParallel {
 public:
  // One process, no MPI.
  DataParallel() = default;

  // Joins the MPI job when the program was built with MPI (a world of one rank without mpirun).
  // Collectives give up after ATTN_DIST_TIMEOUT seconds (default 600) without an answer from the
  // other ranks; an ATTN_DIST_TIMEOUT that is not a positive number is a value_error.
  DataParallel(int& argc, char**& argv) {
#ifdef ATTN_WITH_MPI
    double timeout = 600;
    if (const char* env = std::getenv("ATTN_DIST_TIMEOUT")) {
      char* end = nullptr;
      timeout = std::strtod(env, &end);
      ATTN_CHECK(end != env && *end == '\0' && timeout > 0, value_error, "ATTN_DIST_TIMEOUT='", env,
                 "' is not a positive number of seconds");
    }
    world_ = std::make_unique<Context>(argc, argv, timeout);
#else
    (void)argc, (void)argv;
#endif
  }

  int rank() const {
#ifdef ATTN_WITH_MPI
    if (world_) return world_->rank();
#endif
    return 0;
  }
  int ranks() const {
#ifdef ATTN_WITH_MPI
    if (world_) return world_->size();
#endif
    return 1;
  }
  // Rank 0: the one that prints, logs, plots and writes checkpoints.
  bool leader() const {
    return rank() == 0;
  }

  // The shard count of a run whose batches have `batch` rows: `requested` (an option or a
  // checkpoint's; 0: one shard per rank). Throws value_error unless the ranks divide it and every
  // shard gets a row.
  index_t shards(index_t requested, index_t batch) const {
    const index_t s = requested > 0 ? requested : ranks();
    ATTN_CHECK(s % ranks() == 0, value_error, "data parallel: the run has ", s,
               " shards per step and ", ranks(),
               " ranks cannot split them evenly: run it with a number of ranks that divides ", s,
               ", or give --shards a multiple of ", ranks(),
               " (a new split: no longer the same bits as before)");
    ATTN_CHECK(s <= batch, value_error, "data parallel: ", s, " shards of a batch of ", batch,
               " sequences: every shard needs one (fewer --shards or ranks, or a larger --batch)");
    return s;
  }

  // One training step of the global batch x, y [N, T] as `shards` shards (see the file comment):
  // shard s runs rows shard_rows(N, shards, s) with the s-th seed of shard_seeds(dropout_seed)
  // (backward_rows, micro_batch as there), every chunk weighted by the counted targets of the
  // whole batch; then the fixed-order gradient sum and apply_step. With one shard it is
  // train_step.
  template <class Model, class Optimizer>
  optim::StepResult step(Model& model, Tape<float>& tape, Optimizer& opt,
                         const std::vector<optim::NamedParameter<float>>& params,
                         const Tensor<std::int32_t>& x, const Tensor<std::int32_t>& y,
                         std::int32_t ignore_index, double lr, double grad_clip,
                         std::uint64_t dropout_seed, index_t micro_batch, index_t shards) {
    if (shards == 1 && ranks() == 1)
      return optim::train_step(model, tape, opt, params, x, y, ignore_index, lr, grad_clip,
                               dropout_seed, micro_batch);
    const ShardPlan plan(shards, ranks(), rank());
    const index_t rows = x.shape()[0];
    const double n = optim::batch_targets(y, ignore_index);
    const std::vector<std::uint64_t> seeds = shard_seeds(dropout_seed, shards);
    prepare(params, plan.per_rank());
    for (index_t j = 0; j < plan.per_rank(); ++j) {
      const index_t s = plan.first() + j;
      const RowRange r = shard_rows(rows, shards, s);
      capture(j, optim::backward_rows(model, tape, x, y, ignore_index, r.begin, r.end, n,
                                      seeds[std::size_t(s)], micro_batch));
    }
    return optim::apply_step(opt, params, reduce(), lr, grad_clip);
  }

  // Rank 0's parameters on every rank (before the first step).
  template <class Model>
  void broadcast_parameters(Model& model) {
#ifdef ATTN_WITH_MPI
    if (world_) dist::broadcast_parameters(*world_, model);
#else
    (void)model;
#endif
  }

  // dist_error unless every rank holds rank 0's parameters (at each checkpoint).
  template <class Model>
  void check_replicas(Model& model) {
#ifdef ATTN_WITH_MPI
    if (world_) dist::check_replicas(*world_, model);
#else
    (void)model;
#endif
  }

  // Rank 0's value of a number on every rank (a setting only rank 0 measured or chose).
  template <class T>
  void broadcast(T& value) {
#ifdef ATTN_WITH_MPI
    if (world_) dist::broadcast(*world_, value);
#else
    (void)value;
#endif
  }

  // True on every rank when `flag` is true on any (ranks agreeing to stop at the same step).
  bool any(bool flag) {
#ifdef ATTN_WITH_MPI
    if (world_) return dist::any(*world_, flag);
#endif
    return flag;
  }

  // The end of the checks before training: call it on every rank after everything that may fail
  // before the first step (the options, the run's files, the data, the memory) and before the
  // first collective. It returns once every rank has got there. Where a rank failed first (it
  // reached finish with an error instead), it throws dist_error on the others naming that rank,
  // and that rank alone reports its error (see finish): the job ends with one message, a non-zero
  // exit status on every rank and no MPI_Abort, whose banner would bury the message.
  void start() {
    if (agreed_) return;
    agreed_ = true;
#ifdef ATTN_WITH_MPI
    if (world_ && world_->size() > 1) first_failed_ = dist::first_rank_with(*world_, false);
#endif
    ATTN_CHECK(first_failed_ < 0, dist_error, "data parallel: rank ", first_failed_,
               " failed before training; its error is the job's");
  }

  // main's exit status, after the job's end on this rank. `status` 0 is success, 1 to 127 a
  // failure, 128 + a signal a stop every rank agreed on (see any). `report` prints this rank's
  // error; finish calls it where this rank's error is the one the job reports: always in one
  // process; in a job, for a failure before start (a bad command line, a file, the data) only on
  // the first rank that failed, so that a failure every rank shares (a bad option, which they all
  // read) is printed once; for a failure after start, on the failing rank, which then ends the
  // others (MPI_Abort: they may be waiting for it). A rank that never called start takes part in
  // its agreement here, so that the others do not wait for it.
  int finish(int status, const std::function<void()>& report = {}) {
    const bool failed = status != 0 && status < 128;
    bool reports = failed;  // one process reports its own failure
#ifdef ATTN_WITH_MPI
    if (world_ && world_->size() > 1) {
      const bool before_start = !agreed_;
      if (before_start) {
        agreed_ = true;
        first_failed_ = dist::first_rank_with(*world_, failed);
      }
      // Before start: the first rank that failed; after it, a failure no agreement announced.
      reports = failed && (before_start ? first_failed_ == rank() : first_failed_ < 0);
      if (reports && report) report();
      if (reports && !before_start) world_->abort(status);
      // An agreed stop: no rank leaves before rank 0 has written its files (mpirun may end the
      // others once one exits with a non-zero status).
      if (status >= 128) (void)dist::any(*world_, false);
      reducer_.reset();
      world_.reset();
      return status;
    }
    reducer_.reset();
    world_.reset();
#endif
    if (reports && report) report();
    return status;
  }

 private:
  // The gradient buffers for `local` shards a step of these parameters, kept between steps. The
  // choice to rebuild them depends only on the shard count and the gradient sizes, never on
  // addresses, so that every rank makes it alike: building a reducer is a collective.
  void prepare(const std::vector<optim::NamedParameter<float>>& params, index_t local) {
    const auto reuse = [&](auto& g) {
      if (g && g->local() == local && g->fits(params)) return g->rebind(params), true;
      return false;
    };
#ifdef ATTN_WITH_MPI
    if (ranks() > 1) {
      ShardGradients<float>* g = reducer_ ? &reducer_->shards() : nullptr;
      if (!reuse(g)) reducer_.emplace(*world_, params, local);
      return;
    }
#endif
    if (!reuse(local_)) local_.emplace(params, local);
  }
  void capture(index_t j, double loss) {
#ifdef ATTN_WITH_MPI
    if (reducer_ && ranks() > 1) return reducer_->capture(j, loss);
#endif
    local_->capture(j, loss);
  }
  double reduce() {
#ifdef ATTN_WITH_MPI
    if (reducer_ && ranks() > 1) return reducer_->reduce();
#endif
    return local_->fold();
  }

#ifdef ATTN_WITH_MPI
  std::unique_ptr<Context> world_;  // null: one process
  std::optional<GradientReducer<float>> reducer_;
#endif
  std::optional<ShardGradients<float>> local_;
  bool agreed_ = false;    // this rank has taken part in start's agreement (in start or finish)
  int first_failed_ = -1;  // the first rank that failed before start, -1 for none
};

}  // namespace attn::dist
