// attn/optim/schedule.hpp: learning-rate schedules as small structs, lr = schedule(step): linear
// warmup + cosine (nanoGPT), warmup + linear decay, minGPT's token-based schedule, and REX.
// Does not hold state or touch an optimizer: the training loop calls opt.set_lr(schedule(step)).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>

#include "../core/error.hpp"

namespace attn::optim {

namespace detail {

inline void check_schedule_lr(const char* who, const char* field, double v) {
  ATTN_CHECK(std::isfinite(v) && v >= 0, value_error, who, ": ", field,
             " must be a finite number >= 0, got ", v);
}

// Checks shared by the step-based schedules: 0 <= lr_min <= lr_max, 0 <= warmup <= total, total >
// 0.
inline void check_step_schedule(const char* who, double lr_max, double lr_min,
                                std::int64_t warmup_steps, std::int64_t total_steps) {
  check_schedule_lr(who, "lr_max", lr_max);
  check_schedule_lr(who, "lr_min", lr_min);
  ATTN_CHECK(lr_min <= lr_max, value_error, who, ": lr_min (", lr_min, ") must not exceed lr_max (",
             lr_max, ")");
  ATTN_CHECK(total_steps > 0, value_error, who, ": total_steps must be > 0, got ", total_steps);
  ATTN_CHECK(warmup_steps >= 0 && warmup_steps <= total_steps, value_error, who,
             ": warmup_steps must be in [0, total_steps = ", total_steps, "], got ", warmup_steps);
}

inline void check_step(const char* who, std::int64_t step) {
  ATTN_CHECK(step >= 0, value_error, who, ": the step must be >= 0, got ", step);
}

// Linear warmup from 0 over steps 0 .. W−1: lr_max (s + 1) / W, so step W − 1 reaches lr_max.
inline double linear_warmup(double lr_max, std::int64_t step, std::int64_t warmup_steps) {
  return lr_max * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
}

}  // namespace detail

// Linear warmup then cosine decay (nanoGPT's train.py get_lr), for step s (0-based), warmup W,
// total S:
//   s < W:       lr = lr_max (s + 1) / W
//   W <= s < S:  lr = lr_min + ½ (1 + cos(π (s − W) / (S − W))) (lr_max − lr_min)
//   s >= S:      lr = lr_min
// The warmup is build-nanogpt's and llm.c's (s + 1) / W, which reaches lr_max at s = W − 1;
// nanoGPT's train.py now uses (s + 1) / (W + 1), an earlier version s / W.
struct WarmupCosine {
  double lr_max;
  double lr_min;
  std::int64_t warmup_steps;
  std::int64_t total_steps;

  void validate() const {
    detail::check_step_schedule("WarmupCosine", lr_max, lr_min, warmup_steps, total_steps);
  }

  double operator()(std::int64_t step) const {
    validate();
    detail::check_step("WarmupCosine", step);
    if (step < warmup_steps) return detail::linear_warmup(lr_max, step, warmup_steps);
    if (step >= total_steps) return lr_min;
    const double ratio = static_cast<double>(step - warmup_steps) /
                         static_cast<double>(total_steps - warmup_steps);   // in [0, 1)
    const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));  // 1 -> 0
    return lr_min + coeff * (lr_max - lr_min);
  }
};

// Linear warmup as WarmupCosine, then a straight line from lr_max at step W to lr_min at step S:
//   s < W:       lr = lr_max (s + 1) / W
//   W <= s < S:  lr = lr_max + (lr_min − lr_max) (s − W) / (S − W)
//   s >= S:      lr = lr_min
struct LinearDecay {
  double lr_max;
  double lr_min;
  std::int64_t warmup_steps;
  std::int64_t total_steps;

  void validate() const {
    detail::check_step_schedule("LinearDecay", lr_max, lr_min, warmup_steps, total_steps);
  }

  double operator()(std::int64_t step) const {
    validate();
    detail::check_step("LinearDecay", step);
    if (step < warmup_steps) return detail::linear_warmup(lr_max, step, warmup_steps);
    if (step >= total_steps) return lr_min;
    const double ratio =
        static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
    return lr_max + (lr_min - lr_max) * ratio;
  }
};

// minGPT's schedule (mingpt/trainer.py before the 2022 rewrite, `if config.lr_decay:`), driven by
// the number of tokens seen so far (targets >= 0), with mult:
//   tokens < warmup_tokens:  mult = tokens / max(1, warmup_tokens)
//   otherwise:               progress = (tokens − warmup_tokens) / max(1, final_tokens −
//   warmup_tokens)
//                            mult = max(0.1, ½ (1 + cos(π progress)))
//   lr = lr · mult
// Faithful to that code, including two quirks: progress is not clamped, so past
// final_tokens + ~0.2 (final − warmup) the cosine climbs again from the 0.1 floor (set final_tokens
// to the whole run); and minGPT sets the lr *after* each optimizer step, so its very first step
// runs at the full lr the optimizer was built with, and step k > 0 at the schedule of the tokens
// seen in steps 0 .. k−1. `for_step` gives that lr; operator() is the formula alone.
struct MinGptTokenSchedule {
  double lr;
  std::int64_t warmup_tokens;
  std::int64_t final_tokens;

  void validate() const {
    detail::check_schedule_lr("MinGptTokenSchedule", "lr", lr);
    ATTN_CHECK(warmup_tokens >= 0, value_error,
               "MinGptTokenSchedule: warmup_tokens must be >= 0, got ", warmup_tokens);
    ATTN_CHECK(final_tokens >= warmup_tokens, value_error, "MinGptTokenSchedule: final_tokens (",
               final_tokens, ") must be >= warmup_tokens (", warmup_tokens, ")");
  }

  double operator()(std::int64_t tokens_seen) const {
    validate();
    ATTN_CHECK(tokens_seen >= 0, value_error, "MinGptTokenSchedule: tokens_seen must be >= 0, got ",
               tokens_seen);
    double mult;
    if (tokens_seen < warmup_tokens) {
      mult = static_cast<double>(tokens_seen) /
             static_cast<double>(std::max<std::int64_t>(1, warmup_tokens));
    } else {
      const double progress =
          static_cast<double>(tokens_seen - warmup_tokens) /
          static_cast<double>(std::max<std::int64_t>(1, final_tokens - warmup_tokens));
      mult = std::max(0.1, 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
    }
    return lr * mult;
  }

  // The lr of optimizer step `step` (0-based) in minGPT's trainer, `tokens_before` the tokens of
  // the steps before it: the full lr for step 0, the schedule at tokens_before after it.
  double for_step(std::int64_t step, std::int64_t tokens_before) const {
    ATTN_CHECK(step >= 0, value_error, "MinGptTokenSchedule: step must be >= 0, got ", step);
    if (step == 0) {
      validate();
      return lr;
    }
    return (*this)(tokens_before);
  }
};

// REX, the reflected-exponential profile (Chen, Wolfe & Kyrillidis, "REX: Revisiting Budgeted
// Training with an Improved Schedule", MLSys 2022, arXiv:2107.04197, Sec. 3), sampled every step:
// with z = s / S,
//   lr = lr_min + (lr_max − lr_min) · (1 − z) / (½ + ½ (1 − z))        for s < S,  lr_min after.
// It stays near lr_max longer than linear decay and drops faster at the end: at z = ½ the factor is
// 2/3 (linear: ½). The form is the paper's with its constant ½ (as in pytorch_optimizer's
// REXScheduler); some implementations (REX_LR) replace ½ by a tunable 0.9 / 0.1 split.
struct Rex {
  double lr_max;
  double lr_min;
  std::int64_t total_steps;

  void validate() const { detail::check_step_schedule("Rex", lr_max, lr_min, 0, total_steps); }

  double operator()(std::int64_t step) const {
    validate();
    detail::check_step("Rex", step);
    if (step >= total_steps) return lr_min;
    const double z = static_cast<double>(step) / static_cast<double>(total_steps);
    return lr_min + (lr_max - lr_min) * (1.0 - z) / (0.5 + 0.5 * (1.0 - z));
  }
};

}  // namespace attn::optim
