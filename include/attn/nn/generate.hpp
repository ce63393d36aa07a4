// attn/nn/generate.hpp: sampling text from a language model (GPT<…>): temperature, top-k, top-p
// (nucleus), a seed,
// a stop token, a stop request; with the key/value cache each new token costs one position's work,
// O(T·D) per layer; a batch of prompts of different lengths, left-padded (generate_batch). Does
// not do beam search.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <span>
#include <vector>

#include "transformer.hpp"

namespace attn::nn {

struct SampleConfig {
  index_t max_tokens = 200;  // new tokens to generate (at most)
  double temperature = 1.0;  // logits are divided by it; 0 picks the most likely token
  index_t top_k = 0;         // sample among the k most likely tokens (0: all)
  // Then among the most likely tokens whose probability (after temperature and top-k) sums to
  // top_p: a token is kept while the tokens more likely than it hold less than top_p (the rule of
  // "The Curious Case of Neural Text Degeneration", Holtzman et al., as transformers applies it
  // after top-k). 1: all.
  double top_p = 1.0;
  std::uint64_t seed = 0;
  std::int32_t stop_token = -1;  // generation ends after emitting it (-1: never)
  bool use_cache = true;         // false: recompute the whole window for every token (O(T²) each)
  // Asked before every new token (when set): true ends the sample there, with the tokens so far
  // (a trainer's Ctrl-C: attn/train/interrupt.hpp).
  std::function<bool()> stop_requested;
};

// Picks a token from one row of logits under `c` (temperature, top-k, top-p) with one draw of
// `rng`.
template <class T>
std::int32_t sample_token(std::span<const T> logits, const SampleConfig& c, Rng& rng) {
  const index_t V = static_cast<index_t>(logits.size());
  ATTN_CHECK(V > 0, value_error, "sample_token: empty logits");
  for (index_t i = 0; i < V; ++i)
    ATTN_CHECK(std::isfinite(double(logits[static_cast<std::size_t>(i)])), value_error,
               "sample_token: logit ", i, " is not finite (", logits[static_cast<std::size_t>(i)],
               ")");
  if (c.temperature == 0.0)
    return std::int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<index_t> order(static_cast<std::size_t>(V));
  std::iota(order.begin(), order.end(), index_t{0});
  // Most likely first; ties broken by index so the choice does not depend on the sort.
  const auto by_logit = [&](index_t a, index_t b) {
    const T la = logits[static_cast<std::size_t>(a)], lb = logits[static_cast<std::size_t>(b)];
    return la != lb ? la > lb : a < b;
  };
  ATTN_CHECK(c.top_p > 0 && c.top_p <= 1, value_error,
             "sample_token: top_p must be in (0, 1], got ", c.top_p);
  const index_t k = c.top_k > 0 ? std::min(c.top_k, V) : V;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), by_logit);
  // Softmax of logit / temperature over the k candidates, shifted by the largest (no overflow).
  const double top = double(logits[static_cast<std::size_t>(order[0])]);
  std::vector<double> p(static_cast<std::size_t>(k));
  double total = 0;
  for (index_t i = 0; i < k; ++i) {
    p[static_cast<std::size_t>(i)] = std::exp(
        (double(logits[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])]) - top) /
        c.temperature);
    total += p[static_cast<std::size_t>(i)];
  }
  // The nucleus: the first m candidates (most likely first), each preceded by less than top_p of
  // the mass; at least the most likely one.
  index_t m = k;
  if (c.top_p < 1) {
    double before = 0;
    for (index_t i = 0; i < k; ++i) {
      if (before >= c.top_p * total) {
        m = i;
        break;
      }
      before += p[static_cast<std::size_t>(i)];
    }
    total = 0;
    for (index_t i = 0; i < m; ++i) total += p[static_cast<std::size_t>(i)];
  }
  double u = rng.uniform() * total;
  for (index_t i = 0; i < m; ++i) {
    u -= p[static_cast<std::size_t>(i)];
    if (u < 0) return std::int32_t(order[static_cast<std::size_t>(i)]);
  }
  return std::int32_t(order[static_cast<std::size_t>(m - 1)]);
}

namespace detail {

// `c` as `who` (generate, generate_batch) takes it: a value_error naming the first bad field.
inline void check_sample_config(const SampleConfig& c, const char* who) {
  ATTN_CHECK(c.max_tokens >= 0, value_error, who, ": max_tokens must be >= 0, got ", c.max_tokens);
  ATTN_CHECK(c.temperature >= 0 && std::isfinite(c.temperature), value_error, who,
             ": temperature must be finite and >= 0, got ", c.temperature);
  ATTN_CHECK(c.top_k >= 0, value_error, who, ": top_k must be >= 0, got ", c.top_k);
  ATTN_CHECK(c.top_p > 0 && c.top_p <= 1, value_error, who, ": top_p must be in (0, 1], got ",
             c.top_p);
}

// The model in evaluation mode for the lifetime of this object, its mode restored after.
template <class Model>
struct EvaluationMode {
  Model& model;
  bool was_training;
  explicit EvaluationMode(Model& m) : model(m), was_training(m.training()) {
    model.set_training(false);
  }
  ~EvaluationMode() { model.set_training(was_training); }
  EvaluationMode(const EvaluationMode&) = delete;
  EvaluationMode& operator=(const EvaluationMode&) = delete;
};

}  // namespace detail

// Continues `prompt` (non-empty) with up to c.max_tokens sampled tokens; returns only the new ones.
// The model is put in evaluation mode for the call and restored after. When the context would
// exceed the block size, the cached path restarts from the most recent half block (so positions
// stay inside the learned table); the uncached path always uses the most recent block_size tokens.
template <class Model>
std::vector<std::int32_t> generate(Model& model, std::span<const std::int32_t> prompt,
                                   const SampleConfig& c) {
  using T = typename Model::T;
  ATTN_CHECK(!prompt.empty(), value_error, "generate: the prompt must hold at least one token");
  detail::check_sample_config(c, "generate");
  const index_t block = model.config().block_size;
  const detail::EvaluationMode<Model> evaluation(model);

  Tape<T> tape;
  NoGrad<T> no_grad(tape);
  Rng rng(c.seed);
  std::vector<std::int32_t> seq(prompt.begin(), prompt.end());
  std::vector<std::int32_t> out;
  auto caches = model.make_caches();
  index_t fed = 0;  // tokens of seq already in the caches
  Tensor<std::int32_t> ids;
  const auto window = [&](index_t begin) {
    ids.resize(Shape{1, index_t(seq.size()) - begin});
    std::copy(seq.begin() + begin, seq.end(), ids.begin());
  };
  for (index_t n = 0; n < c.max_tokens; ++n) {
    if (c.stop_requested && c.stop_requested()) break;
    tape.clear();
    const index_t L = index_t(seq.size());
    Var<T> logits;
    if (c.use_cache) {
      if (caches.front().length() + (L - fed) > block) {  // restart from the recent half block
        for (auto& cache : caches) cache.clear();
        fed = std::max<index_t>(L - std::max<index_t>(block / 2, 1), 0);
      }
      window(fed);
      logits = model.decode(tape, ids, caches);
      fed = L;
    } else {
      window(std::max<index_t>(L - block, 0));
      logits = model(tape, ids);
    }
    const index_t V = logits.shape().last(), rows = logits.numel() / V;
    const T* last = logits.value().data() + (rows - 1) * V;
    const std::int32_t next = sample_token(std::span<const T>(last, std::size_t(V)), c, rng);
    seq.push_back(next);
    out.push_back(next);
    if (next == c.stop_token) break;
  }
  return out;
}

// Continues every prompt of a batch at once (each non-empty), left-padded to the longest, with the
// key/value cache: the model's mask must be And<Causal, LeftPadding> (a GPT built for left-padded
// batches). Row b's keys start at its first real token and its absolute positions count from
// there, so with temperature 0 each row continues as generate() continues its prompt alone (to
// the rounding of a differently shaped computation), and sampling draws row b's tokens from a
// stream of its own, Rng(seed), as generate does. The longest prompt plus max_tokens must fit the
// block (no restart as in generate). Returns each row's new tokens, cut after its stop token.
template <class Model>
requires std::same_as<typename Model::Mask, mask::And<mask::Causal, mask::LeftPadding>>
    std::vector<std::vector<std::int32_t>> generate_batch(
        Model& model, const std::vector<std::vector<std::int32_t>>& prompts,
        const SampleConfig& c) {
  using T = typename Model::T;
  ATTN_CHECK(!prompts.empty(), value_error, "generate_batch: no prompts");
  index_t longest = 0;
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    ATTN_CHECK(!prompts[b].empty(), value_error, "generate_batch: prompt ", b, " is empty");
    longest = std::max(longest, index_t(prompts[b].size()));
  }
  detail::check_sample_config(c, "generate_batch");
  const index_t block = model.config().block_size;
  ATTN_CHECK(longest + c.max_tokens <= block, value_error, "generate_batch: the longest prompt (",
             longest, ") and max_tokens (", c.max_tokens, ") exceed the block size ", block);
  const index_t B = index_t(prompts.size());
  const detail::EvaluationMode<Model> evaluation(model);

  std::vector<index_t> starts(static_cast<std::size_t>(B));
  Tensor<std::int32_t> ids(Shape{B, longest}, std::int32_t{0});  // padding: any id, never seen
  for (index_t b = 0; b < B; ++b) {
    const std::vector<std::int32_t>& p = prompts[std::size_t(b)];
    starts[std::size_t(b)] = longest - index_t(p.size());
    std::copy(p.begin(), p.end(), ids.begin() + b * longest + starts[std::size_t(b)]);
  }
  const typename Model::Mask mask{mask::Causal{}, mask::LeftPadding(starts)};
  Tape<T> tape;
  NoGrad<T> no_grad(tape);
  std::vector<Rng> rngs(std::size_t(B), Rng(c.seed));
  std::vector<std::vector<std::int32_t>> out(static_cast<std::size_t>(B));
  std::vector<bool> done(std::size_t(B), false);
  auto caches = model.make_caches();
  for (index_t n = 0; n < c.max_tokens; ++n) {
    if (c.stop_requested && c.stop_requested()) break;
    tape.clear();
    const Var<T> logits = model.decode(tape, ids, caches, mask);  // [B, t, V]
    const index_t t = logits.shape()[1], V = logits.shape()[2];
    Tensor<std::int32_t> next(Shape{B, 1});
    bool all_done = true;
    for (index_t b = 0; b < B; ++b) {
      const T* last = logits.value().data() + ((b + 1) * t - 1) * V;
      const std::int32_t token =
          sample_token(std::span<const T>(last, std::size_t(V)), c, rngs[std::size_t(b)]);
      next[b] = token;
      if (!done[std::size_t(b)]) {
        out[std::size_t(b)].push_back(token);
        done[std::size_t(b)] = token == c.stop_token;
      }
      all_done = all_done && done[std::size_t(b)];
    }
    if (all_done) break;
    ids = std::move(next);
  }
  return out;
}

}  // namespace attn::nn
