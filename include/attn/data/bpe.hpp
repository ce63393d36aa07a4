// attn/data/bpe.hpp: byte-level BPE as GPT-2 defines it: the pre-tokenization expression, the
// byte-to-unicode mapping, encoding and decoding with a merge list, and training a merge list.
// Does not read or write files (attn/io/bpe_files.hpp does), normalise text, or add tokens around
// a sequence (no BOS/EOS template); included on request, not by data.hpp.
//
// The pipeline (GPT-2's encoder.py; Hugging Face tokenizers' ByteLevel pre-tokenizer + BPE model):
//   1. split the text into pieces with GPT-2's expression (gpt2_split below);
//   2. write each byte of a piece as one printable code point (byte_to_unicode: ' ' is 'Ġ');
//   3. start from one token per byte and apply the merges, always the adjacent pair of lowest rank
//      first (leftmost on a tie), until no adjacent pair has a merge.
// Decoding concatenates the tokens' bytes, so decode(encode(x)) == x for every byte string x.
//
// Text that is not UTF-8: each byte that does not begin a well-formed UTF-8 sequence (Unicode
// 16.0, Table 3-7: no overlong forms, no surrogates, nothing above U+10FFFF, no truncated
// sequence) is one character of class "other" for the expression, as U+FFFD (a symbol) would be,
// and its byte is encoded as itself. Hugging Face tokenizers never sees such text (Rust strings
// are UTF-8); on text whose invalid bytes are replaced by U+FFFD it splits at the same places.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "char_tokenizer.hpp"
#include "unicode_classes.hpp"

namespace attn::data {

// ---------------------------------------------------------------------------------------------
// Bytes as printable code points (bytes_to_unicode of GPT-2's encoder.py).
// The 188 bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves (as code points); the
// other 68 (controls, space, 0x7F..0xA0, 0xAD) become U+0100, U+0101, ... in byte order, so ' ' is
// U+0120 'Ġ' and '\n' is U+010A 'Ċ'. Every token of a byte-level vocabulary is spelled this way.

namespace detail {
constexpr bool byte_stands_for_itself(unsigned b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}
constexpr std::array<char32_t, 256> make_byte_to_unicode() {
  std::array<char32_t, 256> m{};
  char32_t next = 0x100;
  for (unsigned b = 0; b < 256; ++b) m[b] = byte_stands_for_itself(b) ? char32_t(b) : next++;
  return m;
}
}  // namespace detail

inline constexpr std::array<char32_t, 256> byte_to_unicode = detail::make_byte_to_unicode();

namespace detail {
// The bytes that U+0100, U+0101, ... stand for.
constexpr std::array<std::uint8_t, 68> make_shifted_bytes() {
  std::array<std::uint8_t, 68> m{};
  std::size_t n = 0;
  for (unsigned b = 0; b < 256; ++b)
    if (!byte_stands_for_itself(b)) m[n++] = std::uint8_t(b);
  return m;
}
inline constexpr std::array<std::uint8_t, 68> shifted_bytes = make_shifted_bytes();
}  // namespace detail

// The byte that code point `cp` stands for, or -1 when it stands for none.
constexpr int unicode_to_byte(char32_t cp) {
  if (cp < 0x100) return detail::byte_stands_for_itself(cp) ? int(cp) : -1;
  return cp < 0x100 + 68 ? int(detail::shifted_bytes[cp - 0x100]) : -1;
}

// The byte-level spelling of raw bytes: byte_to_unicode of each byte, as UTF-8.
inline std::string to_byte_level(std::string_view bytes) {
  std::string s;
  s.reserve(bytes.size() * 2);
  for (char c : bytes) detail::append_utf8(s, byte_to_unicode[std::uint8_t(c)]);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Characters and their classes.

enum class CharClass : std::uint8_t { other = 0, letter = 1, number = 2, space = 3 };

// The class of a code point for GPT-2's expression (unicode_classes.hpp: Unicode 16.0, the tables
// of the Oniguruma that Hugging Face tokenizers runs): \p{L} letter, \p{N} number, \s space.
constexpr CharClass char_class(char32_t cp) {
  if (cp >= unicode::table_limit) return CharClass::other;
  const unsigned block = unicode::stage1[cp >> unicode::block_bits];
  const unsigned in_block = cp & ((1u << unicode::block_bits) - 1);
  const unsigned byte = unicode::stage2[(block << (unicode::block_bits - 2)) + (in_block >> 2)];
  return CharClass((byte >> (2 * (in_block & 3))) & 3);
}

namespace detail {

struct Utf8Char {
  std::uint32_t length;  // bytes
  CharClass cls;
};

inline constexpr std::array<CharClass, 128> ascii_classes = [] {
  std::array<CharClass, 128> a{};
  for (unsigned c = 0; c < 128; ++c) a[c] = char_class(c);
  return a;
}();

// The character that starts at s[i]: a well-formed UTF-8 sequence, or the single byte s[i] (of
// class other) when none starts there.
inline Utf8Char char_at(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned b = byte(i);
  if (b < 0x80) return {1, ascii_classes[b]};
  std::uint32_t n = 0;
  char32_t cp = 0, lo = 0;
  if (b >= 0xC2 && b <= 0xDF) {
    n = 2, cp = b & 0x1F, lo = 0x80;
  } else if (b >= 0xE0 && b <= 0xEF) {
    n = 3, cp = b & 0x0F, lo = 0x800;
  } else if (b >= 0xF0 && b <= 0xF4) {
    n = 4, cp = b & 0x07, lo = 0x10000;
  } else {
    return {1, CharClass::other};
  }
  if (i + n > s.size()) return {1, CharClass::other};
  for (std::uint32_t k = 1; k < n; ++k) {
    const unsigned c = byte(i + k);
    if ((c & 0xC0) != 0x80) return {1, CharClass::other};
    cp = (cp << 6) | (c & 0x3F);
  }
  if (cp < lo || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {1, CharClass::other};
  return {n, char_class(cp)};
}

// The end of the run of characters of class `cls` that starts at s[i].
inline std::size_t run_end(std::string_view s, std::size_t i, CharClass cls) {
  while (i < s.size()) {
    const Utf8Char c = char_at(s, i);
    if (c.cls != cls) break;
    i += c.length;
  }
  return i;
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Pre-tokenization: GPT-2's expression, written out as a scanner over characters.
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// Calls on_piece(std::string_view) for each match, left to right; the pieces cover `text` exactly.
// At each position the first alternative that matches wins (ordered alternation):
//   - an apostrophe followed by s t m d, or re ve ll (lower case only: "'S" is "'" then "S");
//   - an optional U+0020 then a run of one class: letters, numbers, or other (neither space,
//     letter nor number: punctuation, symbols, marks, controls, invalid bytes);
//   - a run of whitespace: when a non-space character follows it, all of it but its last
//     character (\s+(?!\S) backs off one character), so that " word" keeps its space; a run of
//     one followed by a non-space (say "\n" before a letter) is \s+ itself; at the end of the
//     text, the whole run.
template <class OnPiece>
void gpt2_split(std::string_view text, OnPiece&& on_piece) {
  using detail::char_at;
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    std::size_t end = 0;
    if (text[i] == '\'' && i + 1 < n) {
      const char a = text[i + 1], b = i + 2 < n ? text[i + 2] : '\0';
      if (a == 's' || a == 't' || a == 'm' || a == 'd')
        end = i + 2;
      else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        end = i + 3;
    }
    if (end == 0) {
      const detail::Utf8Char c = char_at(text, i);
      if (text[i] == ' ' && i + 1 < n) {
        // " ?X+": the space joins a following run of letters, numbers or others.
        const detail::Utf8Char d = char_at(text, i + 1);
        if (d.cls != CharClass::space) end = detail::run_end(text, i + 1, d.cls);
      }
      if (end == 0 && c.cls != CharClass::space) end = detail::run_end(text, i, c.cls);
      if (end == 0) {
        // \s+(?!\S) | \s+
        std::size_t last = i;  // where the run's last character starts
        end = i;
        while (end < n) {
          const detail::Utf8Char d = char_at(text, end);
          if (d.cls != CharClass::space) break;
          last = end;
          end += d.length;
        }
        if (end < n && last > i) end = last;
      }
    }
    on_piece(text.substr(i, end - i));
    i = end;
  }
}

// The pieces of gpt2_split, as views into `text`.
inline std::vector<std::string_view> gpt2_pieces(std::string_view text) {
  std::vector<std::string_view> pieces;
  gpt2_split(text, [&](std::string_view p) { pieces.push_back(p); });
  return pieces;
}

// ---------------------------------------------------------------------------------------------
// The tokenizer.

// The settings of Hugging Face's ByteLevel pre-tokenizer and BPE model that attn follows.
struct BpeOptions {
  // ByteLevel.add_prefix_space: a ' ' is put before a text (each stretch between added tokens)
  // that is not empty and does not start with one, so its first word is tokenized like the
  // others. GPT-2: false.
  bool add_prefix_space = false;
  // ByteLevel.use_regex: false takes the whole text as one piece.
  bool use_regex = true;
  // BPE.ignore_merges: a piece that is itself a token becomes that token without merging.
  bool ignore_merges = false;
};

// A token matched in the raw text before pre-tokenization (GPT-2's "<|endoftext|>"), as in
// tokenizer.json's added_tokens with single_word, lstrip and rstrip false.
struct AddedToken {
  std::string content;  // the text it matches, and what it decodes to
  std::int32_t id = 0;
  bool special = true;
};

class BpeTokenizer {
 public:
  BpeTokenizer() = default;

  // tokens[id]: each token spelled in the byte-level alphabet (the keys of vocab.json); merges:
  // pairs of tokens in rank order, each pair's concatenation a token too. added: tokens matched in
  // the raw text, with ids in the vocabulary (decoded as their content) or following it without
  // gaps. Throws value_error for an empty or repeated token, a merge whose parts or result are not
  // tokens, an added token with a bad id or empty content. A pair merged twice keeps its later
  // rank (as Hugging Face does).
  BpeTokenizer(std::vector<std::string> tokens,
               const std::vector<std::pair<std::string, std::string>>& merges,
               BpeOptions options = {}, std::vector<AddedToken> added = {})
      : tokens_(std::move(tokens)), options_(options), added_(std::move(added)) {
    const std::size_t model_size = tokens_.size();
    ATTN_CHECK(model_size < std::size_t(std::numeric_limits<std::int32_t>::max()), value_error,
               "BpeTokenizer: too many tokens (", model_size, ")");
    index_.reserve(model_size);
    for (std::size_t id = 0; id < model_size; ++id) {
      ATTN_CHECK(!tokens_[id].empty(), value_error, "BpeTokenizer: token ", id, " is empty");
      const auto [it, fresh] = index_.emplace(tokens_[id], std::int32_t(id));
      ATTN_CHECK(fresh, value_error, "BpeTokenizer: token '", tokens_[id], "' has two ids, ",
                 it->second, " and ", id);
    }
    bytes_.resize(model_size);
    for (std::size_t id = 0; id < model_size; ++id) bytes_[id] = bytes_of_token(tokens_[id]);
    byte_ids_.fill(-1);
    for (unsigned b = 0; b < 256; ++b) {
      std::string symbol;
      detail::append_utf8(symbol, byte_to_unicode[b]);
      if (const auto it = index_.find(symbol); it != index_.end()) byte_ids_[b] = it->second;
    }
    // Added tokens: an id inside the vocabulary, or the next ones after it.
    std::vector<bool> taken;
    for (const AddedToken& a : added_) {
      ATTN_CHECK(!a.content.empty(), value_error, "BpeTokenizer: added token ", a.id,
                 " has empty content");
      ATTN_CHECK(a.id >= 0, value_error, "BpeTokenizer: added token '", a.content,
                 "' has a negative id ", a.id);
      if (std::size_t(a.id) < model_size) continue;
      const std::size_t k = std::size_t(a.id) - model_size;
      ATTN_CHECK(k < added_.size(), value_error, "BpeTokenizer: added token '", a.content,
                 "' has id ", a.id, ", which leaves a gap after the vocabulary of ", model_size);
      if (taken.size() <= k) taken.resize(k + 1, false);
      ATTN_CHECK(!taken[k], value_error, "BpeTokenizer: two added tokens have id ", a.id);
      taken[k] = true;
    }
    const std::size_t extra = std::size_t(std::count(taken.begin(), taken.end(), true));
    ATTN_CHECK(extra == taken.size(), value_error,
               "BpeTokenizer: the ids of the added tokens after the vocabulary have a gap");
    tokens_.resize(model_size + extra);
    bytes_.resize(model_size + extra);
    for (const AddedToken& a : added_) {
      bytes_[std::size_t(a.id)] = a.content;
      if (std::size_t(a.id) >= model_size) tokens_[std::size_t(a.id)] = a.content;
    }
    // Merges: rank = position in the list.
    merges_.reserve(merges.size());
    ranks_.reserve(merges.size());
    for (std::size_t r = 0; r < merges.size(); ++r) {
      const auto& [a, b] = merges[r];
      const std::string problem = merge_problem(a, b);
      ATTN_CHECK(problem.empty(), value_error, "BpeTokenizer: merge ", r, ": ", problem);
      const std::int32_t left = index_.at(a), right = index_.at(b), result = index_.at(a + b);
      merges_.push_back({left, right});
      ranks_.set(left, right, std::int32_t(r), result);
    }
  }

  // Why the pair (a, b) cannot be a merge of this vocabulary, or "" when it can.
  std::string merge_problem(const std::string& a, const std::string& b) const {
    for (const std::string* part : {&a, &b})
      if (!index_.contains(*part))
        return "'" + *part + "' of the merge '" + a + " " + b + "' is not in the vocabulary";
    if (!index_.contains(a + b))
      return "the merge '" + a + " " + b + "' makes '" + a + b +
             "', which is not in the vocabulary";
    return {};
  }

  // The number of ids (vocabulary and added tokens after it).
  std::int32_t size() const { return std::int32_t(tokens_.size()); }
  // The size of the BPE model's vocabulary alone (ids below it are vocab.json's).
  std::int32_t vocabulary_size() const { return std::int32_t(index_.size()); }
  // A token spelled in the byte-level alphabet (an added token after the vocabulary: its content).
  const std::string& token(std::int32_t id) const { return tokens_.at(check_id(id, "token")); }
  // The bytes a token decodes to.
  const std::string& token_bytes(std::int32_t id) const {
    return bytes_.at(check_id(id, "token_bytes"));
  }
  // The id of a vocabulary token given in the byte-level alphabet, or -1.
  std::int32_t id_of(std::string_view token) const {
    const auto it = index_.find(std::string(token));
    return it == index_.end() ? -1 : it->second;
  }
  // The merges in rank order, as (left, right) ids; the result is id_of(token(l) + token(r)).
  const std::vector<std::pair<std::int32_t, std::int32_t>>& merges() const { return merges_; }
  const BpeOptions& options() const { return options_; }
  const std::vector<AddedToken>& added_tokens() const { return added_; }

  // The ids of `text`: added tokens are split out of the raw text first (leftmost, the longest
  // at one position), the stretches between them go through the pre-tokenizer and the merges.
  // Throws value_error when a byte of the text has no token (a vocabulary without all 256 bytes).
  std::vector<std::int32_t> encode(std::string_view text) const {
    std::vector<std::int32_t> ids;
    ids.reserve(text.size() / 3 + 1);
    if (added_.empty()) {
      encode_ordinary(text, ids);
      return ids;
    }
    // next[k]: where added token k next occurs at or after `pos` (npos: never).
    std::vector<std::size_t> next(added_.size());
    for (std::size_t k = 0; k < added_.size(); ++k) next[k] = text.find(added_[k].content);
    std::size_t pos = 0;
    for (;;) {
      std::size_t best = std::string_view::npos, best_len = 0;
      std::int32_t best_id = -1;
      for (std::size_t k = 0; k < added_.size(); ++k) {
        if (next[k] != std::string_view::npos && next[k] < pos)
          next[k] = text.find(added_[k].content, pos);
        const std::size_t len = added_[k].content.size();
        if (next[k] < best ||
            (next[k] == best && next[k] != std::string_view::npos && len > best_len)) {
          best = next[k], best_len = len, best_id = added_[k].id;
        }
      }
      if (best == std::string_view::npos) break;
      if (best > pos) encode_ordinary(text.substr(pos, best - pos), ids);
      ids.push_back(best_id);
      pos = best + best_len;
    }
    if (pos < text.size()) encode_ordinary(text.substr(pos), ids);
    return ids;
  }

  // The ids of `text` with no added-token matching: all of it through the pre-tokenizer.
  std::vector<std::int32_t> encode_ordinary(std::string_view text) const {
    std::vector<std::int32_t> ids;
    ids.reserve(text.size() / 3 + 1);
    encode_ordinary(text, ids);
    return ids;
  }

  // Appends the ids of `text` (no added tokens) to `ids`.
  void encode_ordinary(std::string_view text, std::vector<std::int32_t>& ids) const {
    if (options_.add_prefix_space && !text.empty() && text[0] != ' ') {
      encode_ordinary_unprefixed(" " + std::string(text), ids);
      return;
    }
    encode_ordinary_unprefixed(text, ids);
  }

  // Appends the ids of one piece of the pre-tokenizer's output: its bytes' tokens, merged.
  void encode_piece(std::string_view piece, std::vector<std::int32_t>& ids) const {
    if (piece.empty()) return;
    if (options_.ignore_merges) {
      if (const auto it = index_.find(to_byte_level(piece)); it != index_.end()) {
        ids.push_back(it->second);
        return;
      }
    }
    const std::size_t begin = ids.size();
    push_bytes(piece, ids);
    const std::size_t n = merge_symbols(std::span<std::int32_t>(ids.data() + begin, piece.size()));
    ids.resize(begin + n);
  }

  // The definition that encode_piece computes faster (the tests' oracle): while some adjacent
  // pair has a merge, merge the pair of lowest rank, the leftmost of equal ones.
  std::vector<std::int32_t> encode_piece_reference(std::string_view piece) const {
    std::vector<std::int32_t> s;
    push_bytes(piece, s);
    for (;;) {
      std::size_t at = s.size();
      std::int32_t best = no_rank;
      for (std::size_t i = 0; i + 1 < s.size(); ++i)
        if (const Merge m = ranks_.find(s[i], s[i + 1]); m.rank < best) best = m.rank, at = i;
      if (at == s.size()) return s;
      s[at] = ranks_.find(s[at], s[at + 1]).result;
      s.erase(s.begin() + std::ptrdiff_t(at) + 1);
    }
  }

  // The bytes of `ids`: the concatenation of their tokens' bytes (an added token's: its content).
  // Unlike Hugging Face's decode, keeps special tokens and does not replace bytes that are not
  // UTF-8 by U+FFFD: decode(encode(x)) == x for every byte string x.
  std::string decode(std::span<const std::int32_t> ids) const {
    std::string s;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      ATTN_CHECK(ids[i] >= 0 && ids[i] < size(), value_error, "BpeTokenizer::decode: id ", ids[i],
                 " at position ", i, " is outside the vocabulary of ", size());
      s += bytes_[std::size_t(ids[i])];
    }
    return s;
  }

 private:
  static constexpr std::int32_t no_rank = std::numeric_limits<std::int32_t>::max();

  struct Merge {
    std::int32_t rank = no_rank;
    std::int32_t result = -1;
  };

  // (left, right) -> (rank, result): an open-addressing hash table (linear probing), the inner
  // loop of encoding; std::unordered_map costs about twice as much per lookup here.
  class MergeTable {
   public:
    void reserve(std::size_t count) {
      std::size_t cap = 16;
      while (cap < 2 * count) cap *= 2;
      slots_.assign(cap, Slot{});
      shift_ = 64;
      for (std::size_t c = cap; c > 1; c /= 2) --shift_;
    }
    void set(std::int32_t left, std::int32_t right, std::int32_t rank, std::int32_t result) {
      const std::uint64_t key = key_of(left, right);
      for (std::size_t i = slot_of(key);; i = (i + 1) & (slots_.size() - 1)) {
        if (slots_[i].key == key || slots_[i].key == empty) {
          slots_[i] = {key, {rank, result}};
          return;
        }
      }
    }
    Merge find(std::int32_t left, std::int32_t right) const {
      if (slots_.empty()) return {};
      const std::uint64_t key = key_of(left, right);
      for (std::size_t i = slot_of(key);; i = (i + 1) & (slots_.size() - 1)) {
        if (slots_[i].key == key) return slots_[i].merge;
        if (slots_[i].key == empty) return {};
      }
    }

   private:
    static constexpr std::uint64_t empty = ~std::uint64_t{0};
    struct Slot {
      std::uint64_t key = empty;
      Merge merge;
    };
    static std::uint64_t key_of(std::int32_t l, std::int32_t r) {
      return (std::uint64_t(std::uint32_t(l)) << 32) | std::uint32_t(r);
    }
    std::size_t slot_of(std::uint64_t key) const {
      return std::size_t((key * 0x9E3779B97F4A7C15ull) >> shift_);
    }
    std::vector<Slot> slots_;
    int shift_ = 64;
  };

  std::size_t check_id(std::int32_t id, const char* what) const {
    ATTN_CHECK(id >= 0 && id < size(), value_error, "BpeTokenizer::", what, ": id ", id,
               " is outside the vocabulary of ", size());
    return std::size_t(id);
  }

  // The bytes a byte-level token stands for. A token with a code point outside the byte-level
  // alphabet decodes to its own UTF-8 (Hugging Face's ByteLevel decoder does the same).
  static std::string bytes_of_token(const std::string& token) {
    std::string out;
    std::size_t i = 0;
    while (i < token.size()) {
      const unsigned char b0 = static_cast<unsigned char>(token[i]);
      char32_t cp = 0;
      std::size_t len = 1;
      if (b0 < 0x80) {
        cp = b0;
      } else if ((b0 & 0xE0) == 0xC0 && i + 1 < token.size() &&
                 (static_cast<unsigned char>(token[i + 1]) & 0xC0) == 0x80) {
        cp = (char32_t(b0 & 0x1F) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3F);
        len = 2;
      } else {
        return token;  // three- or four-byte characters are never byte-level symbols
      }
      const int b = unicode_to_byte(cp);
      if (b < 0) return token;
      out += char(b);
      i += len;
    }
    return out;
  }

  void push_bytes(std::string_view piece, std::vector<std::int32_t>& ids) const {
    for (char c : piece) {
      const std::int32_t id = byte_ids_[std::uint8_t(c)];
      if (id < 0) {
        static constexpr char hex[] = "0123456789ABCDEF";
        const auto b = std::uint8_t(c);
        throw value_error(std::string("BpeTokenizer::encode: the byte 0x") + hex[b >> 4] +
                          hex[b & 15] + " has no token in the vocabulary");
      }
      ids.push_back(id);
    }
  }

  void encode_ordinary_unprefixed(std::string_view text, std::vector<std::int32_t>& ids) const {
    if (!options_.use_regex) {
      encode_piece(text, ids);
      return;
    }
    if (text.size() < cache_from) {
      gpt2_split(text, [&](std::string_view piece) { encode_piece(piece, ids); });
      return;
    }
    // Words repeat: a piece seen before in this text copies the ids it got then (where they
    // start in `ids`, and how many), instead of merging again. The table lives for this call
    // only (encode stays const and thread-safe) and is emptied when it grows past cache_limit.
    std::unordered_map<std::string_view, std::pair<std::size_t, std::size_t>> seen;
    gpt2_split(text, [&](std::string_view piece) {
      if (piece.size() > cache_piece) {
        encode_piece(piece, ids);
        return;
      }
      if (const auto it = seen.find(piece); it != seen.end()) {
        const auto [from, count] = it->second;
        for (std::size_t k = 0; k < count; ++k) {
          const std::int32_t id = ids[from + k];  // a copy: push_back may move ids
          ids.push_back(id);
        }
        return;
      }
      const std::size_t from = ids.size();
      encode_piece(piece, ids);
      if (seen.size() >= cache_limit) seen.clear();
      seen.emplace(piece, std::pair{from, ids.size() - from});
    });
  }

  // The piece cache of encode_ordinary_unprefixed: texts of cache_from bytes or more, pieces of
  // cache_piece bytes or fewer, at most cache_limit pieces.
  static constexpr std::size_t cache_from = 4096, cache_piece = 32, cache_limit = 1 << 16;

  // Merges `s` in place as encode_piece_reference does; returns the new length. Up to
  // small_piece symbols: the ranks of adjacent pairs in an array, each step a linear scan for the
  // minimum and two lookups. Longer pieces (long runs of spaces, digits or punctuation): a heap of
  // (rank, position) over a linked list, O(n log n), as Hugging Face's Word::merge_all.
  std::size_t merge_symbols(std::span<std::int32_t> s) const {
    static constexpr std::size_t small_piece = 64;
    std::size_t n = s.size();
    if (n < 2) return n;
    if (n > small_piece) return merge_symbols_heap(s);
    std::array<Merge, small_piece> pair{};  // pair[i]: the merge of (s[i], s[i + 1])
    for (std::size_t i = 0; i + 1 < n; ++i) pair[i] = ranks_.find(s[i], s[i + 1]);
    for (;;) {
      std::size_t at = n;
      std::int32_t best = no_rank;
      for (std::size_t i = 0; i + 1 < n; ++i)
        if (pair[i].rank < best) best = pair[i].rank, at = i;
      if (at == n) return n;
      s[at] = pair[at].result;
      std::copy(s.begin() + std::ptrdiff_t(at) + 2, s.begin() + std::ptrdiff_t(n),
                s.begin() + std::ptrdiff_t(at) + 1);
      std::copy(pair.begin() + std::ptrdiff_t(at) + 1, pair.begin() + std::ptrdiff_t(n) - 1,
                pair.begin() + std::ptrdiff_t(at));
      --n;
      if (at > 0) pair[at - 1] = ranks_.find(s[at - 1], s[at]);
      if (at + 1 < n) pair[at] = ranks_.find(s[at], s[at + 1]);
    }
  }

  std::size_t merge_symbols_heap(std::span<std::int32_t> s) const {
    const std::size_t n = s.size();
    constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
    std::vector<std::size_t> next(n), prev(n);
    std::vector<bool> gone(n, false);
    for (std::size_t i = 0; i < n; ++i) {
      next[i] = i + 1 < n ? i + 1 : none;
      prev[i] = i > 0 ? i - 1 : none;
    }
    using Entry = std::pair<std::int32_t, std::size_t>;  // (rank, left position): smallest first
    std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
    for (std::size_t i = 0; i + 1 < n; ++i)
      if (const Merge m = ranks_.find(s[i], s[i + 1]); m.rank != no_rank) heap.push({m.rank, i});
    while (!heap.empty()) {
      const auto [rank, at] = heap.top();
      heap.pop();
      if (gone[at] || next[at] == none) continue;
      const std::size_t right = next[at];
      const Merge m = ranks_.find(s[at], s[right]);
      if (m.rank != rank) continue;  // an entry for a pair that has changed since
      s[at] = m.result;
      gone[right] = true;
      next[at] = next[right];
      if (next[at] != none) prev[next[at]] = at;
      if (prev[at] != none)
        if (const Merge p = ranks_.find(s[prev[at]], s[at]); p.rank != no_rank)
          heap.push({p.rank, prev[at]});
      if (next[at] != none)
        if (const Merge q = ranks_.find(s[at], s[next[at]]); q.rank != no_rank)
          heap.push({q.rank, at});
    }
    std::size_t out = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (!gone[i]) s[out++] = s[i];
    return out;
  }

  std::vector<std::string> tokens_;  // id -> byte-level spelling
  std::vector<std::string> bytes_;   // id -> the bytes it decodes to
  std::unordered_map<std::string, std::int32_t> index_;
  std::array<std::int32_t, 256> byte_ids_{};  // byte -> its token, -1 when missing
  std::vector<std::pair<std::int32_t, std::int32_t>> merges_;
  MergeTable ranks_;
  BpeOptions options_;
  std::vector<AddedToken> added_;
};

// ---------------------------------------------------------------------------------------------
// Training (Hugging Face tokenizers' BpeTrainer with the ByteLevel pre-tokenizer, the 256 byte
// symbols as initial alphabet, no special tokens, min_frequency 0, no prefix or suffix).
//
// The words are the pieces of gpt2_split over each text, with their counts. Ids 0..255 are the
// byte symbols in code point order (ByteLevel's alphabet sorted, as BpeTrainer sorts it; GPT-2's
// first 256 tokens are in the same order); each merge's result gets the next id, unless that
// string is a token already (two merges can spell the same token: ("a", "bc") after ("ab",
// "c")). Each step merges the pair of adjacent tokens with the largest count over all words,
// counted with the words' multiplicities; among equal counts the pair (left id, right id) that is
// smallest. The merge is applied in every word that holds the pair, left to right, an occurrence
// at a time. Training stops when the vocabulary has vocab_size tokens or no pair is left.
//
// Followed from BpeTrainer::do_train, including what it does in the rare steps that re-create an
// existing token: the count of a pair is not lowered when the pair itself is merged, so a pair
// that is formed again later (with a re-created token) counts its old occurrences too, and the
// list may then hold the same merge twice; a pair's queue entry merges only the words that held
// it when the entry was queued. Not followed: when two queue entries of the same pair have the
// same count, which one Hugging Face's heap (dary_heap's d-ary heap) takes first.

namespace detail {

// One word of the training corpus and how many times it occurs.
struct TrainingWord {
  std::vector<std::int32_t> symbols;
  std::int64_t count = 0;
};

inline std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (std::uint64_t(std::uint32_t(a)) << 32) | std::uint32_t(b);
}

// BpeTrainer's queue entry: a pair, its count when queued, the words that held it then.
struct PairEntry {
  std::int64_t count = 0;
  std::uint64_t pair = 0;
  std::vector<std::uint32_t> words;
};

// Heap order: the largest count first, then the smallest pair.
inline bool pair_entry_below(const PairEntry& a, const PairEntry& b) {
  return a.count != b.count ? a.count < b.count : a.pair > b.pair;
}

// Merges (a, b) -> merged in `word` left to right (BpeTrainer's Word::merge), reporting each
// pair that loses or gains an occurrence: change(pair, -1 or +1).
template <class Change>
void merge_training_word(std::vector<std::int32_t>& s, std::int32_t a, std::int32_t b,
                         std::int32_t merged, Change&& change) {
  std::size_t out = 0;  // s[0, out) is done
  std::size_t i = 0;
  while (i < s.size()) {
    if (s[i] == a && i + 1 < s.size() && s[i + 1] == b) {
      if (out > 0) {
        change(pair_key(s[out - 1], a), -1);
        change(pair_key(s[out - 1], merged), +1);
      }
      if (i + 2 < s.size()) {
        change(pair_key(b, s[i + 2]), -1);
        change(pair_key(merged, s[i + 2]), +1);
      }
      s[out++] = merged;
      i += 2;
    } else {
      s[out++] = s[i++];
    }
  }
  s.resize(out);
}

}  // namespace detail

// A byte-level BPE tokenizer of vocab_size tokens (at least 256) trained on `texts`, each text
// pre-tokenized on its own (like a sequence given to BpeTrainer).
inline BpeTokenizer train_bpe(std::span<const std::string_view> texts, std::int32_t vocab_size) {
  ATTN_CHECK(vocab_size >= 256, value_error, "train_bpe: vocab_size is ", vocab_size,
             ", below the 256 byte tokens it starts from");
  // The alphabet: byte b's token is the rank of byte_to_unicode[b] among the 256.
  std::vector<std::string> tokens;
  std::array<std::int32_t, 256> byte_id{};
  {
    std::array<unsigned, 256> order{};
    for (unsigned b = 0; b < 256; ++b) order[b] = b;
    std::sort(order.begin(), order.end(),
              [](unsigned x, unsigned y) { return byte_to_unicode[x] < byte_to_unicode[y]; });
    for (unsigned r = 0; r < 256; ++r) {
      byte_id[order[r]] = std::int32_t(r);
      std::string symbol;
      detail::append_utf8(symbol, byte_to_unicode[order[r]]);
      tokens.push_back(std::move(symbol));
    }
  }
  std::unordered_map<std::string, std::int32_t> index;
  for (std::size_t id = 0; id < tokens.size(); ++id) index.emplace(tokens[id], std::int32_t(id));

  // Words and their counts.
  std::vector<detail::TrainingWord> words;
  {
    std::unordered_map<std::string_view, std::int64_t> counts;
    for (std::string_view text : texts) gpt2_split(text, [&](std::string_view p) { ++counts[p]; });
    words.reserve(counts.size());
    for (const auto& [piece, count] : counts) {
      detail::TrainingWord w;
      w.count = count;
      for (char c : piece) w.symbols.push_back(byte_id[std::uint8_t(c)]);
      words.push_back(std::move(w));
    }
  }

  // Pair counts and the words that hold each pair.
  std::unordered_map<std::uint64_t, std::int64_t> pair_counts;
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> where;
  for (std::size_t w = 0; w < words.size(); ++w) {
    const auto& s = words[w].symbols;
    for (std::size_t i = 0; i + 1 < s.size(); ++i) {
      const std::uint64_t key = detail::pair_key(s[i], s[i + 1]);
      pair_counts[key] += words[w].count;
      auto& list = where[key];
      if (list.empty() || list.back() != std::uint32_t(w)) list.push_back(std::uint32_t(w));
    }
  }
  std::vector<detail::PairEntry> heap;
  const auto queue_new_pairs = [&] {
    for (auto& [key, list] : where) {
      const std::int64_t count = pair_counts[key];
      if (count <= 0) continue;
      std::sort(list.begin(), list.end());
      list.erase(std::unique(list.begin(), list.end()), list.end());
      heap.push_back({count, key, std::move(list)});
      std::push_heap(heap.begin(), heap.end(), detail::pair_entry_below);
    }
    where.clear();
  };
  queue_new_pairs();

  std::vector<std::pair<std::string, std::string>> merges;
  while (std::int64_t(tokens.size()) < vocab_size && !heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), detail::pair_entry_below);
    detail::PairEntry top = std::move(heap.back());
    heap.pop_back();
    const std::int64_t now = pair_counts[top.pair];
    if (top.count != now) {  // counts only fall while queued: requeue at the current count
      top.count = now;
      heap.push_back(std::move(top));
      std::push_heap(heap.begin(), heap.end(), detail::pair_entry_below);
      continue;
    }
    if (top.count < 1) break;
    const auto a = std::int32_t(top.pair >> 32), b = std::int32_t(top.pair & 0xFFFFFFFFu);
    std::string merged_token = tokens[std::size_t(a)] + tokens[std::size_t(b)];
    std::int32_t merged = std::int32_t(tokens.size());
    if (const auto [it, fresh] = index.emplace(merged_token, merged); fresh)
      tokens.push_back(merged_token);
    else
      merged = it->second;
    merges.emplace_back(tokens[std::size_t(a)], tokens[std::size_t(b)]);
    for (const std::uint32_t w : top.words) {
      const std::int64_t count = words[w].count;
      detail::merge_training_word(words[w].symbols, a, b, merged,
                                  [&](std::uint64_t key, int change) {
                                    pair_counts[key] += change * count;
                                    if (change > 0) where[key].push_back(w);
                                  });
    }
    queue_new_pairs();
  }
  return BpeTokenizer(std::move(tokens), merges);
}

inline BpeTokenizer train_bpe(std::string_view text, std::int32_t vocab_size) {
  return train_bpe(std::span<const std::string_view>(&text, 1), vocab_size);
}

}  // namespace attn::data
