// attn/data/text_batches.hpp: language-model batches from one token array: a train/validation split
// at a fixed fraction and seeded random windows (x = tokens[s, s+T), y = tokens[s+1, s+T+1)); and
// a fraction of a token range, from its start or spread over it (spread_sample).
// Does not shuffle or copy the corpus: windows are drawn with replacement, as nanoGPT does, from
// an Rng the caller passes (a trainer seeds one per step, so resuming replays the same batches).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "../core/error.hpp"
#include "../core/rng.hpp"
#include "../core/tensor.hpp"

namespace attn::data {

enum class Split { train, validation };

// A fraction of tokens[0, n) spread over the range: the first ⌊fraction · length⌋ tokens of each
// of `chunks` equal pieces (piece c = [⌊c n / chunks⌋, ⌊(c + 1) n / chunks⌋)), joined in order.
// chunks = 1 is the first fraction of the range. The joins are chunks − 1 seams that a window of
// the result can straddle (at most (chunks − 1) · block of its starts).
inline std::vector<std::int32_t> spread_sample(std::span<const std::int32_t> tokens, std::size_t n,
                                               double fraction, std::size_t chunks) {
  ATTN_CHECK(n <= tokens.size(), value_error, "spread_sample: a range of ", n, " tokens out of ",
             tokens.size());
  ATTN_CHECK(fraction > 0 && fraction <= 1, value_error,
             "spread_sample: the fraction must be in (0, 1], got ", fraction);
  ATTN_CHECK(chunks >= 1 && chunks <= n, value_error, "spread_sample: ", chunks,
             " pieces of a range of ", n, " tokens (1 to ", n, ")");
  std::vector<std::int32_t> kept;
  for (std::size_t c = 0; c < chunks; ++c) {
    const std::size_t lo = c * n / chunks, hi = (c + 1) * n / chunks;
    const auto take = std::size_t(double(hi - lo) * fraction);
    kept.insert(kept.end(), tokens.begin() + std::ptrdiff_t(lo),
                tokens.begin() + std::ptrdiff_t(lo + take));
  }
  return kept;
}

class TextBatches {
 public:
  // The first train_fraction of `tokens` is the training split, the rest validation.
  TextBatches(std::vector<std::int32_t> tokens, double train_fraction)
      : tokens_(std::move(tokens)) {
    ATTN_CHECK(train_fraction > 0 && train_fraction <= 1, value_error,
               "TextBatches: train_fraction must be in (0, 1], got ", train_fraction);
    split_ = static_cast<index_t>(double(tokens_.size()) * train_fraction);
  }

  // The first `train_tokens` tokens are the training split, the rest validation.
  static TextBatches split_at(std::vector<std::int32_t> tokens, index_t train_tokens) {
    ATTN_CHECK(train_tokens >= 0 && train_tokens <= index_t(tokens.size()), value_error,
               "TextBatches::split_at: ", train_tokens, " training tokens out of ", tokens.size());
    TextBatches b(std::move(tokens), 1.0);
    b.split_ = train_tokens;
    return b;
  }

  index_t size(Split s) const {
    return s == Split::train ? split_ : index_t(tokens_.size()) - split_;
  }
  std::span<const std::int32_t> tokens(Split s) const {
    const std::span<const std::int32_t> all(tokens_);
    return s == Split::train ? all.first(std::size_t(split_)) : all.subspan(std::size_t(split_));
  }

  // Fills x and y with [batch, block] windows of split `s` at starts drawn from `rng`.
  void sample(Split s, index_t batch, index_t block, Rng& rng, Tensor<std::int32_t>& x,
              Tensor<std::int32_t>& y) const {
    ATTN_CHECK(batch > 0 && block > 0, value_error, "TextBatches::sample: batch (", batch,
               ") and block (", block, ") must be positive");
    const std::span<const std::int32_t> t = tokens(s);
    const index_t n = index_t(t.size());
    ATTN_CHECK(n > block, value_error, "TextBatches::sample: the ",
               s == Split::train ? "training" : "validation", " split has ", n,
               " tokens, needs more than the block size ", block);
    x.resize(Shape{batch, block});
    y.resize(Shape{batch, block});
    for (index_t b = 0; b < batch; ++b) {
      const index_t start = static_cast<index_t>(rng.uniform_int(std::uint64_t(n - block)));
      for (index_t i = 0; i < block; ++i) {
        x[b * block + i] = t[std::size_t(start + i)];
        y[b * block + i] = t[std::size_t(start + i + 1)];
      }
    }
  }

 private:
  std::vector<std::int32_t> tokens_;
  index_t split_ = 0;
};

}  // namespace attn::data
