// attn/train/trainer.hpp: one session of a training run, around the trainer's model. A Trainer
// puts together what every trainer does besides its step: the run's files with one owner
// (run_files.hpp), the session a resume continues (session.hpp), the loop that a signal stops
// after a step (loop.hpp), a checkpoint every n steps and at the session's last, the CSV log cut
// back on resume and continued, and the progress line. The trainer brings its model, its data and
// its hooks: the step, what a checkpoint holds, what a log row and the progress line say.
//
//   attn::train::Trainer trainer(layout, request, stop);     // checked, locked
//   trainer.start_session({.from = point, .total = steps, ...});
//   if (trainer.session().finished()) ...                    // nothing to run
//   const LoopEnd ran = trainer.run(tokens_per_step, step, {.save_every = 100, .save = ..., ...});
//   print trainer.session().end_line(ran); return trainer.exit_status(ran);
//
// Does not build models, read data nor write checkpoints itself (the hooks do), and does not
// print the lines a session ends with (each trainer words its own).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "interrupt.hpp"
#include "loop.hpp"
#include "progress.hpp"
#include "run_files.hpp"
#include "session.hpp"

namespace attn::train {

// The progress line after a step: its text, and whether it stays (on a terminal the line is
// redrawn in place; in a log file only the lines that stay are written).
struct ProgressText {
  std::string text;
  bool keep = false;
};

// What a trainer does after each step, besides the step itself. Every hook may be empty. (GCC 12
// warns of the members a designated initializer leaves out: name them all, or assign the hooks
// one by one.)
struct StepHooks {
  // A checkpoint every `save_every` steps of the run and at the session's last step (its end, a
  // --stop-at or a signal); 0: only at the last.
  std::int64_t save_every = 0;
  // Every rank, when a save is due, before it: an evaluation, a check that the replicas agree.
  std::function<void(const StepReport&)> before_save;
  // The owner of the run's files, when a save is due: write the checkpoint that holds `point`.
  std::function<void(const RunPoint&)> save;
  // Every rank, after every step: the step's log row, or none (`saved`: a checkpoint was just
  // written). The owner appends it to the log (RunFiles::log_row).
  std::function<std::optional<std::vector<double>>(const StepReport&, const RunPoint&, bool saved)>
      log;
  // The owner: the progress line after the step.
  std::function<ProgressText(const StepReport&, bool saved)> show;
  // The ranks of a data-parallel job agree on stopping (attn::dist::DataParallel::any: true on
  // every rank when true on any). Empty: one process.
  std::function<bool(bool)> agree;
};

class Trainer {
 public:
  // The run's files, checked, locked and guarded before anything is read or trained (see
  // RunFiles), where this process owns them (`owner`); the other ranks of a data-parallel job
  // write no file. `stop` is the program's signal handling, installed before it began its work.
  Trainer(RunLayout layout, const RunRequest& request, const StopRequest& stop, bool owner = true)
      : stop_(&stop) {
    if (owner) files_ = RunFiles(std::move(layout), request);
  }

  // Where the run stands and how far this session goes: the checks of Session. A run resumed
  // from a finished checkpoint has session().finished().
  Session& start_session(Session::Where where) {
    session_.emplace(std::move(where));
    return *session_;
  }
  Session& session() {
    ATTN_CHECK(session_.has_value(), value_error, "Trainer: start_session first");
    return *session_;
  }
  const Session& session() const {
    ATTN_CHECK(session_.has_value(), value_error, "Trainer: start_session first");
    return *session_;
  }

  RunFiles& files() { return files_; }
  const RunFiles& files() const { return files_; }
  bool owner() const { return files_.owner(); }
  const StopRequest& stop() const { return *stop_; }

  // Runs the session's steps: `step(s)` (returns optim::StepResult) for each step s, then the
  // hooks (before_save and save when a save is due, log, show), until the session's end or a
  // signal, which ends it after the step it is in, saved like the end. A resumed run's log is
  // first cut back to its checkpoint's step (rows logged after it are logged again).
  template <class Step>
  LoopEnd run(double tokens_per_step, Step&& step, const StepHooks& hooks) {
    Session& s = session();
    files_.resume_log(s.start());
    ProgressLine progress;
    const auto report = [&](const StepReport& r) {
      const bool saving = due(hooks.save_every, r);
      if (saving && hooks.before_save) hooks.before_save(r);
      const RunPoint point = s.point(r.steps_done);
      if (saving && owner() && hooks.save) {
        files_.begin_writing();  // a new run's earlier files go now, not before its first save
        hooks.save(point);
      }
      if (hooks.log)
        if (const auto row = hooks.log(r, point, saving); row && owner()) files_.log_row(*row);
      if (hooks.show && owner()) {
        const ProgressText t = hooks.show(r, saving);
        progress.show(r.fraction, t.text, r.eta_seconds, t.keep);
      }
    };
    const auto agree = [&](bool flag) { return hooks.agree ? hooks.agree(flag) : flag; };
    const LoopEnd ran = run_loop(s.begin(tokens_per_step), *stop_, step, report, agree);
    progress.finish();
    return ran;
  }

  // The exit status of the session that `ran`: 0, or 128 + the signal that stopped it.
  int exit_status(const LoopEnd& ran) const { return ran.stopped ? stop_->exit_status() : 0; }

 private:
  const StopRequest* stop_;
  RunFiles files_;
  std::optional<Session> session_;
};

}  // namespace attn::train
