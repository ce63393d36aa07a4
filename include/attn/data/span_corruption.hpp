// attn/data/span_corruption.hpp: the span-corruption pretraining data of the birth-place experiment
// (XCS224N ps5, after T5): a vocabulary with PAD □ and MASK ⁇ first, and examples
// "prefix ⁇ suffix ⁇ masked" from the documents (lines) of a corpus, padded to block + 1.
// Does not read files nor hold the examples: each one is drawn afresh from a seeded Rng.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../core/error.hpp"
#include "../core/rng.hpp"
#include "../core/tensor.hpp"
#include "char_tokenizer.hpp"

namespace attn::data {

// The two special characters and their ids in masked_vocabulary(). A PAD target is ignored by the
// loss (cross_entropy(logits, y, pad_id)), so padding never trains the model.
inline constexpr std::int32_t pad_id = 0;
inline constexpr std::int32_t mask_id = 1;
inline constexpr std::string_view pad_char = "\u25A1";   // □ WHITE SQUARE
inline constexpr std::string_view mask_char = "\u2047";  // ⁇ DOUBLE QUESTION MARK

// id 0 = □, id 1 = ⁇, then every code point of `corpus` (newlines included) in code point order.
// The corpus must not contain □ or ⁇ themselves: they would be ambiguous.
inline CharTokenizer masked_vocabulary(std::string_view corpus) {
  const CharTokenizer plain = CharTokenizer::from_corpus(corpus);
  ATTN_CHECK(plain.id_of(pad_char) < 0 && plain.id_of(mask_char) < 0, value_error,
             "masked_vocabulary: the corpus contains the PAD (U+25A1) or MASK (U+2047) character");
  return CharTokenizer::from_vocabulary(std::string(pad_char) + std::string(mask_char) +
                                        plain.vocabulary());
}

// The indices 0 .. n − 1 in an order drawn from `rng` (Fisher–Yates): one epoch's order.
inline std::vector<index_t> shuffled_indices(index_t n, Rng& rng) {
  ATTN_CHECK(n >= 0, value_error, "shuffled_indices: n must be >= 0, got ", n);
  std::vector<index_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), index_t{0});
  shuffle(std::span<index_t>(order), rng);
  return order;
}

// Drops the trailing columns of x, y [N, T] in which every target is PAD, keeping at least one.
// For a causal model trained with a loss that ignores PAD targets this changes neither the loss
// nor a gradient: position t sees only positions <= t, and a PAD target adds nothing. So a batch
// of short examples (QA pairs fill ~60 of 128 positions) costs only what its longest row needs.
// (Dropout draws its masks by element index, so with dropout the draws differ, not their law.)
// Returns the new T.
inline index_t trim_padding(Tensor<std::int32_t>& x, Tensor<std::int32_t>& y) {
  ATTN_CHECK(x.rank() == 2 && x.shape() == y.shape(), shape_error,
             "trim_padding: x and y must be [N, T] of the same shape, got ", x.shape(), " and ",
             y.shape());
  const index_t n = x.shape()[0], t = x.shape()[1];
  index_t keep = 1;
  for (index_t r = 0; r < n; ++r)
    for (index_t c = t - 1; c >= keep; --c)
      if (y[r * t + c] != pad_id) {
        keep = c + 1;
        break;
      }
  if (keep == t) return t;
  Tensor<std::int32_t> xs(Shape{n, keep}), ys(Shape{n, keep});  // [N, T']
  for (index_t r = 0; r < n; ++r)
    for (index_t c = 0; c < keep; ++c) {
      xs[r * keep + c] = x[r * t + c];
      ys[r * keep + c] = y[r * t + c];
    }
  x = std::move(xs);
  y = std::move(ys);
  return keep;
}

// How one span-corruption example cut its document (the counts are characters).
struct SpanCut {
  index_t truncated = 0;  // L: the document's first L characters are used
  index_t prefix = 0;     // p: characters before the masked span
  index_t masked = 0;     // m: the masked span is characters [p, p + m)
};

// The pretraining examples. For a document d (one non-empty line of the corpus) and block size B:
//   1. L = min(|d|, ℓ) with ℓ uniform on {4, …, ⌊7B/8⌋}: every truncation length is possible.
//   2. m = ⌊X + u⌋ with X uniform on [1, L/2 − 1] and u uniform on [0, 1) (stochastic rounding),
//      so E[m] = E[X] = L/4 exactly, 1 <= m < L/2, and m is sometimes more, sometimes less than
//      L/4. (For a document shorter than 4 characters X is uniform on [0, L/2]: still mean L/4.)
//   3. p uniform on {0, …, L − m}: prefix = d[0, p), masked = d[p, p + m), suffix = d[p + m, L).
//   4. s = prefix ⁇ suffix ⁇ masked, then □ up to B + 1 characters (L + 2 <= ⌊7B/8⌋ + 2 <= B + 1);
//      input x = s[0, B), target y = s[1, B + 1).
// The model learns to write out the span that the first ⁇ replaced after it sees the second ⁇.
class SpanCorruption {
 public:
  // Documents are the non-empty lines of `corpus` ('\n' separated), encoded with `tok` (normally
  // masked_vocabulary(corpus)); block >= 5, so that ⌊7B/8⌋ >= 4.
  SpanCorruption(const CharTokenizer& tok, std::string_view corpus, index_t block) : block_(block) {
    ATTN_CHECK(block >= 5, value_error, "SpanCorruption: the block size must be >= 5, got ", block);
    ATTN_CHECK(
        tok.size() > mask_id && tok.id_of(pad_char) == pad_id && tok.id_of(mask_char) == mask_id,
        value_error, "SpanCorruption: the vocabulary must start with PAD '", pad_char,
        "' and MASK '", mask_char, "' (use masked_vocabulary)");
    std::size_t begin = 0;
    while (begin <= corpus.size()) {
      std::size_t end = corpus.find('\n', begin);
      if (end == std::string_view::npos) end = corpus.size();
      if (end > begin) {
        std::vector<std::int32_t> ids = tok.encode(corpus.substr(begin, end - begin));
        for (std::int32_t id : ids)
          ATTN_CHECK(id != pad_id && id != mask_id, value_error, "SpanCorruption: document ",
                     documents_.size(), " contains the PAD or MASK character");
        documents_.push_back(std::move(ids));
      }
      begin = end + 1;
    }
    ATTN_CHECK(!documents_.empty(), value_error, "SpanCorruption: the corpus has no documents");
  }

  index_t size() const { return index_t(documents_.size()); }
  index_t block() const { return block_; }
  index_t max_truncation() const { return block_ * 7 / 8; }  // ⌊7B/8⌋
  std::span<const std::int32_t> document(index_t d) const {
    check_document(d, "document");
    return documents_[std::size_t(d)];
  }

  // The cut of document d for one example, from three or four draws of `rng` (steps 1–3 above).
  SpanCut draw_cut(index_t d, Rng& rng) const {
    check_document(d, "draw_cut");
    const index_t length = index_t(documents_[std::size_t(d)].size());
    SpanCut c;
    const index_t lo = 4, hi = max_truncation();
    c.truncated = std::min(length, lo + index_t(rng.uniform_int(std::uint64_t(hi - lo + 1))));
    const double L = double(c.truncated);
    const double x = c.truncated >= 4 ? rng.uniform(1.0, L / 2 - 1) : rng.uniform(0.0, L / 2);
    // X + u < L/2 (or L/2 + 1 for L < 4, where X + u <= L/2 + u floors to at most ⌊L/2⌋ <= L).
    c.masked = std::min(c.truncated, index_t(std::floor(x + rng.uniform())));
    c.prefix = index_t(rng.uniform_int(std::uint64_t(c.truncated - c.masked + 1)));
    return c;
  }

  // The B + 1 characters "prefix ⁇ suffix ⁇ masked □…" of document d cut by c (step 4).
  std::vector<std::int32_t> masked_string(index_t d, const SpanCut& c) const {
    const std::span<const std::int32_t> doc = document(d);
    ATTN_CHECK(c.truncated >= 0 && c.truncated <= index_t(doc.size()) && c.prefix >= 0 &&
                   c.masked >= 0 && c.prefix + c.masked <= c.truncated &&
                   c.truncated + 2 <= block_ + 1,
               value_error, "SpanCorruption::masked_string: cut (L ", c.truncated, ", p ", c.prefix,
               ", m ", c.masked, ") does not fit document ", d, " of ", doc.size(),
               " characters in block ", block_);
    const auto at = [&](index_t i) { return doc.begin() + i; };
    std::vector<std::int32_t> s;
    s.reserve(std::size_t(block_ + 1));
    s.insert(s.end(), at(0), at(c.prefix));                       // prefix
    s.push_back(mask_id);                                         // ⁇
    s.insert(s.end(), at(c.prefix + c.masked), at(c.truncated));  // suffix
    s.push_back(mask_id);                                         // ⁇
    s.insert(s.end(), at(c.prefix), at(c.prefix + c.masked));     // masked content
    s.resize(std::size_t(block_ + 1), pad_id);                    // □ …
    return s;
  }

  // One example of document d: x = s[0, B), y = s[1, B + 1) into spans of B ids each.
  SpanCut example(index_t d, Rng& rng, std::span<std::int32_t> x, std::span<std::int32_t> y) const {
    ATTN_CHECK(index_t(x.size()) == block_ && index_t(y.size()) == block_, shape_error,
               "SpanCorruption::example: x and y must hold ", block_, " ids, got ", x.size(),
               " and ", y.size());
    const SpanCut c = draw_cut(d, rng);
    const std::vector<std::int32_t> s = masked_string(d, c);
    std::copy(s.begin(), s.end() - 1, x.begin());
    std::copy(s.begin() + 1, s.end(), y.begin());
    return c;
  }

  // x, y [docs.size(), B]: row i is an example of document docs[i], drawn from its own
  // sub-generator rng.split(), so a row does not depend on how long the rows before it were.
  void batch(std::span<const index_t> docs, Rng& rng, Tensor<std::int32_t>& x,
             Tensor<std::int32_t>& y) const {
    ATTN_CHECK(!docs.empty(), value_error, "SpanCorruption::batch: no documents given");
    const index_t n = index_t(docs.size()), B = block_;
    x.resize(Shape{n, B});  // [N, B]
    y.resize(Shape{n, B});  // [N, B]
    for (index_t i = 0; i < n; ++i) {
      Rng row(rng.split());
      example(docs[std::size_t(i)], row, std::span(x.data() + i * B, std::size_t(B)),
              std::span(y.data() + i * B, std::size_t(B)));
    }
  }

 private:
  void check_document(index_t d, const char* who) const {
    ATTN_CHECK(d >= 0 && d < size(), value_error, "SpanCorruption::", who, ": document ", d,
               " outside [0, ", size(), ")");
  }

  index_t block_;
  std::vector<std::vector<std::int32_t>> documents_;
};

}  // namespace attn::data
