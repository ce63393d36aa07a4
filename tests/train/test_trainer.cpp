// Tests of attn/train/trainer.hpp: one session of a run around a trainer's hooks. Saves come every
// n steps and at the session's last, each after the evaluation hook and before the step's log row;
// a new run replaces an earlier one's files only at its first save; a resumed run's log is cut back
// to its checkpoint and continued; a signal ends the session after its step, saved, with 128 +
// the signal; a process that does not own the run writes nothing.
#include <doctest/doctest.h>
#include <attn/train/trainer.hpp>

#include <csignal>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "../test_files.hpp"
#include "../test_util.hpp"
#include "run_fixture.hpp"

namespace fs = std::filesystem;
using attn::test::message_of;
namespace train = attn::train;

// A named namespace: the test programs are unity builds, where test_loop.cpp's helpers of the same
// names are in scope too.
namespace trainer_test {

using attn::test::read_text;
using attn::test::write_text;

fs::path trainer_test_dir(const std::string& name) {
  return attn::test::fresh_dir("attn_trainer_", name);
}

train::Session::Where where(std::int64_t from, std::int64_t total, std::int64_t stop_at = 0) {
  return {.from = {from, {}},
          .total = total,
          .stop_at = stop_at,
          .source = from > 0 ? "checkpoint" : "",
          .checkpoint = "checkpoint",
          .continue_with = "trainer --resume"};
}

// Step s has loss s + 1; the hooks write what happened into `events` ("e3": the evaluation after
// step 3, "s3": the save holding 3 steps, "l3": the log row of step 3) and the checkpoint file
// holds the steps it saved.
struct Events {
  std::vector<std::string> events;
  // "<kind><step>", appended rather than "literal" + std::string, which g++ 12 at -O2 misreads as
  // an overlapping memcpy (-Wrestrict).
  static std::string event(char kind, std::int64_t step) {
    std::string e(1, kind);
    e += std::to_string(step);
    return e;
  }
  train::StepHooks hooks(const fs::path& checkpoint, std::int64_t save_every) {
    return {.save_every = save_every,
            .before_save =
                [this](const train::StepReport& r) { events.push_back(event('e', r.steps_done)); },
            .save =
                [this, checkpoint](const train::RunPoint& p) {
                  events.push_back(event('s', p.steps_done));
                  write_text(checkpoint, std::to_string(p.steps_done));
                },
            .log = [this](const train::StepReport& r, const train::RunPoint& p,
                          bool saved) -> std::optional<std::vector<double>> {
              CHECK(p.steps_done == r.steps_done);
              events.push_back(event('l', r.steps_done) + (saved ? "*" : ""));
              return std::vector<double>{double(r.steps_done), r.result.loss};
            },
            .show = {},
            .agree = {}};
  }
};

const auto loss_step = [](std::int64_t s) {
  attn::optim::StepResult r;
  r.loss = double(s + 1);
  return r;
};

TEST_CASE("Trainer: saves every n steps and at the last, after the evaluation, before the row") {
  const fs::path dir = trainer_test_dir("saves");
  const train::StopRequest stop;
  train::Trainer trainer(attn::test::run_layout_in(dir), attn::test::run_request(dir, false), stop);
  trainer.start_session(where(0, 5));
  Events e;
  const train::LoopEnd ran = trainer.run(10, loss_step, e.hooks(dir / "checkpoint.safetensors", 2));
  CHECK(e.events == std::vector<std::string>{"l1", "e2", "s2", "l2*", "l3", "e4", "s4", "l4*", "e5",
                                             "s5", "l5*"});
  CHECK(read_text(dir / "checkpoint.safetensors") == "5");
  CHECK(read_text(dir / "log.csv") == "step,loss\n1,1\n2,2\n3,3\n4,4\n5,5\n");
  CHECK(trainer.files().column(1) == std::vector<double>{1, 2, 3, 4, 5});
  CHECK(ran.steps_done == 5);
  CHECK(trainer.exit_status(ran) == 0);
  fs::remove_all(dir);
}

TEST_CASE("Trainer: an overwrite replaces the earlier run at the first save, not before") {
  const fs::path dir = trainer_test_dir("overwrite");
  write_text(dir / "checkpoint.safetensors", "old");
  write_text(dir / "log.csv", "step,loss\n1,9\n");
  write_text(dir / "loss.svg", "<svg/>");
  const train::StopRequest stop;
  {
    train::Trainer trainer(attn::test::run_layout_in(dir),
                           attn::test::run_request(dir, false, true), stop);
    trainer.start_session(where(0, 4));
    // Refused by the session's checks before any step: the earlier run is as it was.
    CHECK(message_of([&] { trainer.start_session(where(0, 4, -1)); }).find("is negative") !=
          std::string::npos);
  }
  CHECK(read_text(dir / "checkpoint.safetensors") == "old");
  CHECK(read_text(dir / "log.csv") == "step,loss\n1,9\n");
  train::Trainer trainer(attn::test::run_layout_in(dir), attn::test::run_request(dir, false, true),
                         stop);
  trainer.start_session(where(0, 4));
  Events e;
  train::StepHooks hooks = e.hooks(dir / "checkpoint.safetensors", 2);
  hooks.log = [](const train::StepReport& r, const train::RunPoint&,
                 bool saved) -> std::optional<std::vector<double>> {
    if (!saved) return std::nullopt;  // a row only with a checkpoint, as char_gpt logs
    return std::vector<double>{double(r.steps_done), r.result.loss};
  };
  trainer.run(10, loss_step, hooks);
  CHECK_FALSE(fs::exists(dir / "loss.svg"));
  CHECK(read_text(dir / "checkpoint.safetensors") == "4");
  CHECK(read_text(dir / "log.csv") == "step,loss\n2,2\n4,4\n");
  fs::remove_all(dir);
}

TEST_CASE("Trainer: a resumed session cuts the log back to its checkpoint and continues it") {
  const fs::path dir = trainer_test_dir("resume");
  write_text(dir / "checkpoint.safetensors", "2");
  write_text(dir / "log.csv", "step,loss\n1,1\n2,2\n3,3\n");  // step 3 logged, never saved
  const train::StopRequest stop;
  train::Trainer trainer(attn::test::run_layout_in(dir), attn::test::run_request(dir, true), stop);
  const train::Session& session = trainer.start_session(where(2, 4));
  CHECK(session.start() == 2);
  Events e;
  const train::LoopEnd ran = trainer.run(10, loss_step, e.hooks(dir / "checkpoint.safetensors", 2));
  CHECK(ran.steps_run == 2);
  CHECK(e.events == std::vector<std::string>{"l3", "e4", "s4", "l4*"});
  CHECK(read_text(dir / "log.csv") == "step,loss\n1,1\n2,2\n3,3\n4,4\n");
  CHECK(trainer.files().column(0) == std::vector<double>{1, 2, 3, 4});
  fs::remove_all(dir);
}

TEST_CASE("Trainer: a finished run's session runs nothing") {
  const fs::path dir = trainer_test_dir("finished");
  write_text(dir / "checkpoint.safetensors", "3");
  const train::StopRequest stop;
  train::Trainer trainer(attn::test::run_layout_in(dir), attn::test::run_request(dir, true), stop);
  CHECK(trainer.start_session(where(3, 3)).finished());
  fs::remove_all(dir);
}

TEST_CASE("Trainer: a signal ends the session after its step, saved, with 128 + the signal") {
  const fs::path dir = trainer_test_dir("signal");
  const train::StopRequest stop;
  train::Trainer trainer(attn::test::run_layout_in(dir), attn::test::run_request(dir, false), stop);
  trainer.start_session(where(0, 10));
  Events e;
  const auto step = [&](std::int64_t s) {
    if (s == 2) std::raise(SIGTERM);
    return loss_step(s);
  };
  const train::LoopEnd ran = trainer.run(10, step, e.hooks(dir / "checkpoint.safetensors", 5));
  CHECK(ran.stopped);
  CHECK(ran.steps_done == 3);
  CHECK(trainer.exit_status(ran) == 128 + SIGTERM);
  CHECK(e.events == std::vector<std::string>{"l1", "l2", "e3", "s3", "l3*"});
  CHECK(read_text(dir / "checkpoint.safetensors") == "3");
  CHECK(trainer.session().end_line(ran) ==
        "stopped at step 3 of 10; continue with `trainer --resume`");
  fs::remove_all(dir);
}

TEST_CASE("Trainer: a process that does not own the run evaluates but writes nothing") {
  const fs::path dir = trainer_test_dir("rank");
  const train::StopRequest stop;
  train::Trainer trainer(attn::test::run_layout_in(dir), attn::test::run_request(dir, false), stop,
                         false);
  CHECK_FALSE(trainer.owner());
  trainer.start_session(where(0, 3));
  Events e;
  trainer.run(10, loss_step, e.hooks(dir / "checkpoint.safetensors", 2));
  // The evaluations (and the ranks' checks in them) run; neither saves nor rows are written.
  CHECK(e.events == std::vector<std::string>{"l1", "e2", "l2*", "e3", "l3*"});
  CHECK(fs::is_empty(dir));
  fs::remove_all(dir);
}

TEST_CASE("Trainer: the session must be started before it runs") {
  const fs::path dir = trainer_test_dir("unstarted");
  const train::StopRequest stop;
  train::Trainer trainer(attn::test::run_layout_in(dir), attn::test::run_request(dir, false), stop);
  CHECK(message_of([&] { trainer.run(10, loss_step, {}); }).find("start_session first") !=
        std::string::npos);
  fs::remove_all(dir);
}

}  // namespace trainer_test
