// attn/dist/mpi.hpp: data-parallel training over MPI: the ranks (Context), the broadcast of the
// initial parameters from rank 0, the gradient all-reduce in a fixed summation order
// (GradientReducer), a check that the replicas agree, and small collectives a trainer needs.
// Does not split a model over ranks (no tensor or pipeline parallelism), overlap communication
// with the backward pass, or talk to the network itself: every byte goes through MPI.
//
// Why not MPI_Allreduce: MPI does not promise an order for its reductions, and Open MPI chooses
// its algorithm (ring, recursive doubling, Rabenseifner…) by message size and rank count, so the
// bits of a sum would depend on both. The gradient all-reduce here uses MPI only to move data:
//
//   reduce-scatter by blocks: the gradient vector [P] is cut into R blocks, block b belongs to
//     rank b; MPI_Ialltoallv sends every local shard's block b to rank b, which folds the R·k
//     pieces in global shard order, g_b = ((g_{0,b} + g_{1,b}) + …) (attn/dist/shard.hpp);
//   all-gather: MPI_Iallgatherv gives every rank every folded block.
//
// Each element is added in shard order whatever R, MPI's algorithms or the network, so R ranks
// give the bits of one process folding the same shards (ShardGradients). Each rank sends and
// receives (R−1)/R·k·P elements in the first phase and (R−1)/R·P in the second: with one shard
// per rank the 2(R−1)/R·P of a ring all-reduce, in R−1 messages per phase instead of a ring's.
//
// Failure: every collective is non-blocking and polled against a deadline (Context::timeout),
// and the communicator returns errors instead of aborting (MPI_ERRORS_RETURN), so a rank whose
// peer died or hangs throws dist_error naming the operation instead of waiting forever; the
// Context then ends the job with MPI_Abort instead of MPI_Finalize (which would wait for the
// lost rank). Under mpirun a rank that dies ends the job anyway (mpirun kills the others).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../optim/param_group.hpp"
#include "shard.hpp"

namespace attn::dist {

namespace detail {

template <class T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  if constexpr (std::is_same_v<T, std::uint64_t>) return MPI_UINT64_T;
  if constexpr (std::is_same_v<T, int>) return MPI_INT;
  if constexpr (std::is_same_v<T, std::byte>) return MPI_BYTE;
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> ||
                    std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::uint64_t> ||
                    std::is_same_v<T, int> || std::is_same_v<T, std::byte>,
                "attn: dist collectives move float, double, int, int64, uint64 or bytes");
  return MPI_DATATYPE_NULL;
}

// An MPI count (an int), or dist_error when n does not fit.
inline int mpi_count(index_t n, const char* op) {
  ATTN_CHECK(n >= 0 && n <= INT_MAX, dist_error, op, ": ", n,
             " elements do not fit in one MPI message (at most ", INT_MAX, ")");
  return static_cast<int>(n);
}

}  // namespace detail

// The ranks of a data-parallel job.
//
//   int main(int argc, char** argv) {
//     attn::dist::Context world(argc, argv);     // MPI_Init_thread … MPI_Finalize (RAII)
//     … world.rank(), world.size(), world.leader() …
//   }
//
// Initialises MPI (MPI_THREAD_FUNNELED: OpenMP threads compute, only the calling thread talks to
// MPI) unless the program did already, and then leaves finalising to the program. The collectives
// run on a duplicate of MPI_COMM_WORLD whose error handler returns errors (MPI_ERRORS_RETURN), so
// a failure becomes a dist_error. Started without mpirun, it is a world of one rank.
//
// Ending: the destructor calls MPI_Finalize after a normal run. After a failed collective, during
// an exception, or through abort(code), it calls MPI_Abort instead when there are other ranks:
// they may be waiting in a collective this rank will never join, and MPI_Abort ends them (under
// mpirun, the whole job) instead of leaving them to their own timeouts.
class Context {
 public:
  // timeout_seconds: how long a collective waits for the other ranks before dist_error.
  Context(int& argc, char**& argv, double timeout_seconds = 600.0) {
    init(&argc, &argv, timeout_seconds);
  }
  explicit Context(double timeout_seconds = 600.0) { init(nullptr, nullptr, timeout_seconds); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  ~Context() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (size_ > 1 && (failed_ || std::uncaught_exceptions() > 0)) abort(1);
    if (!failed_) MPI_Comm_free(&comm_);
    if (owns_) MPI_Finalize();
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool leader() const { return rank_ == 0; }  // rank 0: the one that prints and writes files
  MPI_Comm comm() const { return comm_; }
  bool failed() const { return failed_; }

  double timeout() const { return timeout_; }
  void set_timeout(double seconds) {
    ATTN_CHECK(seconds > 0, value_error, "dist::Context: the timeout must be > 0 s, got ", seconds);
    timeout_ = seconds;
  }

  // Ends every rank of the job with exit status `code` (MPI_Abort on MPI_COMM_WORLD).
  [[noreturn]] void abort(int code) {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; this is for the compiler
  }

  // Throws dist_error naming `op` and the MPI call when rc is not MPI_SUCCESS.
  void check(int rc, const char* op, const char* call) {
    if (rc == MPI_SUCCESS) return;
    failed_ = true;
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw dist_error(attn::detail::message(op, ": ", call, " failed on rank ", rank_, " of ", size_,
                                           ": ", std::string(text, std::size_t(len))));
  }

  // Waits for a non-blocking collective, polling it with MPI_Test (which also drives its
  // progress) and sleeping between polls (5 µs doubling to 500 µs, so a waiting rank leaves its
  // core to the ranks and threads still computing). After timeout() seconds throws dist_error.
  void wait(MPI_Request& request, const char* op, const char* call) {
    const auto start = std::chrono::steady_clock::now();
    auto pause = std::chrono::microseconds(5);
    for (;;) {
      int done = 0;
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), op, call);
      if (done) return;
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > timeout_) {
        failed_ = true;
        throw dist_error(
            attn::detail::message(op, ": rank ", rank_, " of ", size_, " waited ", waited, " s in ",
                                  call, " for the other ranks (timeout ", timeout_,
                                  " s): a rank has died, hangs or is far slower; giving up"));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(500));
    }
  }

 private:
  void init(int* argc, char*** argv, double timeout_seconds) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
      ATTN_CHECK(rc == MPI_SUCCESS, dist_error, "dist::Context: MPI_Init_thread failed (code ", rc,
                 ")");
      owns_ = true;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    set_timeout(timeout_seconds);
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  double timeout_ = 600.0;
  bool owns_ = false, failed_ = false;
};

// ---- small collectives -----------------------------------------------------------------------

// Every rank's `local` values, concatenated in rank order (the counts may differ between ranks).
template <class T>
std::vector<T> all_gather(Context& ctx, std::span<const T> local,
                          const char* op = "dist::all_gather") {
  const int n = detail::mpi_count(index_t(local.size()), op);
  std::vector<int> counts(std::size_t(ctx.size())), displs(std::size_t(ctx.size()));
  MPI_Request req;
  ctx.check(MPI_Iallgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, ctx.comm(), &req), op,
            "MPI_Iallgather");
  ctx.wait(req, op, "MPI_Iallgather");
  index_t total = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    displs[r] = detail::mpi_count(total, op);
    total += counts[r];
  }
  std::vector<T> all(static_cast<std::size_t>(total));
  ctx.check(MPI_Iallgatherv(local.data(), n, detail::mpi_type<T>(), all.data(), counts.data(),
                            displs.data(), detail::mpi_type<T>(), ctx.comm(), &req),
            op, "MPI_Iallgatherv");
  ctx.wait(req, op, "MPI_Iallgatherv");
  return all;
}

// True on every rank when `flag` is true on any rank (a logical OR: exact in any order), e.g. for
// ranks to agree to stop after the same step when one of them is interrupted.
inline bool any(Context& ctx, bool flag) {
  const int mine = flag ? 1 : 0;
  int result = 0;
  MPI_Request req;
  ctx.check(MPI_Iallreduce(&mine, &result, 1, MPI_INT, MPI_LOR, ctx.comm(), &req), "dist::any",
            "MPI_Iallreduce");
  ctx.wait(req, "dist::any", "MPI_Iallreduce");
  return result != 0;
}

// The lowest rank where `flag` is true, or -1 where it is false on every rank (a minimum: exact in
// any order), e.g. for the ranks to agree which one's error ends the job.
inline int first_rank_with(Context& ctx, bool flag) {
  const int mine = flag ? ctx.rank() : ctx.size();
  int result = 0;
  MPI_Request req;
  ctx.check(MPI_Iallreduce(&mine, &result, 1, MPI_INT, MPI_MIN, ctx.comm(), &req),
            "dist::first_rank_with", "MPI_Iallreduce");
  ctx.wait(req, "dist::first_rank_with", "MPI_Iallreduce");
  return result < ctx.size() ? result : -1;
}

// Rank 0's bytes on every rank (data.size() must be the same on every rank).
inline void broadcast_bytes(Context& ctx, std::byte* data, index_t size, const char* op) {
  constexpr index_t chunk = index_t{1} << 30;  // MPI counts are ints
  for (index_t begin = 0; begin < size; begin += chunk) {
    MPI_Request req;
    ctx.check(
        MPI_Ibcast(data + begin, int(std::min(chunk, size - begin)), MPI_BYTE, 0, ctx.comm(), &req),
        op, "MPI_Ibcast");
    ctx.wait(req, op, "MPI_Ibcast");
  }
}

// Rank 0's value of a trivially copyable `value` (a number, a settings struct) on every rank.
template <class T>
requires std::is_trivially_copyable_v<T>
void broadcast(Context& ctx, T& value) {
  broadcast_bytes(ctx, reinterpret_cast<std::byte*>(&value), index_t(sizeof(T)), "dist::broadcast");
}

// Rank 0's string on every rank.
inline void broadcast(Context& ctx, std::string& s) {
  std::uint64_t n = s.size();
  broadcast(ctx, n);
  s.resize(std::size_t(n));
  broadcast_bytes(ctx, reinterpret_cast<std::byte*>(s.data()), index_t(n), "dist::broadcast");
}

// ---- parameters ------------------------------------------------------------------------------

namespace detail {

// The parameter values of `module` as (pointer, bytes) in for_each_parameter order.
template <class Module>
std::vector<std::pair<std::byte*, index_t>> parameter_bytes(Module& module) {
  std::vector<std::pair<std::byte*, index_t>> out;
  module.for_each_parameter([&](const std::string&, auto& p) {
    out.emplace_back(reinterpret_cast<std::byte*>(p.value.data()),
                     index_t(p.value.numel()) * index_t(sizeof(*p.value.data())));
  });
  return out;
}

// Every rank's pair (a, b), gathered; `differs` is the first rank whose pair is not rank 0's, or 0
// when all agree (the same on every rank, so that every rank throws alike).
struct Agreement {
  std::vector<std::int64_t> pairs;  // [2 R]: a, b of rank 0, of rank 1, …
  int differs = 0;
  std::int64_t a(int r) const { return pairs[std::size_t(2 * r)]; }
  std::int64_t b(int r) const { return pairs[std::size_t(2 * r + 1)]; }
};
inline Agreement agree(Context& ctx, std::int64_t a, std::int64_t b, const char* op) {
  const std::int64_t mine[2] = {a, b};
  Agreement g{all_gather<std::int64_t>(ctx, mine, op), 0};
  for (int r = 1; r < ctx.size() && g.differs == 0; ++r)
    if (g.a(r) != g.a(0) || g.b(r) != g.b(0)) g.differs = r;
  return g;
}

}  // namespace detail

// Copies rank 0's parameter values into every rank's `module` (before the first step, so that the
// replicas start equal even when their initialisation or loading differed). Throws dist_error when
// the ranks' models have different parameter counts or sizes.
template <class Module>
void broadcast_parameters(Context& ctx, Module& module) {
  const char* op = "dist::broadcast_parameters";
  const auto pieces = detail::parameter_bytes(module);
  std::int64_t bytes = 0;
  for (const auto& [p, n] : pieces) bytes += n;
  const detail::Agreement g = detail::agree(ctx, std::int64_t(pieces.size()), bytes, op);
  ATTN_CHECK(g.differs == 0, dist_error, op, ": rank ", g.differs, " has ", g.a(g.differs),
             " parameter tensors of ", g.b(g.differs), " bytes, rank 0 has ", g.a(0), " of ",
             g.b(0), " bytes: the ranks do not build the same model");
  std::vector<std::byte> flat(static_cast<std::size_t>(bytes));
  std::size_t at = 0;
  if (ctx.leader())
    for (const auto& [p, n] : pieces) {
      std::memcpy(flat.data() + at, p, std::size_t(n));
      at += std::size_t(n);
    }
  broadcast_bytes(ctx, flat.data(), bytes, op);
  at = 0;
  for (const auto& [p, n] : pieces) {
    std::memcpy(p, flat.data() + at, std::size_t(n));
    at += std::size_t(n);
  }
}

// Throws dist_error naming the first rank whose parameter values differ from rank 0's (compared by
// a 64-bit FNV-1a hash of their bytes). Data-parallel replicas stay equal only when every rank
// computes the same bits: the same binary on the same kind of CPU; a trainer checks it at each
// checkpoint, for the price of one small all-gather.
template <class Module>
void check_replicas(Context& ctx, Module& module) {
  const char* op = "dist::check_replicas";
  std::uint64_t h = 1469598103934665603ull;
  for (const auto& [p, n] : detail::parameter_bytes(module))
    for (index_t i = 0; i < n; ++i) h = (h ^ std::uint64_t(p[i])) * 1099511628211ull;
  const std::uint64_t mine[1] = {h};
  const std::vector<std::uint64_t> all = all_gather<std::uint64_t>(ctx, mine, op);
  for (int r = 1; r < ctx.size(); ++r)
    ATTN_CHECK(all[std::size_t(r)] == all[0], dist_error, op, ": the parameters of rank ", r,
               " differ from rank 0's (hash ", all[std::size_t(r)], " vs ", all[0],
               "): the replicas diverged; run the same binary on the same kind of CPU everywhere");
}

// ---- the gradient all-reduce -----------------------------------------------------------------

// Sums the gradients of all shards of a step over all ranks in shard order (the file's comment
// says how), leaving the same step gradient in every rank's parameters.
//
//   GradientReducer<float> reducer(ctx, optim::parameters_of<float>(model), /*local shards*/ 1);
//   … backward of this rank's shard …
//   reducer.capture(0, shard_loss);
//   const double loss = reducer.reduce();   // every rank: the step's gradient and loss
//
// Every rank constructs it at the same point (it checks that the ranks agree on the gradient size
// and the shard count, a collective) and calls reduce() once per step. With one rank, reduce()
// is ShardGradients::fold, without any MPI call.
template <std::floating_point T>
class GradientReducer {
 public:
  GradientReducer(Context& ctx, std::vector<optim::NamedParameter<T>> params,
                  index_t local_shards = 1)
      : ctx_(ctx), shards_(std::move(params), local_shards, ctx.size()) {
    const char* op = "dist::GradientReducer";
    const index_t ranks = ctx.size(), k = local_shards, mine = shards_.block_size(ctx.rank());
    detail::mpi_count(k * shards_.size(), op);  // the largest count or displacement below
    detail::mpi_count(k * ranks * mine, op);
    const detail::Agreement g = detail::agree(ctx, std::int64_t(shards_.size()), k, op);
    ATTN_CHECK(g.differs == 0, dist_error, op, ": rank ", g.differs, " has ", g.a(g.differs),
               " gradient elements in ", g.b(g.differs), " shards, rank 0 has ", g.a(0), " in ",
               g.b(0), ": the ranks must run the same model and the same number of shards each");
    if (ranks == 1) return;
    for (index_t b = 0; b < ranks; ++b) {
      send_counts_.push_back(int(k * shards_.block_size(b)));
      send_displs_.push_back(int(k * shards_.block_begin(b)));
      recv_counts_.push_back(int(k * mine));
      recv_displs_.push_back(int(b * k * mine));
      block_counts_.push_back(int(shards_.block_size(b)));
      block_displs_.push_back(int(shards_.block_begin(b)));
    }
    received_.resize(std::size_t(k * ranks * mine));
    gathered_.resize(std::size_t(shards_.size()));
  }

  index_t local_shards() const { return shards_.local(); }
  ShardGradients<T>& shards() { return shards_; }

  // Takes local shard j's gradient out of the parameters (see ShardGradients::capture).
  void capture(index_t j, double loss) { shards_.capture(j, loss); }

  // After every local shard is captured: the step's gradient g = ((g_0 + g_1) + …) + g_{S−1}
  // into every parameter's gradient, on every rank; returns the step's loss (l_0 + l_1) + ….
  double reduce() {
    const char* op = "dist::GradientReducer::reduce";
    ATTN_CHECK(shards_.captured() == shards_.local(), value_error, op, ": ", shards_.captured(),
               " of ", shards_.local(), " local shards captured");
    if (ctx_.size() == 1) return shards_.fold();
    const MPI_Datatype type = detail::mpi_type<T>();
    const index_t k = shards_.local(), mine = shards_.block_size(ctx_.rank());

    // Phase 1: every rank's k pieces of my block, and everyone's shard losses.
    MPI_Request req[2];
    ctx_.check(MPI_Ialltoallv(shards_.data(), send_counts_.data(), send_displs_.data(), type,
                              received_.data(), recv_counts_.data(), recv_displs_.data(), type,
                              ctx_.comm(), &req[0]),
               op, "MPI_Ialltoallv");
    std::vector<double> losses(std::size_t(k * ctx_.size()));
    ctx_.check(MPI_Iallgather(shards_.losses().data(), int(k), MPI_DOUBLE, losses.data(), int(k),
                              MPI_DOUBLE, ctx_.comm(), &req[1]),
               op, "MPI_Iallgather");
    ctx_.wait(req[0], op, "MPI_Ialltoallv");
    ctx_.wait(req[1], op, "MPI_Iallgather");

    // The fold of my block: piece r·k + j (rank r's local shard j) is global shard r·k + j.
    T* block = gathered_.data() + shards_.block_begin(ctx_.rank());
    std::copy_n(received_.data(), mine, block);
    for (index_t piece = 1; piece < k * ctx_.size(); ++piece)
      dist::detail::fold_into(block, received_.data() + piece * mine, mine);

    // Phase 2: every folded block to every rank.
    ctx_.check(MPI_Iallgatherv(MPI_IN_PLACE, 0, type, gathered_.data(), block_counts_.data(),
                               block_displs_.data(), type, ctx_.comm(), &req[0]),
               op, "MPI_Iallgatherv");
    ctx_.wait(req[0], op, "MPI_Iallgatherv");
    shards_.scatter(gathered_.data());
    shards_.done();
    return ShardGradients<T>::fold_losses(losses);
  }

 private:
  Context& ctx_;
  ShardGradients<T> shards_;
  std::vector<int> send_counts_, send_displs_, recv_counts_, recv_displs_, block_counts_,
      block_displs_;
  std::vector<T> received_, gathered_;
};

}  // namespace attn::dist
