// attn/train/interrupt.hpp: Ctrl-C (SIGINT), SIGTERM and SIGHUP (a closed terminal or ssh session)
// for trainers: the first signal asks the training loop to stop after the step it is in (it then
// saves, plots and exits with 128 + the signal's number: 130 for Ctrl-C, 143 for SIGTERM, 129 for
// SIGHUP); a second one ends the program at once.
// Does not save anything itself nor handle other signals (kill -9 cannot be caught: a save cut
// short leaves a stale temp file that the next run removes).
#pragma once

#include <unistd.h>
#include <csignal>

#include <atomic>

namespace attn::train {

class StopRequest {
 public:
  // Installs the handlers for the lifetime of the object (one at a time), restoring the
  // previous ones after.
  StopRequest() {
    signal_.store(0);
    struct sigaction sa {};
    sa.sa_handler = &StopRequest::handle;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
    sigaction(SIGHUP, &sa, &old_hup_);
  }
  ~StopRequest() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGHUP, &old_hup_, nullptr);
  }
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;

  // The signal received (SIGINT, SIGTERM or SIGHUP), 0 while none has come.
  int signal() const { return signal_.load(); }
  bool requested() const { return signal() != 0; }
  // The exit status of a run stopped by the signal: 128 + its number (130 for SIGINT). A rank of
  // a data-parallel job that stopped because another rank was signalled exits with 130 too.
  int exit_status() const { return 128 + (requested() ? signal() : SIGINT); }

 private:
  // Only async-signal-safe calls here: an atomic store, write, _exit.
  static void handle(int sig) {
    int expected = 0;
    if (signal_.compare_exchange_strong(expected, sig)) {
      constexpr char msg[] =
          "\ninterrupted: finishing this step, then saving (press Ctrl-C again to quit at once)\n";
      // A closed terminal takes stderr with it; the write then fails, which changes nothing.
      (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    } else {
      constexpr char msg[] = "\ninterrupted again: quitting without saving\n";
      (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
      _exit(128 + sig);
    }
  }

  static_assert(std::atomic<int>::is_always_lock_free,
                "attn: a signal handler needs a lock-free flag");
  static inline std::atomic<int> signal_{0};
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  struct sigaction old_hup_ {};
};

}  // namespace attn::train
