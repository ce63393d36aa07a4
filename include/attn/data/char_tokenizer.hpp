// attn/data/char_tokenizer.hpp: a character-level tokenizer: the vocabulary is the sorted set of
// Unicode code points of a corpus (UTF-8), id = rank in that set; saved with the model as a string.
// Does not normalise text or map unknown characters silently: encoding one is an error.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "../core/error.hpp"

namespace attn::data {

namespace detail {
// Decodes UTF-8 strictly (no overlong forms, no surrogates, <= U+10FFFF); throws value_error with
// the byte offset of the first invalid sequence.
inline std::vector<char32_t> decode_utf8(std::string_view s, std::string_view what) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  std::size_t i = 0;
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  while (i < s.size()) {
    const unsigned char b = byte(i);
    std::size_t n = 0;
    char32_t cp = 0, min = 0;
    if (b < 0x80) {
      n = 1, cp = b;
    } else if ((b & 0xE0) == 0xC0) {
      n = 2, cp = b & 0x1F, min = 0x80;
    } else if ((b & 0xF0) == 0xE0) {
      n = 3, cp = b & 0x0F, min = 0x800;
    } else if ((b & 0xF8) == 0xF0) {
      n = 4, cp = b & 0x07, min = 0x10000;
    }
    bool ok = n > 0 && i + n <= s.size();
    for (std::size_t k = 1; ok && k < n; ++k) {
      ok = (byte(i + k) & 0xC0) == 0x80;
      cp = (cp << 6) | (byte(i + k) & 0x3F);
    }
    ok = ok && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    ATTN_CHECK(ok, value_error, what, ": invalid UTF-8 at byte ", i);
    out.push_back(cp);
    i += n;
  }
  return out;
}

inline void append_utf8(std::string& s, char32_t cp) {
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
}
}  // namespace detail

class CharTokenizer {
 public:
  CharTokenizer() = default;

  // The vocabulary of `corpus`: each distinct code point once, in code point order.
  static CharTokenizer from_corpus(std::string_view corpus) {
    std::vector<char32_t> cps = detail::decode_utf8(corpus, "CharTokenizer::from_corpus");
    std::sort(cps.begin(), cps.end());
    cps.erase(std::unique(cps.begin(), cps.end()), cps.end());
    return CharTokenizer(std::move(cps));
  }

  // The inverse of vocabulary(): a string holding each character once, in id order.
  static CharTokenizer from_vocabulary(std::string_view vocab) {
    std::vector<char32_t> cps = detail::decode_utf8(vocab, "CharTokenizer::from_vocabulary");
    ATTN_CHECK(!cps.empty(), value_error, "CharTokenizer::from_vocabulary: empty vocabulary");
    std::vector<char32_t> sorted = cps;
    std::sort(sorted.begin(), sorted.end());
    ATTN_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), value_error,
               "CharTokenizer::from_vocabulary: a character appears twice");
    return CharTokenizer(std::move(cps));
  }

  std::int32_t size() const { return static_cast<std::int32_t>(chars_.size()); }
  std::string vocabulary() const { return decode_all(chars_); }

  std::vector<std::int32_t> encode(std::string_view text) const {
    const std::vector<char32_t> cps = detail::decode_utf8(text, "CharTokenizer::encode");
    std::vector<std::int32_t> ids;
    ids.reserve(cps.size());
    for (std::size_t i = 0; i < cps.size(); ++i) {
      const auto it = index_.find(cps[i]);
      if (it == index_.end()) {
        std::string c;
        detail::append_utf8(c, cps[i]);
        throw value_error("CharTokenizer::encode: character '" + c + "' (U+" + hex(cps[i]) +
                          ") at position " + std::to_string(i) + " is not in the vocabulary");
      }
      ids.push_back(it->second);
    }
    return ids;
  }

  std::string decode(std::span<const std::int32_t> ids) const {
    std::string s;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      ATTN_CHECK(ids[i] >= 0 && ids[i] < size(), value_error, "CharTokenizer::decode: id ", ids[i],
                 " at position ", i, " is outside the vocabulary of ", size());
      detail::append_utf8(s, chars_[static_cast<std::size_t>(ids[i])]);
    }
    return s;
  }

  // The id of one character given as UTF-8, or -1 when it is not in the vocabulary.
  std::int32_t id_of(std::string_view ch) const {
    const std::vector<char32_t> cps = detail::decode_utf8(ch, "CharTokenizer::id_of");
    if (cps.size() != 1) return -1;
    const auto it = index_.find(cps[0]);
    return it == index_.end() ? -1 : it->second;
  }

 private:
  explicit CharTokenizer(std::vector<char32_t> chars) : chars_(std::move(chars)) {
    for (std::size_t i = 0; i < chars_.size(); ++i)
      index_.emplace(chars_[i], static_cast<std::int32_t>(i));
  }

  static std::string decode_all(const std::vector<char32_t>& cps) {
    std::string s;
    for (char32_t cp : cps) detail::append_utf8(s, cp);
    return s;
  }

  static std::string hex(char32_t cp) {
    static constexpr char digits[] = "0123456789ABCDEF";
    std::string h;
    for (int shift = 20; shift >= 0; shift -= 4)
      if (const auto d = (cp >> shift) & 0xF; d != 0 || !h.empty() || shift < 16) h += digits[d];
    return h;
  }

  std::vector<char32_t> chars_;
  std::unordered_map<char32_t, std::int32_t> index_;
};

}  // namespace attn::data
