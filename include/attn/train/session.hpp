// attn/train/session.hpp: where a run stands, and one session of it. Every checkpoint saves,
// beside the run's settings (settings.hpp), its point: the steps done and the time the run has
// taken over all its sessions (train.step, train.elapsed_s, train.cpu_s). A resume reads the
// point back; a Session checks it against the run (within its steps, a --stop-at after it), says
// which steps this session runs (the LoopPlan of loop.hpp), keeps the run's time going, and words
// the lines a session ends with: a finished run left as it was, a stop before the first step, a
// stop before the end with the command that continues the run.
// Does not read checkpoints nor own files (io/checkpoint.hpp, run_files.hpp): it works on their
// metadata, a map of texts.
#pragma once

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <system_error>

#include "../core/error.hpp"
#include "loop.hpp"
#include "progress.hpp"
#include "settings.hpp"

namespace attn::train {

// The time a run has taken: wall and CPU seconds (CPU: every thread of the process; on a shared
// machine the cost of the run, where wall time also counts what ran beside it).
struct RunTime {
  double wall_s = 0;
  double cpu_s = 0;
};

// Where a run stands: what a checkpoint saved now holds.
struct RunPoint {
  std::int64_t steps_done = 0;
  RunTime spent;  // over every session so far
};

// Writes the run's settings (Settings::save) and its point into a checkpoint's `metadata`.
inline void save_run_point(std::map<std::string, std::string>& metadata, const Settings& settings,
                           const RunPoint& point) {
  settings.save(metadata);
  metadata["train.step"] = std::to_string(point.steps_done);
  metadata["train.elapsed_s"] = shortest_text(point.spent.wall_s);
  metadata["train.cpu_s"] = shortest_text(point.spent.cpu_s);
}

// The point a checkpoint's `metadata` saved (`source` names it in messages): train.step must be
// an integer >= 0; the times, where present, finite numbers >= 0 (a checkpoint from before they
// were saved counts 0 s). Anything else is an io_error naming the source and the key.
inline RunPoint read_run_point(const std::map<std::string, std::string>& metadata,
                               std::string_view source) {
  const auto bad = [&](const std::string& key, const std::string& value, const char* what) {
    return io_error(std::string(source) + ": metadata '" + key + "' = '" + value + "' is not " +
                    what);
  };
  RunPoint p;
  const auto step = metadata.find("train.step");
  ATTN_CHECK(step != metadata.end(), io_error, source, ": metadata 'train.step' is missing");
  const std::string& s = step->second;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), p.steps_done);
  if (ec != std::errc{} || end != s.data() + s.size() || p.steps_done < 0)
    throw bad("train.step", s, "a step count (an integer >= 0)");
  for (auto [key, seconds] :
       {std::pair{"train.elapsed_s", &p.spent.wall_s}, std::pair{"train.cpu_s", &p.spent.cpu_s}}) {
    const auto it = metadata.find(key);
    if (it == metadata.end()) continue;
    const std::string& t = it->second;
    const auto [e, c] = std::from_chars(t.data(), t.data() + t.size(), *seconds);
    // Written so that a NaN fails it.
    if (c != std::errc{} || e != t.data() + t.size() || !(*seconds >= 0 && *seconds < 1e300))
      throw bad(key, t, "a number of seconds >= 0");
  }
  return p;
}

// One session of a run of `total` steps: it continues from `from` (a new run: {}) and runs up to
// `stop_at` (0: to the end). `checkpoint` is the file the run saves, `continue_with` the command
// that resumes it ("char_gpt --resume runs/x/checkpoint.safetensors"), both for the lines below.
class Session {
 public:
  struct Where {
    RunPoint from;              // the checkpoint's point; a new run: {}
    std::int64_t total = 0;     // the run's steps
    std::int64_t stop_at = 0;   // this session stops after this step (0: the run's end)
    std::string source;         // the checkpoint resumed ("" for a new run), in messages
    std::string checkpoint;     // the file this run saves
    std::string continue_with;  // the command that resumes it
  };

  // Checks, before anything is trained: the point within the run (an io_error naming the
  // source: the checkpoint does not belong to a run of `total` steps), and a stop_at after it
  // (a value_error: this session would run nothing).
  explicit Session(Where where) : w_(std::move(where)) {
    ATTN_CHECK(w_.total >= 1, value_error, "Session: a run of ", w_.total, " steps");
    ATTN_CHECK(w_.from.steps_done <= w_.total, io_error, w_.source,
               ": metadata train.step = ", w_.from.steps_done, " is outside [0, ", w_.total, "]");
    ATTN_CHECK(w_.stop_at >= 0, value_error, "--stop-at ", w_.stop_at, " is negative");
    ATTN_CHECK(finished() || w_.stop_at == 0 || w_.stop_at > start(), value_error, "--stop-at ",
               w_.stop_at, " is not after step ", start(), ", where ", w_.source, " stopped");
  }

  std::int64_t start() const { return w_.from.steps_done; }
  std::int64_t end() const { return w_.stop_at > 0 ? std::min(w_.stop_at, w_.total) : w_.total; }
  std::int64_t total() const { return w_.total; }
  bool resuming() const { return !w_.source.empty(); }
  // Resumed from the checkpoint of a run that has done all its steps: nothing to run.
  bool finished() const { return start() == w_.total; }

  // The loop's plan (run_loop); the session's clocks start now.
  LoopPlan begin(double tokens_per_step) {
    t0_ = std::chrono::steady_clock::now();
    cpu0_ = process_cpu_seconds();
    return {start(), end(), w_.total, tokens_per_step};
  }

  // Since begin(): this session's time, and the run's (the sessions before it added).
  RunTime this_session() const { return {seconds_since(t0_), process_cpu_seconds() - cpu0_}; }
  RunTime spent() const {
    const RunTime now = this_session();
    return {w_.from.spent.wall_s + now.wall_s, w_.from.spent.cpu_s + now.cpu_s};
  }
  // What a checkpoint saved after `steps_done` steps holds.
  RunPoint point(std::int64_t steps_done) const { return {steps_done, spent()}; }

  // "<program>: <checkpoint> is a finished <kind> (step 8 of 8): nothing to do, nothing changed".
  std::string finished_line(std::string_view program, std::string_view kind = "run") const {
    return std::string(program) + ": " + w_.source + " is a finished " + std::string(kind) +
           " (step " + std::to_string(start()) + " of " + std::to_string(w_.total) +
           "): nothing to do, nothing changed";
  }

  // What the session that `ran` says last about the run's state: before its first step, that
  // nothing was saved (an earlier checkpoint is as it was); stopped before the run's end, at
  // which step and how to continue; at the run's end, "".
  std::string end_line(const LoopEnd& ran) const {
    if (ran.steps_run == 0)
      return resuming()
                 ? "stopped before step " + std::to_string(start() + 1) + ": " + w_.checkpoint +
                       " is as it was; continue with `" + w_.continue_with + "`"
                 : std::string("stopped before the first step: nothing was saved");
    if (ran.steps_done < w_.total)
      return "stopped at step " + std::to_string(ran.steps_done) + " of " +
             std::to_string(w_.total) + "; continue with `" + w_.continue_with + "`";
    return "";
  }

 private:
  Where w_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  double cpu0_ = process_cpu_seconds();
};

}  // namespace attn::train
