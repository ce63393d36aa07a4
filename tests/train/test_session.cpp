// Tests of attn/train/session.hpp: the point a checkpoint saves and reads back, the checks of a
// resumed session against its run, the run's time over sessions, and the lines a session ends with.
#include <doctest/doctest.h>
#include <attn/train/session.hpp>

#include <cstdint>
#include <map>
#include <string>

#include "../test_util.hpp"

using attn::test::message_of;
namespace train = attn::train;

namespace session_tests {

train::Session::Where run_of(std::int64_t total, std::int64_t steps_done, std::int64_t stop_at) {
  return {.from = {steps_done, {}},
          .total = total,
          .stop_at = stop_at,
          .source = steps_done > 0 ? "runs/a/ckpt" : "",
          .checkpoint = "runs/a/ckpt",
          .continue_with = "prog --resume runs/a/ckpt"};
}

}  // namespace session_tests

using session_tests::run_of;

TEST_CASE("the run point a checkpoint saves reads back exactly, with the settings") {
  std::int64_t steps = 8;
  double lr = 3e-4;
  train::Settings settings;
  settings.integer("steps", steps, "steps").range(1, 100);
  settings.real("lr", lr, "learning rate");
  std::map<std::string, std::string> metadata;
  const train::RunPoint point{5, {123.25, 0.1 + 0.2}};
  train::save_run_point(metadata, settings, point);
  CHECK(metadata.at("train.step") == "5");
  CHECK(metadata.at("train.steps") == "8");
  CHECK(metadata.count("train.lr") == 1);
  const train::RunPoint back = train::read_run_point(metadata, "ckpt");
  CHECK(back.steps_done == 5);
  CHECK(back.spent.wall_s == 123.25);
  CHECK(back.spent.cpu_s == 0.1 + 0.2);  // bit for bit: the shortest text that reads back

  // A checkpoint from before the times were saved counts 0 s.
  const train::RunPoint old = train::read_run_point({{"train.step", "3"}}, "old");
  CHECK(old.steps_done == 3);
  CHECK(old.spent.wall_s == 0);
  CHECK(old.spent.cpu_s == 0);
}

TEST_CASE("read_run_point refuses what no run saved, naming the source and the key") {
  CHECK(message_of([] { (void)train::read_run_point({}, "ck"); }) ==
        "ck: metadata 'train.step' is missing");
  for (const char* bad : {"-1", "2.5", "", "9x", "99999999999999999999"})
    CHECK(message_of([&] {
            (void)train::read_run_point({{"train.step", bad}}, "ck");
          }).find("ck: metadata 'train.step' = '" + std::string(bad) + "' is not") == 0);
  for (const char* bad : {"nan", "-3", "inf", "1e999", "abc"})
    CHECK(message_of([&] {
            (void)train::read_run_point({{"train.step", "1"}, {"train.cpu_s", bad}}, "ck");
          }).find("ck: metadata 'train.cpu_s' = '" + std::string(bad) + "' is not") == 0);
}

TEST_CASE("a session runs from the checkpoint's step to --stop-at or the end") {
  train::Session fresh(run_of(10, 0, 0));
  CHECK_FALSE(fresh.resuming());
  CHECK_FALSE(fresh.finished());
  const train::LoopPlan all = fresh.begin(64);
  CHECK(all.start == 0);
  CHECK(all.end == 10);
  CHECK(all.total == 10);
  CHECK(all.tokens_per_step == 64);

  train::Session resumed(run_of(10, 4, 7));
  CHECK(resumed.resuming());
  const train::LoopPlan part = resumed.begin(1);
  CHECK(part.start == 4);
  CHECK(part.end == 7);
  // A --stop-at past the end stops at the end.
  CHECK(train::Session(run_of(10, 4, 50)).end() == 10);
}

TEST_CASE("a resumed session is checked against its run before anything runs") {
  CHECK(message_of([] { train::Session s(run_of(10, 11, 0)); }) ==
        "runs/a/ckpt: metadata train.step = 11 is outside [0, 10]");
  CHECK(message_of([] { train::Session s(run_of(10, 4, 4)); }) ==
        "--stop-at 4 is not after step 4, where runs/a/ckpt stopped");
  CHECK(message_of([] { train::Session s(run_of(10, 0, -2)); }) == "--stop-at -2 is negative");
  // A finished run is no error (there is nothing to do), whatever --stop-at says.
  const train::Session done(run_of(10, 10, 3));
  CHECK(done.finished());
  CHECK(done.finished_line("prog") ==
        "prog: runs/a/ckpt is a finished run (step 10 of 10): nothing to do, nothing changed");
  CHECK(done.finished_line("prog", "pretrain run").find("is a finished pretrain run (step") !=
        std::string::npos);
}

TEST_CASE("a session's end line says where the run stands and how to continue it") {
  const train::Session fresh(run_of(10, 0, 0)), resumed(run_of(10, 4, 0));
  train::LoopEnd none;
  none.stopped = true;
  CHECK(fresh.end_line(none) == "stopped before the first step: nothing was saved");
  none.steps_done = 4;
  CHECK(resumed.end_line(none) ==
        "stopped before step 5: runs/a/ckpt is as it was; continue with `prog --resume "
        "runs/a/ckpt`");
  train::LoopEnd part;
  part.steps_done = 6, part.steps_run = 2;
  CHECK(resumed.end_line(part) ==
        "stopped at step 6 of 10; continue with `prog --resume runs/a/ckpt`");
  train::LoopEnd all;
  all.steps_done = 10, all.steps_run = 6;
  CHECK(resumed.end_line(all).empty());
}

TEST_CASE("the run's time adds this session's to the sessions' before it") {
  train::Session s({.from = {4, {100, 250}},
                    .total = 10,
                    .stop_at = 0,
                    .source = "ck",
                    .checkpoint = "ck",
                    .continue_with = "prog --resume ck"});
  s.begin(1);
  volatile double sink = 0;
  for (int i = 0; i < 2000000; ++i) sink = sink + 1e-9 * i;  // some CPU time
  const train::RunTime session = s.this_session();
  const train::RunPoint p = s.point(5);
  CHECK(p.steps_done == 5);
  CHECK(session.wall_s >= 0);
  CHECK(session.cpu_s >= 0);
  CHECK(p.spent.wall_s >= 100 + session.wall_s);
  CHECK(p.spent.cpu_s >= 250 + session.cpu_s);
  CHECK(p.spent.wall_s < 100 + session.wall_s + 60);
}
