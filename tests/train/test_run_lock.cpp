// Tests of attn/train/run_lock.hpp and attn/train/process.hpp: one owner per run, across
// processes; programs started without a shell.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <attn/train/plot.hpp>
#include <attn/train/process.hpp>
#include <attn/train/run_lock.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "../test_util.hpp"

namespace fs = std::filesystem;
using attn::test::message_of;
using attn::train::RunLock;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("attn_train_" + name + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Runs `f` in a child process and returns its exit status (f's return value).
template <class F>
int in_child(F&& f) {
  const pid_t pid = fork();
  if (pid == 0) _exit(f());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("RunLock: a second holder is refused with the first one's pid, in or out of process") {
  const fs::path dir = fresh_dir("lock");
  const fs::path file = dir / ".lock";
  {
    RunLock first(file, "trainer: " + dir.string());
    CHECK(first.held());
    // Another open file description in this process conflicts too (flock is per description).
    const std::string m =
        message_of<attn::value_error>([&] { RunLock second(file, "trainer: x"); });
    CHECK(m == "trainer: x is in use by another process (pid " + std::to_string(getpid()) +
                   " holds " + file.string() + "): wait for it to end or stop it first");
    // A child process is refused while the parent holds it.
    CHECK(in_child([&] {
            try {
              RunLock l(file, "child");
              return 0;
            } catch (const attn::value_error&) {
              return 7;
            }
          }) == 7);
  }
  // Released when its holder goes: the next one gets it.
  CHECK(in_child([&] {
          try {
            RunLock l(file, "child");
            return l.held() ? 0 : 1;
          } catch (const attn::error&) {
            return 7;
          }
        }) == 0);
  // A holder that dies without any cleanup (_exit while holding) releases it too.
  CHECK(in_child([&] {
          RunLock l(file, "child");
          _exit(3);
          return 0;
        }) == 3);
  RunLock again(file, "parent");
  CHECK(again.held());
  RunLock moved = std::move(again);
  CHECK(moved.held());
  CHECK_FALSE(again.held());  // NOLINT(bugprone-use-after-move): a moved-from lock holds nothing
  CHECK(message_of<attn::io_error>([&] {
          RunLock l(dir / "missing" / ".lock", "t");
        }).find("t: cannot open the lock file") == 0);
  fs::remove_all(dir);
}

TEST_CASE("run_program: an argument vector, never a shell") {
  const fs::path dir = fresh_dir("spawn");
  // A file name a shell would run as a command: it must reach the program as one argument.
  const fs::path evil = dir / "x';touch INJECTED;'.txt";
  CHECK(attn::train::run_program({"touch", evil.string()}).ok());
  CHECK(fs::exists(evil));
  CHECK_FALSE(fs::exists(dir / "INJECTED"));
  CHECK_FALSE(fs::exists("INJECTED"));
  CHECK(attn::train::run_program({"false"}).status == 1);
  CHECK_FALSE(attn::train::run_program({"false"}).ok());
  const attn::train::ProgramResult missing = attn::train::run_program({"attn-no-such-program"});
  CHECK_FALSE(missing.started);
  CHECK_FALSE(attn::train::program_available("attn-no-such-program"));
  CHECK(attn::train::program_available("sh"));
  CHECK(message_of<attn::value_error>([] { (void)attn::train::run_program({}); }) ==
        "run_program: the argument vector is empty");
  fs::remove_all(dir);
}

TEST_CASE("plot: any characters in paths and titles; SVG text escaped; PNG atomic or absent") {
  namespace plot = attn::train::plot;
  const fs::path dir = fresh_dir("plot") / "it's a \"dir\" $(touch INJECTED) ; `x`";
  fs::create_directories(dir);
  const plot::Curve c{"train <loss> & 'more'", "#1f77b4", {0, 1, 2}, {3, 2, 1}};
  plot::write_svg(dir / "loss.svg", "a & b", "step", "loss", {c});
  std::ifstream in(dir / "loss.svg");
  const std::string svg((std::istreambuf_iterator<char>(in)), {});
  CHECK(svg.find("a &amp; b") != std::string::npos);
  CHECK(svg.find("train &lt;loss&gt; &amp; 'more'") != std::string::npos);
  if (attn::train::program_available("gnuplot")) {
    {
      std::ofstream csv(dir / "log.csv");
      csv << "step,train_loss\n1,3\n2,2\n3,1\n";
    }
    CHECK(plot::gnuplot_png(dir / "log.csv", dir / "loss.png", "title ' with \" quotes",
                            {{2, "train"}}));
    CHECK(fs::file_size(dir / "loss.png") > 0);
    // A CSV that does not exist: gnuplot fails, no PNG, no temp files left.
    CHECK_FALSE(plot::gnuplot_png(dir / "none.csv", dir / "none.png", "t", {{2, "x"}}));
    CHECK_FALSE(fs::exists(dir / "none.png"));
  }
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    CHECK(e.path().filename().string().find(".tmp") == std::string::npos);
    ++files;
  }
  CHECK(files >= 1);
  CHECK_FALSE(fs::exists(dir.parent_path() / "INJECTED"));
  CHECK_FALSE(fs::exists("INJECTED"));
  fs::remove_all(dir.parent_path());
}

TEST_CASE("plot: a PNG that a full disk cut short is not kept (gnuplot exits 0 all the same)") {
  namespace plot = attn::train::plot;
  const fs::path dir = fresh_dir("png_cut");
  // A gnuplot that draws a PNG cut short: the signature and part of a chunk, no IEND; exit 0.
  const fs::path fake = dir / "bin";
  fs::create_directories(fake);
  {
    std::ofstream sh(fake / "gnuplot");
    sh << "#!/bin/sh\n"
          "out=$(sed -n \"s/.*set output '\\([^']*\\)'.*/\\1/p\" \"$1\")\n"
          "printf '\\211PNG\\r\\n\\032\\n\\0\\0\\0\\rIHDR' > \"$out\"\n"
          "exit 0\n";
  }
  fs::permissions(fake / "gnuplot", fs::perms::owner_all);
  {
    std::ofstream csv(dir / "log.csv");
    csv << "step,train_loss\n1,3\n2,2\n";
  }
  std::ofstream(dir / "loss.png") << "the earlier plot";
  const char* old_path = std::getenv("PATH");
  const std::string saved = old_path != nullptr ? old_path : "";
  setenv("PATH", (fake.string() + ":" + saved).c_str(), 1);
  const bool drawn = plot::gnuplot_png(dir / "log.csv", dir / "loss.png", "t", {{2, "train"}});
  setenv("PATH", saved.c_str(), 1);
  CHECK_FALSE(drawn);
  std::ifstream in(dir / "loss.png");
  CHECK(std::string((std::istreambuf_iterator<char>(in)), {}) == "the earlier plot");
  for (const auto& e : fs::directory_iterator(dir))
    CHECK(e.path().filename().string().find(".tmp") == std::string::npos);
  // A whole PNG (signature ... IEND) is recognised as such.
  {
    std::ofstream png(dir / "whole.png", std::ios::binary);
    png.write("\x89PNG\r\n\x1a\n", 8);
    png.write("\0\0\0\0IEND\xae\x42\x60\x82", 12);
  }
  CHECK(plot::png_is_whole(dir / "whole.png"));
  CHECK_FALSE(plot::png_is_whole(dir / "log.csv"));
  CHECK_FALSE(plot::png_is_whole(dir / "missing.png"));
  fs::remove_all(dir);
}
