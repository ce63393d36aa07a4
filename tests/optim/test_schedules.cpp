// The learning-rate schedules: values at chosen steps (written out by hand from each formula),
// endpoints, monotonicity, the code they come from (nanoGPT's get_lr, minGPT's lr_decay), checks.
// Does not step an optimizer (test_optimizers.cpp sets the lr each step as a schedule would).
#include <doctest/doctest.h>

#include <attn/optim/schedule.hpp>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>

#include "../test_util.hpp"

using attn::optim::LinearDecay;
using attn::optim::MinGptTokenSchedule;
using attn::optim::Rex;
using attn::optim::WarmupCosine;
using attn::test::message_of;

namespace {

constexpr double pi = std::numbers::pi;

// nanoGPT's get_lr, transcribed line by line (warmup as in build-nanogpt / llm.c: (it + 1) / W).
double nanogpt_get_lr(std::int64_t it, double learning_rate, double min_lr,
                      std::int64_t warmup_iters, std::int64_t lr_decay_iters) {
  if (it < warmup_iters) return learning_rate * static_cast<double>(it + 1) / warmup_iters;
  if (it > lr_decay_iters) return min_lr;
  const double decay_ratio =
      static_cast<double>(it - warmup_iters) / static_cast<double>(lr_decay_iters - warmup_iters);
  const double coeff = 0.5 * (1.0 + std::cos(pi * decay_ratio));
  return min_lr + coeff * (learning_rate - min_lr);
}

// minGPT's trainer.py lr_decay block, transcribed line by line (Python floats are doubles).
double mingpt_lr(double tokens, double learning_rate, double warmup_tokens, double final_tokens) {
  double lr_mult;
  if (tokens < warmup_tokens) {
    lr_mult = tokens / std::max(1.0, warmup_tokens);
  } else {
    const double progress = (tokens - warmup_tokens) / std::max(1.0, final_tokens - warmup_tokens);
    lr_mult = std::max(0.1, 0.5 * (1.0 + std::cos(pi * progress)));
  }
  return learning_rate * lr_mult;
}

}  // namespace

TEST_CASE("WarmupCosine: values, endpoints, monotone pieces, nanoGPT's get_lr") {
  const WarmupCosine s{.lr_max = 6e-4, .lr_min = 6e-5, .warmup_steps = 10, .total_steps = 90};
  // Hand-computed: warmup 6e-4 (s + 1) / 10; cosine over steps 10..90, half-way at step 50.
  CHECK(s(0) == doctest::Approx(6e-5).epsilon(1e-14));
  CHECK(s(4) == doctest::Approx(3e-4).epsilon(1e-14));
  CHECK(s(9) == doctest::Approx(6e-4).epsilon(1e-14));
  CHECK(s(10) == doctest::Approx(6e-4).epsilon(1e-14));
  CHECK(s(50) == doctest::Approx(3.3e-4).epsilon(1e-14));  // lr_min + ½ (lr_max − lr_min)
  // A quarter of the way: ½ (1 + cos(π/4)) = 0.8535533905932737
  CHECK(s(30) == doctest::Approx(6e-5 + 0.8535533905932737 * 5.4e-4).epsilon(1e-14));
  CHECK(s(89) > 6e-5);
  CHECK(s(90) == 6e-5);
  CHECK(s(91) == 6e-5);
  CHECK(s(1'000'000) == 6e-5);
  for (std::int64_t t = 0; t <= 120; ++t) {
    CAPTURE(t);
    CHECK(s(t) == doctest::Approx(nanogpt_get_lr(t, 6e-4, 6e-5, 10, 90)).epsilon(1e-15));
    if (t > 0 && t < 10) CHECK(s(t) > s(t - 1));
    if (t > 10) CHECK(s(t) <= s(t - 1));
    CHECK(s(t) >= 6e-5 * (1 - 1e-15));  // step 0 is 6e-4 · 1/10, which rounds a hair below 6e-5
    CHECK(s(t) <= 6e-4);
  }
  // No warmup: the cosine starts at lr_max at step 0.
  const WarmupCosine no_warmup{1.0, 0.0, 0, 4};
  CHECK(no_warmup(0) == 1.0);
  CHECK(no_warmup(2) == doctest::Approx(0.5).epsilon(1e-15));
  CHECK(no_warmup(4) == 0.0);
  // Warmup over the whole run: then lr_min.
  const WarmupCosine all_warmup{1.0, 0.1, 4, 4};
  CHECK(all_warmup(3) == 1.0);
  CHECK(all_warmup(4) == 0.1);
}

TEST_CASE("LinearDecay: warmup, straight line to lr_min, constant after") {
  const LinearDecay s{.lr_max = 1e-3, .lr_min = 1e-4, .warmup_steps = 5, .total_steps = 25};
  CHECK(s(0) == doctest::Approx(2e-4).epsilon(1e-14));
  CHECK(s(4) == doctest::Approx(1e-3).epsilon(1e-14));
  CHECK(s(5) == doctest::Approx(1e-3).epsilon(1e-14));
  CHECK(s(15) == doctest::Approx(5.5e-4).epsilon(1e-14));  // half-way
  CHECK(s(20) == doctest::Approx(3.25e-4).epsilon(1e-14));
  CHECK(s(25) == 1e-4);
  CHECK(s(30) == 1e-4);
  for (std::int64_t t = 6; t <= 30; ++t) CHECK(s(t) <= s(t - 1));
  // Equal steps down: the decrements are all (lr_max − lr_min) / 20.
  CHECK(s(11) - s(12) == doctest::Approx(4.5e-5).epsilon(1e-10));
}

TEST_CASE("MinGptTokenSchedule: minGPT's token warmup and cosine to a 0.1 floor, quirks included") {
  const MinGptTokenSchedule s{.lr = 6e-4, .warmup_tokens = 1000, .final_tokens = 11000};
  CHECK(s(0) == 0.0);
  CHECK(s(500) == doctest::Approx(3e-4).epsilon(1e-14));
  CHECK(s(1000) == doctest::Approx(6e-4).epsilon(1e-14));
  CHECK(s(6000) == doctest::Approx(3e-4).epsilon(1e-14));   // progress ½: mult ½
  CHECK(s(11000) == doctest::Approx(6e-5).epsilon(1e-14));  // progress 1: mult max(0.1, 0)
  CHECK(s(13000) == doctest::Approx(6e-5).epsilon(1e-14));  // progress 1.2: still on the floor
  // Past the floor the unclamped cosine climbs again, as in minGPT's code: progress 1.5 -> ½.
  CHECK(s(16000) == doctest::Approx(3e-4).epsilon(1e-14));
  for (std::int64_t tokens = 0; tokens <= 20000; tokens += 37) {
    CAPTURE(tokens);
    CHECK(
        s(tokens) ==
        doctest::Approx(mingpt_lr(static_cast<double>(tokens), 6e-4, 1000, 11000)).epsilon(1e-15));
    CHECK(s(tokens) <= 6e-4);
  }
  for (std::int64_t tokens = 1000; tokens <= 11000; tokens += 100)
    CHECK(s(tokens + 100) <= s(tokens));
  // minGPT's GPT-3 defaults (375e6 warmup, 260e9 final tokens) stay exact in double.
  const MinGptTokenSchedule gpt3{3e-4, 375'000'000, 260'000'000'000};
  CHECK(gpt3(187'500'000) == doctest::Approx(1.5e-4).epsilon(1e-14));
  CHECK(gpt3(260'000'000'000) == doctest::Approx(3e-5).epsilon(1e-14));
  // No warmup tokens: full lr from the start (max(1, 0) keeps the division finite).
  const MinGptTokenSchedule no_warmup{1.0, 0, 100};
  CHECK(no_warmup(0) == 1.0);
}

TEST_CASE("MinGptTokenSchedule::for_step: the lr of each step as minGPT's trainer applies it") {
  // minGPT's loop, written out: the optimizer is built at the full lr; after each step the tokens
  // of that step are counted and the lr for the next step is set from the formula.
  const MinGptTokenSchedule s{.lr = 6e-3, .warmup_tokens = 10240, .final_tokens = 200000};
  const std::int64_t tokens_per_step = 128 * 128;
  double applied = s.lr;  // what the optimizer holds before the first step
  std::int64_t tokens = 0;
  for (std::int64_t step = 0; step < 40; ++step) {
    CAPTURE(step);
    CHECK(s.for_step(step, tokens) == doctest::Approx(applied).epsilon(1e-15));
    tokens += tokens_per_step;
    applied = mingpt_lr(static_cast<double>(tokens), s.lr, 10240, 200000);
  }
  CHECK(s.for_step(0, 0) == 6e-3);  // not s(0) == 0: the first step is not a warmup step
  CHECK(s(0) == 0.0);
  CHECK(message_of<attn::value_error>([&] { (void)s.for_step(-1, 0); }) ==
        "MinGptTokenSchedule: step must be >= 0, got -1");
}

TEST_CASE("Rex: (1 − z) / (½ + ½ (1 − z)) from lr_max to lr_min, above the linear schedule") {
  const Rex s{.lr_max = 1.0, .lr_min = 0.0, .total_steps = 100};
  CHECK(s(0) == 1.0);
  CHECK(s(50) == doctest::Approx(2.0 / 3.0).epsilon(1e-15));   // z = ½: ½ / ¾
  CHECK(s(75) == doctest::Approx(0.4).epsilon(1e-15));         // z = ¾: ¼ / (5/8)
  CHECK(s(90) == doctest::Approx(0.1 / 0.55).epsilon(1e-15));  // z = 0.9
  CHECK(s(100) == 0.0);
  CHECK(s(150) == 0.0);
  for (std::int64_t t = 1; t <= 100; ++t) {
    CAPTURE(t);
    CHECK(s(t) < s(t - 1));
    CHECK(s(t) >= 1.0 - static_cast<double>(t) / 100.0);  // never below linear decay
  }
  const Rex with_floor{2e-3, 2e-4, 10};
  CHECK(with_floor(5) == doctest::Approx(2e-4 + 1.8e-3 * 2.0 / 3.0).epsilon(1e-14));
  CHECK(with_floor(10) == 2e-4);
}

TEST_CASE("schedules reject invalid settings with value_error naming the schedule and field") {
  auto msg = [](auto&& schedule, std::int64_t step) {
    return message_of<attn::value_error>([&] { (void)schedule(step); });
  };
  CHECK(msg(WarmupCosine{1e-3, 1e-4, 10, 0}, 0) == "WarmupCosine: total_steps must be > 0, got 0");
  CHECK(msg(WarmupCosine{1e-3, 1e-4, 20, 10}, 0) ==
        "WarmupCosine: warmup_steps must be in [0, total_steps = 10], got 20");
  CHECK(msg(WarmupCosine{1e-3, 1e-4, -1, 10}, 0).find("warmup_steps") != std::string::npos);
  CHECK(msg(WarmupCosine{1e-4, 1e-3, 1, 10}, 0) ==
        "WarmupCosine: lr_min (0.001) must not exceed lr_max (0.0001)");
  CHECK(msg(WarmupCosine{-1.0, 0.0, 1, 10}, 0) ==
        "WarmupCosine: lr_max must be a finite number >= 0, got -1");
  CHECK(msg(WarmupCosine{1.0, 0.0, 1, 10}, -3) == "WarmupCosine: the step must be >= 0, got -3");
  CHECK(msg(LinearDecay{1.0, 0.0, 11, 10}, 0).find("LinearDecay: warmup_steps") == 0);
  CHECK(msg(Rex{1.0, 0.0, -5}, 0) == "Rex: total_steps must be > 0, got -5");
  CHECK(msg(Rex{1.0, 2.0, 5}, 0).find("Rex: lr_min") == 0);
  CHECK(msg(MinGptTokenSchedule{1.0, 100, 50}, 0) ==
        "MinGptTokenSchedule: final_tokens (50) must be >= warmup_tokens (100)");
  CHECK(msg(MinGptTokenSchedule{1.0, -1, 50}, 0).find("warmup_tokens must be >= 0") !=
        std::string::npos);
  CHECK(msg(MinGptTokenSchedule{1.0, 0, 50}, -1) ==
        "MinGptTokenSchedule: tokens_seen must be >= 0, got -1");
  CHECK(msg(MinGptTokenSchedule{std::nan(""), 0, 50}, 0).find("MinGptTokenSchedule: lr") == 0);
  CHECK_NOTHROW(WarmupCosine{1.0, 1.0, 0, 1}.validate());  // constant lr is fine
}
