// examples/seq2seq/dates.hpp: the toy translation task, generated in code: a date written the
// way people write it ("the twenty-third of september 1987", "thu, mar 5, 1987", "05.03.1987")
// translated to ISO 8601 ("1987-09-23"), with character vocabularies and padded batches.
// Does not read files; train and test dates are disjoint by a fixed rule (one date in ten is
// held out), so test accuracy measures generalisation to unseen dates, not memorisation.
#pragma once

#include <attn/core/error.hpp>
#include <attn/core/rng.hpp>
#include <attn/core/tensor.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dates {

using attn::index_t;

struct Date {
  int year, month, day;  // 1900..2099, 1..12, 1..days_in_month
};

inline bool leap(int y) {
  return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

inline int days_in_month(int y, int m) {
  static constexpr std::array<int, 12> days{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && leap(y) ? 29 : days[std::size_t(m - 1)];
}

// 0 = Monday (Zeller's congruence, Gregorian calendar).
inline int weekday(const Date& d) {
  int m = d.month, y = d.year;
  if (m < 3) m += 12, y -= 1;
  const int k = y % 100, j = y / 100;
  const int h = (d.day + 13 * (m + 1) / 5 + k + k / 4 + j / 4 + 5 * j) % 7;  // 0 = Saturday
  return (h + 5) % 7;
}

// One date in ten belongs to the test set (a hash of the date, not of the format).
inline bool held_out(const Date& d) {
  const std::uint64_t key = std::uint64_t(d.year * 400 + d.month * 32 + d.day);
  return attn::detail::splitmix64(key) % 10 == 0;
}

inline const std::array<const char*, 12> month_names{
    "january", "february", "march",     "april",   "may",      "june",
    "july",    "august",   "september", "october", "november", "december"};
inline const std::array<const char*, 7> weekday_names{"monday", "tuesday",  "wednesday", "thursday",
                                                      "friday", "saturday", "sunday"};

inline std::string ordinal_suffix(int day) {
  if (day % 100 >= 11 && day % 100 <= 13) return "th";
  switch (day % 10) {
    case 1:
      return "st";
    case 2:
      return "nd";
    case 3:
      return "rd";
    default:
      return "th";
  }
}

// "first" … "thirty-first".
inline std::string ordinal_word(int day) {
  static const std::array<const char*, 20> small{
      "",          "first",     "second",      "third",      "fourth",
      "fifth",     "sixth",     "seventh",     "eighth",     "ninth",
      "tenth",     "eleventh",  "twelfth",     "thirteenth", "fourteenth",
      "fifteenth", "sixteenth", "seventeenth", "eighteenth", "nineteenth"};
  if (day < 20) return small[std::size_t(day)];
  const std::string tens = day < 30 ? "twenty" : "thirty";
  if (day % 10 == 0) return day == 20 ? "twentieth" : "thirtieth";
  return tens + "-" + small[std::size_t(day % 10)];
}

// Appended rather than `(v < 10 ? "0" : "") + std::to_string(v)`, which g++ 12 at -O3 warns
// about (-Wrestrict, a false positive in its std::string operator+).
inline std::string two_digits(int v) {
  std::string s = v < 10 ? "0" : "";
  s += std::to_string(v);
  return s;
}

inline constexpr int format_count = 8;
inline const std::array<const char*, format_count> format_names{"5 march 1987",
                                                                "march 5, 1987",
                                                                "5 mar 1987",
                                                                "thursday, march 5, 1987",
                                                                "the fifth of march 1987",
                                                                "5th march 1987",
                                                                "mar 5 1987",
                                                                "05.03.1987"};

// The date in format f (0 ≤ f < format_count), lower case.
inline std::string human(const Date& d, int f) {
  const std::string month = month_names[std::size_t(d.month - 1)];
  const std::string mon = month.substr(0, 3);
  const std::string day = std::to_string(d.day), year = std::to_string(d.year);
  switch (f) {
    case 0:
      return day + " " + month + " " + year;
    case 1:
      return month + " " + day + ", " + year;
    case 2:
      return day + " " + mon + " " + year;
    case 3:
      return std::string(weekday_names[std::size_t(weekday(d))]) + ", " + month + " " + day + ", " +
             year;
    case 4:
      return "the " + ordinal_word(d.day) + " of " + month + " " + year;
    case 5:
      return day + ordinal_suffix(d.day) + " " + month + " " + year;
    case 6:
      return mon + " " + day + " " + year;
    default:
      return two_digits(d.day) + "." + two_digits(d.month) + "." + year;
  }
}

inline std::string iso(const Date& d) {
  return std::to_string(d.year) + "-" + two_digits(d.month) + "-" + two_digits(d.day);
}

struct Example {
  std::string source, target;
  int format;
};

// A date from the training (or test) side of the split, uniform over 1900-01-01 … 2099-12-31
// within that side, in a uniformly drawn format.
inline Example draw(attn::Rng& rng, bool test) {
  for (;;) {
    Date d{1900 + int(rng.uniform_int(200)), 1 + int(rng.uniform_int(12)), 1};
    d.day = 1 + int(rng.uniform_int(std::uint64_t(days_in_month(d.year, d.month))));
    if (held_out(d) != test) continue;
    const int f = int(rng.uniform_int(format_count));
    return {human(d, f), iso(d), f};
  }
}

// ---- vocabularies
// ---------------------------------------------------------------------------------

// A fixed character vocabulary: the characters of `chars` have ids first, first + 1, …; the ids
// below `first` are special tokens.
struct CharVocab {
  std::string_view chars;
  std::int32_t first;
  const char* side;  // for messages

  index_t size() const { return index_t(chars.size()) + first; }
  std::int32_t id(char c) const {
    const auto p = chars.find(c);
    ATTN_CHECK(p != std::string_view::npos, attn::value_error, "dates: character '",
               std::string(1, c), "' is not in the ", side, " vocabulary");
    return std::int32_t(p) + first;
  }
  char character(std::int32_t id) const {
    return id >= first && id < std::int32_t(size()) ? chars[std::size_t(id - first)] : '?';
  }
};

// Source: 0 is padding, then ' ', ',', '-', '.', digits, letters.
inline constexpr std::int32_t pad = 0;
inline constexpr CharVocab source_vocab{" ,-.0123456789abcdefghijklmnopqrstuvwxyz", 1, "source"};
// Target: 0 begins a sequence, 1 ends it, then '-' and digits.
inline constexpr std::int32_t bos = 0, eos = 1;
inline constexpr CharVocab target_vocab{"-0123456789", 2, "target"};

inline constexpr index_t max_source = 36;     // "the twenty-seventh of september 1987" is 36
inline constexpr index_t target_length = 11;  // "1987-09-23" and the end token

// A batch: sources padded to the longest, decoder inputs [BOS, y₀ … y₉] and targets [y₀ … y₉, EOS].
struct Batch {
  attn::Tensor<std::int32_t> src;     // [B, Ts]
  std::vector<index_t> src_lengths;   // B values
  attn::Tensor<std::int32_t> tgt_in;  // [B, 11]
  attn::Tensor<std::int32_t> tgt;     // [B, 11]
  std::vector<Example> examples;
};

inline Batch make_batch(std::vector<Example> examples) {
  const index_t B = index_t(examples.size());
  ATTN_CHECK(B > 0, attn::value_error, "dates::make_batch: no examples");
  index_t ts = 0;
  for (const Example& e : examples) ts = std::max(ts, index_t(e.source.size()));
  ATTN_CHECK(ts <= max_source, attn::value_error, "dates::make_batch: a source of ", ts,
             " characters exceeds ", max_source);
  Batch b;
  b.src = attn::Tensor<std::int32_t>::zeros({B, ts});
  b.tgt_in = attn::Tensor<std::int32_t>::zeros({B, target_length});
  b.tgt = attn::Tensor<std::int32_t>::zeros({B, target_length});
  for (index_t i = 0; i < B; ++i) {
    const Example& e = examples[std::size_t(i)];
    ATTN_CHECK(index_t(e.target.size()) == target_length - 1, attn::value_error,
               "dates::make_batch: target '", e.target, "' is not an ISO date");
    for (index_t t = 0; t < index_t(e.source.size()); ++t)
      b.src(i, t) = source_vocab.id(e.source[std::size_t(t)]);
    b.src_lengths.push_back(index_t(e.source.size()));
    b.tgt_in(i, 0) = bos;
    for (index_t t = 0; t < target_length - 1; ++t) {
      const std::int32_t y = target_vocab.id(e.target[std::size_t(t)]);
      b.tgt(i, t) = y;
      b.tgt_in(i, t + 1) = y;
    }
    b.tgt(i, target_length - 1) = eos;
  }
  b.examples = std::move(examples);
  return b;
}

inline std::vector<Example> draw_many(attn::Rng& rng, index_t n, bool test) {
  std::vector<Example> v;
  for (index_t i = 0; i < n; ++i) v.push_back(draw(rng, test));
  return v;
}

}  // namespace dates
