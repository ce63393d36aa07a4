// attn/train/loop.hpp: the training loop every attn trainer runs. run_loop calls the trainer's step
// for steps [start, end) of a run, and after each step its report hook, which decides what to
// evaluate, save, log and show (due() says whether a step is one of every n, or the last); a signal
// (attn/train/interrupt.hpp) stops the loop after the step it is in, which is reported as the last
// one so that it is saved like the end of the run. Under data parallelism the ranks agree on
// stopping after the same step (the `agree` function: true on every rank when true on any).
// step_seed gives every step its own seeds, so that a resumed run repeats exactly the steps the
// uninterrupted run would have taken.
// Does not own files (run_files.hpp) nor know the model: the hooks do.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>

#include "../core/error.hpp"
#include "../core/rng.hpp"
#include "../optim/step.hpp"
#include "interrupt.hpp"
#include "progress.hpp"

namespace attn::train {

// A seed for step `step` of stream `stream` of a run: batches and dropout of a step depend only
// on (seed, step), so a resumed run replays exactly what the uninterrupted one would have done.
// Streams separate the uses (batches, dropout, evaluation, epoch orders) of one step.
inline std::uint64_t step_seed(std::uint64_t seed, std::uint64_t stream, std::int64_t step) {
  Rng r(seed ^ (stream * 0x9E3779B97F4A7C15ull) ^ (std::uint64_t(step) << 20));
  return r.split();
}

// Which steps this session runs.
struct LoopPlan {
  std::int64_t start = 0;      // steps already done (a resumed run's checkpoint step)
  std::int64_t end = 0;        // this session stops after step end − 1 (a --stop-at, or total)
  std::int64_t total = 0;      // the run's steps, for the progress fraction
  double tokens_per_step = 0;  // for tokens/s
};

// What the report hook learns after each step.
struct StepReport {
  std::int64_t steps_done = 0;  // the step's number + 1: what a checkpoint saved now holds
  optim::StepResult result;     // its loss and gradient norm
  double seconds = 0;           // since this session's loop began
  double tokens_per_s = 0;      // this session's mean
  double eta_seconds = 0;       // to the session's end, at this session's mean pace
  double fraction = 0;          // steps_done / total
  bool last = false;            // the session's last step: its end, or a stop
  bool stopping = false;        // a signal asked to stop (on any rank)
};

// True when the step reported is one of every `every` steps of the run, or the session's last:
// when to evaluate, save or log. every <= 0: only the last.
inline bool due(std::int64_t every, const StepReport& r) {
  return r.last || (every > 0 && r.steps_done % every == 0);
}

// How the session ended.
struct LoopEnd {
  std::int64_t steps_done = 0;  // the run's steps done (and, when the hooks saved, saved)
  std::int64_t steps_run = 0;   // of which this session ran
  bool stopped = false;         // by a signal: exit with stop.exit_status()
  double seconds = 0;
  double tokens_per_s = 0;
};

struct AgreeAlone {
  bool operator()(bool flag) const { return flag; }
};

// Runs `step(s)` (returns optim::StepResult) for s = plan.start … plan.end − 1, then
// `report(const StepReport&)` after each, until the end or a stop request. A request that came
// before the first step runs none (LoopEnd::steps_run 0, stopped). `agree(flag)` makes the ranks of
// a data-parallel job agree (attn::dist::DataParallel::any); alone, it is the flag itself.
template <class Step, class Report, class Agree = AgreeAlone>
LoopEnd run_loop(const LoopPlan& plan, const StopRequest& stop, Step&& step, Report&& report,
                 Agree&& agree = {}) {
  ATTN_CHECK(plan.start >= 0 && plan.start <= plan.end && plan.end <= plan.total, value_error,
             "run_loop: steps [", plan.start, ", ", plan.end, ") are not within the run's ",
             plan.total);
  const auto t0 = std::chrono::steady_clock::now();
  LoopEnd e;
  e.steps_done = plan.start;
  bool stopping = agree(stop.requested());
  for (std::int64_t s = plan.start; s < plan.end && !stopping; ++s) {
    StepReport r;
    r.result = step(s);
    r.steps_done = s + 1;
    stopping = agree(stop.requested());
    r.stopping = stopping;
    r.last = s + 1 == plan.end || stopping;
    r.seconds = seconds_since(t0);
    const double run = double(s + 1 - plan.start);
    r.tokens_per_s = r.seconds > 0 ? run * plan.tokens_per_step / r.seconds : 0;
    r.eta_seconds = double(plan.end - s - 1) * r.seconds / run;
    r.fraction = plan.total > 0 ? double(r.steps_done) / double(plan.total) : 1;
    e.steps_done = r.steps_done;
    e.steps_run = s + 1 - plan.start;
    e.tokens_per_s = r.tokens_per_s;
    report(static_cast<const StepReport&>(r));
  }
  e.stopped = stopping;
  e.seconds = seconds_since(t0);
  return e;
}

}  // namespace attn::train
