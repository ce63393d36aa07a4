// Tests of attn/train/loop.hpp and attn/train/run_files.hpp: which steps a session runs and how a
// signal ends it; the files of a run with one owner (refusals, the log of a resumed run, an
// overwrite that changes nothing until the new run writes).
#include <doctest/doctest.h>
#include <attn/train/loop.hpp>
#include <attn/train/run_files.hpp>

#include <csignal>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "../test_files.hpp"
#include "../test_util.hpp"
#include "run_fixture.hpp"

namespace fs = std::filesystem;
using attn::test::message_of;
namespace train = attn::train;

namespace {

fs::path loop_test_dir(const std::string& name) {
  return attn::test::fresh_dir("attn_loop_", name);
}

// A run of `steps` steps whose step s has loss s; `reports` collects what the hook saw.
struct Recorder {
  std::vector<std::int64_t> stepped;
  std::vector<train::StepReport> reports;
};

}  // namespace

TEST_CASE("run_loop runs steps [start, end) and marks the last") {
  const train::StopRequest stop;
  Recorder rec;
  const train::LoopEnd e = train::run_loop(
      {3, 7, 10, 100}, stop,
      [&](std::int64_t s) {
        rec.stepped.push_back(s);
        return attn::optim::StepResult{double(s), 0.5};
      },
      [&](const train::StepReport& r) { rec.reports.push_back(r); });
  CHECK(rec.stepped == std::vector<std::int64_t>{3, 4, 5, 6});
  REQUIRE(rec.reports.size() == 4);
  CHECK(rec.reports[0].steps_done == 4);
  CHECK(rec.reports[0].result.loss == 3);
  CHECK_FALSE(rec.reports[2].last);
  CHECK(rec.reports[3].last);
  CHECK_FALSE(rec.reports[3].stopping);
  CHECK(rec.reports[3].fraction == doctest::Approx(0.7));
  CHECK(e.steps_done == 7);
  CHECK(e.steps_run == 4);
  CHECK_FALSE(e.stopped);
}

TEST_CASE("due: every n steps of the run, and the session's last") {
  train::StepReport r;
  r.steps_done = 200;
  CHECK(train::due(100, r));
  r.steps_done = 250;
  CHECK_FALSE(train::due(100, r));
  CHECK_FALSE(train::due(0, r));
  r.last = true;
  CHECK(train::due(100, r));
  CHECK(train::due(0, r));
}

TEST_CASE("a signal stops the loop after the step it came in, reported as the last") {
  const train::StopRequest stop;
  Recorder rec;
  const train::LoopEnd e = train::run_loop(
      {0, 10, 10, 1}, stop,
      [&](std::int64_t s) {
        rec.stepped.push_back(s);
        if (s == 2) std::raise(SIGTERM);  // arrives while step 2 runs
        return attn::optim::StepResult{};
      },
      [&](const train::StepReport& r) { rec.reports.push_back(r); });
  CHECK(rec.stepped == std::vector<std::int64_t>{0, 1, 2});
  REQUIRE(rec.reports.size() == 3);
  CHECK(rec.reports.back().last);
  CHECK(rec.reports.back().stopping);
  CHECK(e.stopped);
  CHECK(e.steps_done == 3);
  CHECK(stop.exit_status() == 128 + SIGTERM);
}

TEST_CASE("a signal before the first step runs no step") {
  const train::StopRequest stop;
  std::raise(SIGHUP);
  int steps = 0;
  const train::LoopEnd e = train::run_loop(
      {5, 10, 10, 1}, stop,
      [&](std::int64_t) {
        ++steps;
        return attn::optim::StepResult{};
      },
      [](const train::StepReport&) {});
  CHECK(steps == 0);
  CHECK(e.stopped);
  CHECK(e.steps_run == 0);
  CHECK(e.steps_done == 5);
  CHECK(stop.exit_status() == 129);
}

TEST_CASE("the ranks' agreement decides when to stop") {
  const train::StopRequest stop;
  int steps = 0;
  // Another rank was signalled after step 1: agree() says so on this one.
  const train::LoopEnd e = train::run_loop(
      {0, 10, 10, 1}, stop,
      [&](std::int64_t) {
        ++steps;
        return attn::optim::StepResult{};
      },
      [](const train::StepReport&) {}, [&](bool flag) { return flag || steps >= 2; });
  CHECK(steps == 2);
  CHECK(e.stopped);
}

TEST_CASE("run_loop refuses steps outside the run") {
  const train::StopRequest stop;
  const auto none = [](std::int64_t) { return attn::optim::StepResult{}; };
  const auto quiet = [](const train::StepReport&) {};
  CHECK(message_of([&] {
          train::run_loop({5, 4, 10, 1}, stop, none, quiet);
        }).find("run_loop: steps [5, 4)") != std::string::npos);
  CHECK_THROWS_AS(train::run_loop({0, 11, 10, 1}, stop, none, quiet), attn::value_error);
}

TEST_CASE("step_seed: one seed per (seed, stream, step)") {
  CHECK(train::step_seed(1, 1, 5) == train::step_seed(1, 1, 5));
  CHECK(train::step_seed(1, 1, 5) != train::step_seed(1, 1, 6));
  CHECK(train::step_seed(1, 1, 5) != train::step_seed(1, 2, 5));
  CHECK(train::step_seed(1, 1, 5) != train::step_seed(2, 1, 5));
}

using attn::test::run_layout_in;
using attn::test::run_request;

TEST_CASE("RunFiles: a new run refuses an earlier run's files unless asked") {
  const fs::path dir = loop_test_dir("refuse");
  attn::test::write_text(dir / "log.csv", "step,loss\n1,2\n");
  const std::string m =
      message_of([&] { train::RunFiles(run_layout_in(dir), run_request(dir, false, false)); });
  CHECK(m.find("trainer: an earlier run's files are in the way") != std::string::npos);
  CHECK(m.find("log.csv") != std::string::npos);
  CHECK(m.find("choose another --out") != std::string::npos);
  CHECK(attn::test::read_text(dir / "log.csv") == "step,loss\n1,2\n");
  fs::remove_all(dir);
}

TEST_CASE("RunFiles: --overwrite replaces the earlier run only when the new one writes") {
  const fs::path dir = loop_test_dir("overwrite");
  attn::test::write_text(dir / "checkpoint.safetensors", "old");
  attn::test::write_text(dir / "log.csv", "step,loss\n1,2\n");
  attn::test::write_text(dir / "loss.svg", "<svg/>");
  {
    train::RunFiles files(run_layout_in(dir), run_request(dir, false, true));
    // Stopped before the first step: the old run is untouched.
  }
  CHECK(attn::test::read_text(dir / "checkpoint.safetensors") == "old");
  CHECK(attn::test::read_text(dir / "log.csv") == "step,loss\n1,2\n");
  CHECK(fs::exists(dir / "loss.svg"));
  {
    train::RunFiles files(run_layout_in(dir), run_request(dir, false, true));
    files.log_row({1, 0.5});
    CHECK_FALSE(fs::exists(dir / "checkpoint.safetensors"));
    CHECK_FALSE(fs::exists(dir / "loss.svg"));
  }
  CHECK(attn::test::read_text(dir / "log.csv") == "step,loss\n1,0.5\n");
  fs::remove_all(dir);
}

TEST_CASE("RunFiles: a resumed run's log is cut back to its checkpoint and continued") {
  const fs::path dir = loop_test_dir("resume");
  attn::test::write_text(dir / "checkpoint.safetensors", "ckpt");
  attn::test::write_text(dir / "log.csv",
                         "step,loss\n1,3\n2,2.5\n3,2\n4,1.");  // step 4 cut short by a crash
  train::RunFiles files(run_layout_in(dir), run_request(dir, true, false));
  files.resume_log(2);
  REQUIRE(files.rows().size() == 2);
  CHECK(files.rows()[1] == std::vector<double>{2, 2.5});
  CHECK(attn::test::read_text(dir / "log.csv") == "step,loss\n1,3\n2,2.5\n");
  files.log_row({3, 1.75});
  CHECK(attn::test::read_text(dir / "log.csv") == "step,loss\n1,3\n2,2.5\n3,1.75\n");
  // The rows kept and this session's: the plot's curves.
  CHECK(files.column(0) == std::vector<double>{1, 2, 3});
  CHECK(files.column(1) == std::vector<double>{3, 2.5, 1.75});
  CHECK(message_of([&] { (void)files.column(2); }).find("is not a column") != std::string::npos);
  CHECK(attn::test::read_text(dir / "checkpoint.safetensors") ==
        "ckpt");  // a resumed run keeps its checkpoint
  fs::remove_all(dir);
}

TEST_CASE("RunFiles: one owner, and no output may be an input") {
  const fs::path dir = loop_test_dir("owner");
  train::RunFiles first(run_layout_in(dir), run_request(dir, false, false));
  // A second owner in the same process: flock locks are per open file, so this is refused too.
  CHECK(message_of([&] {
          train::RunFiles(run_layout_in(dir), run_request(dir, false, false));
        }).find("is in use by another process") != std::string::npos);
  const fs::path other = loop_test_dir("inputs");
  attn::test::write_text(other / "log.csv", "corpus");
  train::RunRequest r = run_request(other, false, true);
  r.inputs = {{other / "log.csv", "--data"}};
  const std::string m = message_of([&] { train::RunFiles(run_layout_in(other), r); });
  CHECK(m.find("--out " + other.string() + " (its log.csv)") != std::string::npos);
  CHECK(m.find("is the file --data reads") != std::string::npos);
  CHECK(attn::test::read_text(other / "log.csv") == "corpus");
  fs::remove_all(dir);
  fs::remove_all(other);
}

TEST_CASE("RunFiles: a place that takes no files fails before anything runs") {
  const fs::path dir = loop_test_dir("file");
  attn::test::write_text(dir / "plain", "x");
  const fs::path inside = dir / "plain" / "run";
  CHECK(message_of([&] {
          train::RunFiles(run_layout_in(inside), run_request(inside, false, false));
        }).find("is a file, not a directory") != std::string::npos);
  fs::remove_all(dir);
}
