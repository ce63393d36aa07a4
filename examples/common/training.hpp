// examples/common/training.hpp: what the example trainers (char_gpt, birthplace) share, besides
// the attention variants (attention_variants.hpp) and checkpoint files (char_checkpoint.hpp):
// per-step seeds, one optimizer step, the progress line, durations. Their files, memory check,
// interruption and command line are in run_files.hpp, memory.hpp, interrupt.hpp and cli.hpp
// (which this header leaves out: the training code of a program need not compile CLI11).
// Does not parse options, hold a training loop or choose file names: each trainer keeps its own.
#pragma once

#include <sys/resource.h>
#include <unistd.h>
#include <attn/attn.hpp>
#include <attn/io/io.hpp>
#include <attn/optim/optim.hpp>

#include "attention_variants.hpp"
#include "char_checkpoint.hpp"
#include "interrupt.hpp"
#include "memory.hpp"
#include "run_files.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace examples {

// ---- small helpers ---------------------------------------------------------------------------

// A seed for step `step` of stream `stream` of a run: batches and dropout of a step depend only
// on (seed, step), so a resumed run replays exactly what the uninterrupted one would have done.
inline std::uint64_t step_seed(std::uint64_t seed, std::uint64_t stream, std::int64_t step) {
  attn::Rng r(seed ^ (stream * 0x9E3779B97F4A7C15ull) ^ (std::uint64_t(step) << 20));
  return r.split();
}

inline std::string format_duration(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, s / 60 % 60);
  else
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  return buf;
}

// A double as text that parses back to the same double (for checkpoint metadata).
inline std::string exact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
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

// A GPT configuration from a trainer's model options (everything else at GPTConfig's defaults).
struct ModelShape {
  attn::index_t vocab = 0, block = 0, layers = 0, heads = 0, d_model = 0;
  double dropout = 0;
  std::uint64_t seed = 0;
};
inline attn::nn::GPTConfig gpt_config(const ModelShape& m) {
  attn::nn::GPTConfig c;
  c.vocab_size = m.vocab;
  c.block_size = m.block;
  c.layers = m.layers;
  c.heads = m.heads;
  c.d_model = m.d_model;
  c.dropout = m.dropout;
  c.seed = m.seed;
  return c;
}

// ---- one optimizer step ----------------------------------------------------------------------

struct StepResult {
  double loss = 0;       // the batch's mean loss before the update
  double grad_norm = 0;  // the global gradient norm before clipping
};

// Targets in rows [begin, end) of y [N, T] that count for the loss (not ignore_index).
inline attn::index_t counted_targets(const attn::Tensor<std::int32_t>& y, std::int32_t ignore_index,
                                     attn::index_t begin, attn::index_t end) {
  const attn::index_t t = y.shape()[1];
  return attn::index_t(std::count_if(y.begin() + begin * t, y.begin() + end * t,
                                     [&](std::int32_t v) { return v != ignore_index; }));
}

// The backward pass of rows [begin, end) of x, y [N, T] into the parameters' gradients (added to
// what they hold); returns the loss it differentiated.
//
// The rows run in chunks of micro_batch (gradient accumulation; all at once when micro_batch <= 0),
// so the tape holds one chunk's activations at a time: chunk c with n_c counted targets contributes
// its mean loss times n_c / n, with n the counted targets of the whole batch, so the chunks of all
// rows sum to the batch's mean loss, and so do the gradients (up to rounding). Chunk c draws its
// dropout from the c-th split of Rng(dropout_seed). One chunk of the whole batch is simply the mean
// loss, with dropout from dropout_seed itself.
template <class Model>
double backward_rows(Model& model, attn::Tape<float>& tape, const attn::Tensor<std::int32_t>& x,
                     const attn::Tensor<std::int32_t>& y, std::int32_t ignore_index,
                     attn::index_t begin, attn::index_t end, double n, std::uint64_t dropout_seed,
                     attn::index_t micro_batch) {
  const attn::index_t rows = x.shape()[0], t = x.shape()[1];
  if (begin == 0 && end == rows && (micro_batch <= 0 || micro_batch >= rows)) {
    model.reseed(dropout_seed);
    tape.clear();
    const attn::Var<float> loss = attn::cross_entropy(model(tape, x), y, ignore_index);
    tape.backward(loss);
    return loss.item();
  }
  const attn::index_t chunk =
      micro_batch > 0 ? micro_batch : std::max<attn::index_t>(end - begin, 1);
  double total = 0;
  attn::Rng seeds(dropout_seed);
  attn::Tensor<std::int32_t> xc, yc;
  for (attn::index_t first = begin; first < end; first += chunk) {
    const attn::index_t last = std::min(end, first + chunk);
    const std::uint64_t chunk_seed = seeds.split();
    const attn::index_t nc = counted_targets(y, ignore_index, first, last);
    if (nc == 0) continue;
    xc.resize(attn::Shape{last - first, t});  // [n_c rows, T]
    yc.resize(attn::Shape{last - first, t});
    std::copy(x.begin() + first * t, x.begin() + last * t, xc.begin());
    std::copy(y.begin() + first * t, y.begin() + last * t, yc.begin());
    model.reseed(chunk_seed);
    tape.clear();
    const attn::Var<float> loss =
        attn::cross_entropy(model(tape, xc), yc, ignore_index) * float(double(nc) / n);
    tape.backward(loss);
    total += loss.item();
  }
  return total;
}

// With the step's gradient in the parameters: gradient clipping to grad_clip, one optimizer step at
// `lr`, gradients zeroed. Throws value_error when the loss is not finite.
template <class Optimizer>
StepResult apply_step(Optimizer& opt, const std::vector<attn::optim::NamedParameter<float>>& params,
                      double loss, double lr, double grad_clip) {
  StepResult r;
  r.loss = loss;
  r.grad_norm = attn::optim::clip_grad_norm(params, grad_clip);
  opt.set_lr(lr);
  opt.step();
  opt.zero_grad();
  ATTN_CHECK(std::isfinite(r.loss), attn::value_error, "the training loss is ", r.loss,
             "; lower the learning rate");
  return r;
}

// Dropout streams from `dropout_seed`, the mean cross-entropy of model(x) against y (targets equal
// to ignore_index do not count), backward (in chunks of micro_batch rows when micro_batch > 0, see
// backward_rows), gradient clipping to grad_clip, one optimizer step at `lr`. Throws value_error
// when the loss is not finite.
template <class Model, class Optimizer>
StepResult train_step(Model& model, attn::Tape<float>& tape, Optimizer& opt,
                      const std::vector<attn::optim::NamedParameter<float>>& params,
                      const attn::Tensor<std::int32_t>& x, const attn::Tensor<std::int32_t>& y,
                      std::int32_t ignore_index, double lr, double grad_clip,
                      std::uint64_t dropout_seed, attn::index_t micro_batch = 0) {
  const attn::index_t rows = x.shape()[0];
  const double n = double(std::max<attn::index_t>(counted_targets(y, ignore_index, 0, rows), 1));
  const double loss =
      backward_rows(model, tape, x, y, ignore_index, 0, rows, n, dropout_seed, micro_batch);
  return apply_step(opt, params, loss, lr, grad_clip);
}

// ---- the progress line -----------------------------------------------------------------------

// "[########........] <text> | ETA 1m02s" on stderr: redrawn in place on a terminal; elsewhere
// (a log file) only the reports marked `always`, one line each.
class ProgressLine {
 public:
  ProgressLine() : tty_(isatty(fileno(stderr)) != 0) {}
  bool tty() const { return tty_; }

  void show(double fraction, const std::string& text, double eta_seconds, bool always) {
    if (!tty_ && !always) return;
    const int width = 24;
    const int filled = std::clamp(int(double(width) * fraction), 0, width);
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

}  // namespace examples
