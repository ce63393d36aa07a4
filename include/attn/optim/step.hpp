// attn/optim/step.hpp: one optimizer step of a language model on a batch of token sequences: the
// mean cross-entropy over the targets that count (not ignore_index), its backward pass (in chunks
// of rows when memory asks for gradient accumulation), gradient clipping, the optimizer's update
// and zeroed gradients. The training step of every attn trainer, and what a data-parallel step
// (attn/dist/data_parallel.hpp) does per shard.
// Does not choose batches, seeds or the learning rate: the caller passes them (attn/train/loop.hpp
// derives them from the run's seed and step, so that a resumed run repeats the same steps).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../autodiff/expression.hpp"
#include "../autodiff/nn_ops.hpp"
#include "../autodiff/tape.hpp"
#include "../core/error.hpp"
#include "../core/rng.hpp"
#include "../core/tensor.hpp"
#include "clip.hpp"
#include "param_group.hpp"

namespace attn::optim {

struct StepResult {
  double loss = 0;       // the batch's mean loss before the update
  double grad_norm = 0;  // the global gradient norm before clipping
};

// Targets in rows [begin, end) of y [N, T] that count for the loss (not ignore_index).
inline index_t counted_targets(const Tensor<std::int32_t>& y, std::int32_t ignore_index,
                               index_t begin, index_t end) {
  const index_t t = y.shape()[1];
  return index_t(std::count_if(y.begin() + begin * t, y.begin() + end * t,
                               [&](std::int32_t v) { return v != ignore_index; }));
}

// The counted targets of the whole batch y [N, T]: value_error when there are none. A batch whose
// every target is ignore_index teaches nothing, and its loss of 0 (cross_entropy's choice) would
// hide a bug in the data.
inline double batch_targets(const Tensor<std::int32_t>& y, std::int32_t ignore_index) {
  const index_t n = counted_targets(y, ignore_index, 0, y.shape()[0]);
  ATTN_CHECK(n > 0, value_error, "train_step: every target of the batch is ignore_index (",
             ignore_index, "): there is nothing to learn from it");
  return double(n);
}

// The backward pass of rows [begin, end) of x, y [N, T] into the parameters' gradients (added to
// what they hold); returns the loss it differentiated. `model(tape, x)` gives logits [n, T, V] and
// `model.reseed(seed)` restarts its dropout streams.
//
// The rows run in chunks of micro_batch (gradient accumulation; all at once when micro_batch <= 0),
// so the tape holds one chunk's activations at a time: chunk c with n_c counted targets contributes
// its mean loss times n_c / n, with n the counted targets of the whole batch, so the chunks of all
// rows sum to the batch's mean loss, and so do the gradients (up to rounding). Chunk c draws its
// dropout from the c-th split of Rng(dropout_seed). One chunk of the whole batch is simply the mean
// loss, with dropout from dropout_seed itself.
template <class Model>
double backward_rows(Model& model, Tape<float>& tape, const Tensor<std::int32_t>& x,
                     const Tensor<std::int32_t>& y, std::int32_t ignore_index, index_t begin,
                     index_t end, double n, std::uint64_t dropout_seed, index_t micro_batch) {
  const index_t rows = x.shape()[0], t = x.shape()[1];
  if (begin == 0 && end == rows && (micro_batch <= 0 || micro_batch >= rows)) {
    model.reseed(dropout_seed);
    tape.clear();
    const Var<float> loss = cross_entropy(model(tape, x), y, ignore_index);
    tape.backward(loss);
    return loss.item();
  }
  const index_t chunk = micro_batch > 0 ? micro_batch : std::max<index_t>(end - begin, 1);
  double total = 0;
  Rng seeds(dropout_seed);
  Tensor<std::int32_t> xc, yc;
  for (index_t first = begin; first < end; first += chunk) {
    const index_t last = std::min(end, first + chunk);
    const std::uint64_t chunk_seed = seeds.split();
    const index_t nc = counted_targets(y, ignore_index, first, last);
    if (nc == 0) continue;
    xc.resize(Shape{last - first, t});  // [n_c rows, T]
    yc.resize(Shape{last - first, t});
    std::copy(x.begin() + first * t, x.begin() + last * t, xc.begin());
    std::copy(y.begin() + first * t, y.begin() + last * t, yc.begin());
    model.reseed(chunk_seed);
    tape.clear();
    const Var<float> loss =
        cross_entropy(model(tape, xc), yc, ignore_index) * float(double(nc) / n);
    tape.backward(loss);
    total += loss.item();
  }
  return total;
}

// With the step's gradient in the parameters: gradient clipping to grad_clip, one optimizer step at
// `lr`, gradients zeroed. Throws value_error when the loss is not finite (after the update, which
// a trainer then does not save).
template <class Optimizer>
StepResult apply_step(Optimizer& opt, const std::vector<NamedParameter<float>>& params, double loss,
                      double lr, double grad_clip) {
  StepResult r;
  r.loss = loss;
  r.grad_norm = clip_grad_norm(params, grad_clip);
  opt.set_lr(lr);
  opt.step();
  opt.zero_grad();
  ATTN_CHECK(std::isfinite(r.loss), value_error, "the training loss is ", r.loss,
             "; lower the learning rate");
  return r;
}

// Dropout streams from `dropout_seed`, the mean cross-entropy of model(x) against y (targets equal
// to ignore_index do not count), backward (in chunks of micro_batch rows when micro_batch > 0, see
// backward_rows), gradient clipping to grad_clip, one optimizer step at `lr`. Throws value_error
// when every target is ignore_index (batch_targets) and when the loss is not finite.
template <class Model, class Optimizer>
StepResult train_step(Model& model, Tape<float>& tape, Optimizer& opt,
                      const std::vector<NamedParameter<float>>& params,
                      const Tensor<std::int32_t>& x, const Tensor<std::int32_t>& y,
                      std::int32_t ignore_index, double lr, double grad_clip,
                      std::uint64_t dropout_seed, index_t micro_batch = 0) {
  const index_t rows = x.shape()[0];
  const double n = batch_targets(y, ignore_index);
  const double loss =
      backward_rows(model, tape, x, y, ignore_index, 0, rows, n, dropout_seed, micro_batch);
  return apply_step(opt, params, loss, lr, grad_clip);
}

}  // namespace attn::optim
