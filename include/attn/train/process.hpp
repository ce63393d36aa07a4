// attn/train/process.hpp: runs another program (gnuplot for PNG plots) from an argument vector,
// without a shell: no path or title is ever parsed as a command, whatever characters it holds.
// Does not capture the program's output nor give it input: its stdout and stderr go to
// /dev/null unless asked, its stdin is /dev/null.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <attn/core/error.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace attn::train {

// The outcome of run_program: whether the program could be started (found on PATH and executable)
// and, if so, its exit status (128 + the signal's number when a signal ended it).
struct ProgramResult {
  bool started = false;
  int status = -1;
  bool ok() const { return started && status == 0; }
};

// Runs argv[0] (looked up on PATH when it has no '/') with the arguments argv[1..] and waits for
// it. `quiet` sends its stdout and stderr to /dev/null. A program that is missing gives
// started = false, not an exception; an empty argv is a value_error.
inline ProgramResult run_program(const std::vector<std::string>& argv, bool quiet = true) {
  ATTN_CHECK(!argv.empty() && !argv[0].empty(), value_error,
             "run_program: the argument vector is empty");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  if (quiet) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ProgramResult r;
  if (err != 0) return r;  // not found, not executable
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0)
    ATTN_CHECK(errno == EINTR, io_error, "run_program: waiting for ", argv[0],
               " failed: ", std::strerror(errno));
  r.started = true;
  if (WIFEXITED(wstatus)) {
    r.status = WEXITSTATUS(wstatus);
    // Older C libraries report a program they could not execute as exit status 127.
    if (r.status == 127) r.started = false;
  } else if (WIFSIGNALED(wstatus)) {
    r.status = 128 + WTERMSIG(wstatus);
  }
  return r;
}

// True when `program` can be found on PATH and run: what `command -v` answers, without a shell.
inline bool program_available(const std::string& program) {
  if (program.find('/') != std::string::npos) return access(program.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  for (std::size_t at = 0; at <= dirs.size();) {
    const std::size_t end = std::min(dirs.find(':', at), dirs.size());
    const std::string dir = end > at ? dirs.substr(at, end - at) : ".";
    if (access((dir + "/" + program).c_str(), X_OK) == 0) return true;
    at = end + 1;
  }
  return false;
}

}  // namespace attn::train
