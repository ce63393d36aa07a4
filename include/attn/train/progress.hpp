// attn/train/progress.hpp: what a trainer shows while it runs: the progress line with its ETA
// (redrawn in place on a terminal, one line per report in a log file), durations as "1h02m" or
// "3m07s", wall time since a moment and the CPU time the process has used.
// Does not decide when to report: the loop (attn/train/loop.hpp) and the trainer do.
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

namespace attn::train {

inline std::string format_duration(double seconds) {
  const long s = std::lround(std::clamp(seconds, 0.0, 1e15));
  char buf[40];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, s / 60 % 60);
  else
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  return buf;
}

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// CPU seconds (user + system, all threads) this process has used: on a shared machine the cost of
// a run, where its wall time also counts the other programs running beside it.
inline double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto secs = [](const timeval& t) { return double(t.tv_sec) + 1e-6 * double(t.tv_usec); };
  return secs(u.ru_utime) + secs(u.ru_stime);
}

// "[########........] <text> | ETA 1m02s" on stderr: redrawn in place on a terminal; elsewhere
// (a log file) only the reports marked `always`, one line each.
class ProgressLine {
 public:
  ProgressLine() : tty_(isatty(fileno(stderr)) != 0) {}
  bool tty() const { return tty_; }

  void show(double fraction, const std::string& text, double eta_seconds, bool always) {
    if (!tty_ && !always) return;
    const int width = 24;
    const double f = std::isfinite(fraction) ? fraction : 0.0;
    const int filled = std::clamp(int(double(width) * std::clamp(f, 0.0, 1.0)), 0, width);
    std::fprintf(stderr, "%s[%s%s] %s | ETA %s%s", tty_ ? "\r" : "",
                 std::string(std::size_t(filled), '#').c_str(),
                 std::string(std::size_t(width - filled), '.').c_str(), text.c_str(),
                 format_duration(eta_seconds).c_str(), tty_ ? "   " : "\n");
    std::fflush(stderr);
    shown_ = true;
  }

  // Ends an in-place line, so that what follows starts on a line of its own.
  void finish() {
    if (tty_ && shown_) std::fprintf(stderr, "\n");
    shown_ = false;
  }

 private:
  bool tty_ = false, shown_ = false;
};

}  // namespace attn::train
