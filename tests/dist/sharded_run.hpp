// tests/dist/sharded_run.hpp: a small GPT (2 layers, width 32, dropout) trained for a few steps
// through attn::dist::DataParallel::step, as char_gpt trains: batches and dropout from (seed,
// step), AdamW, warmup + cosine, clipping. Its targets skip a few positions (ignore_index) so that
// shards count different numbers of targets. Returns every step's loss and the final parameters.
// Does not compare anything: the tests that call it do.
#pragma once

#include <attn/attn.hpp>
#include <attn/data/data.hpp>
#include <attn/dist/data_parallel.hpp>
#include <attn/train/loop.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace attn::test {

struct ShardedRun {
  std::vector<double> losses, grad_norms;
  std::vector<float> parameters;  // all values, in for_each_parameter order
};

inline ShardedRun sharded_run(dist::DataParallel& dp, index_t shards, index_t micro_batch,
                              int steps, double dropout, index_t batch = 7) {
  const std::string text =
      "First Citizen: Before we proceed any further, hear me speak. All: Speak, speak. First "
      "Citizen: You are all resolved rather to die than to famish? All: Resolved. resolved.";
  const auto tok = data::CharTokenizer::from_corpus(text);
  const auto batches = data::TextBatches::split_at(tok.encode(text), index_t(text.size()));
  nn::GPTConfig c;
  c.vocab_size = tok.size();
  c.block_size = 16;
  c.layers = 2;
  c.heads = 4;
  c.d_model = 32;
  c.dropout = dropout;
  c.seed = 7;
  nn::GPT<nn::CausalSelfAttention> model(c);
  dp.broadcast_parameters(model);
  auto params = optim::parameters_of<float>(model);
  optim::AdamConfig ac;
  ac.lr = 3e-3;
  ac.weight_decay = 0.01;
  optim::AdamW<float> opt(params, ac);
  const optim::WarmupCosine schedule{3e-3, 3e-4, 3, steps};
  Tape<float> tape;
  Tensor<std::int32_t> x, y;
  ShardedRun out;
  for (int step = 0; step < steps; ++step) {
    Rng rng(train::step_seed(1, 1, step));
    batches.sample(data::Split::train, batch, c.block_size, rng, x, y);
    for (index_t r = 0; r < batch; ++r)  // row r ignores its first r mod 4 targets
      for (index_t t = 0; t < r % 4; ++t) y[r * c.block_size + t] = -100;
    const optim::StepResult s = dp.step(model, tape, opt, params, x, y, -100, schedule(step), 1.0,
                                        rng.split(), micro_batch, shards);
    out.losses.push_back(s.loss);
    out.grad_norms.push_back(s.grad_norm);
  }
  model.for_each_parameter([&](const std::string&, Parameter<float>& p) {
    out.parameters.insert(out.parameters.end(), p.value.begin(), p.value.end());
  });
  return out;
}

}  // namespace attn::test
