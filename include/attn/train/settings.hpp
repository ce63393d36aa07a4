// attn/train/settings.hpp: a trainer's settings declared once, in one table: each setting's name,
// type, default, range or choices, help text, and what a resumed run does with it. From the table
// come the command-line options (an adapter per parser; attn itself parses no command line), the
// checkpoint metadata, the resume conflict checks (both values named) and the --help text.
// Does not parse argv, read files or know any trainer's settings: the trainer declares them.
//
//   attn::train::Settings s;
//   s.real("lr", o.lr, "peak learning rate").range(0, 10);
//   s.integer("steps", o.steps, "optimizer steps in total").range(1, 1e8).on_resume(may_change);
//   s.integer("threads", o.threads, "OpenMP threads").range(1, 256).on_resume(not_saved);
//   s.set("lr", "3e-4");                       // from an option: checked, stored, marked given
//   s.save(file.metadata);                     // train.lr = "0.00029999999999999997", ...
//   s.resume_from(old.metadata, "ckpt");       // saved values back; a contradiction throws
#pragma once

#include <attn/core/error.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace attn::train {

// What a resumed run does with a setting.
enum class OnResume {
  keeps,       // saved; the run keeps the saved value: giving another is an error naming both
  may_change,  // saved; a value given now replaces the saved one (more steps, a later stop)
  not_saved,   // a property of this session (threads, output paths): neither saved nor compared
};
inline constexpr OnResume keeps = OnResume::keeps;
inline constexpr OnResume may_change = OnResume::may_change;
inline constexpr OnResume not_saved = OnResume::not_saved;

enum class Kind { integer, unsigned_integer, real, text, flag };

// A double as the shortest text that parses back to the same double, in %g's style ("0.002",
// "0.0006", "2e-05"): what the metadata holds and the messages print.
inline std::string shortest_text(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general);
  return std::string(buf, r.ptr);
}

// One row of the table. Built by Settings' declaring functions and refined with the chained
// calls below; read through the accessors.
class Setting {
 public:
  // Integers and reals: the value must lie in [lo, hi] ((lo, hi] when `lo_open`).
  Setting& range(double lo, double hi, bool lo_open = false) {
    ATTN_CHECK(kind_ == Kind::integer || kind_ == Kind::unsigned_integer || kind_ == Kind::real,
               value_error, "Settings: --", name_, " is not a number and takes no range");
    ATTN_CHECK(!(lo > hi), value_error, "Settings: --", name_, ": empty range");
    lo_ = lo, hi_ = hi, lo_open_ = lo_open;
    return *this;
  }
  // Text: the value must be one of `choices`.
  Setting& choices(std::vector<std::string> choices) {
    ATTN_CHECK(kind_ == Kind::text, value_error, "Settings: --", name_,
               " is not text and takes no choices");
    choices_ = std::move(choices);
    return *this;
  }
  // Lists: at least `n` values.
  Setting& at_least(std::size_t n) {
    ATTN_CHECK(list_, value_error, "Settings: --", name_, " is not a list and takes no count");
    min_count_ = n;
    return *this;
  }
  Setting& on_resume(OnResume r) {
    on_resume_ = r;
    return *this;
  }
  // The metadata key (default "train.<name>" with '_' for '-': train.min_lr for --min-lr).
  Setting& key(std::string k) {
    key_ = std::move(k);
    return *this;
  }

  const std::string& name() const { return name_; }
  std::string option() const { return "--" + name_; }
  const std::string& key() const { return key_; }
  const std::string& help() const { return help_; }
  Kind kind() const { return kind_; }  // a list's: the kind of its values
  bool is_list() const { return list_; }
  OnResume resume_rule() const { return on_resume_; }
  const std::vector<std::string>& choice_list() const { return choices_; }
  // The value when the table was declared, and now, as text in the form the metadata holds.
  const std::string& default_text() const { return default_; }
  std::string text() const { return get_(); }
  bool given() const { return given_; }

  // "" when `input` is a valid value of this setting, else why not ("'x' is not a number").
  std::string check(std::string_view input) const {
    std::string canonical;
    return parse(input, canonical);
  }
  // The same for one value of a list (a command-line word): a ',' in it is refused, since the
  // list's text could not hold it.
  std::string check_element(std::string_view input) const {
    if (list_ && input.find(',') != input.npos)
      return "'" + std::string(input) + "': a value of a list cannot contain ','";
    std::string canonical;
    return parse_one(input, canonical);
  }

  // A list's text: its elements joined by ',' ("" for none); split_list undoes it.
  static std::string join_list(const std::vector<std::string>& elements) {
    std::string joined;
    for (std::size_t i = 0; i < elements.size(); ++i) {
      if (i) joined += ',';
      joined += elements[i];
    }
    return joined;
  }
  // A list's text split at ',' ("" is no element; "a,,b" has an empty one in the middle).
  static std::vector<std::string> split_list(std::string_view text) {
    std::vector<std::string> out;
    if (text.empty()) return out;
    for (std::size_t start = 0;;) {
      const std::size_t comma = text.find(',', start);
      out.emplace_back(text.substr(start, comma == text.npos ? text.npos : comma - start));
      if (comma == text.npos) return out;
      start = comma + 1;
    }
  }

  // What the help shows for the accepted values: "NUMBER in [0, 10]", "one of learned, none",
  // and for a list "list of INT in [1, 64]".
  std::string value_help() const {
    if (!list_) return element_help();
    return choices_.empty() ? "list of " + element_help() : "list, each " + element_help();
  }

 private:
  std::string element_help() const {
    const auto bound = [&](double v) {  // integers' bounds as integers, clamped to their type
      if (kind_ == Kind::real) return shortest_text(v);
      if (v <= -0x1p63) return std::to_string(std::numeric_limits<std::int64_t>::min());
      if (v < 0x1p63) return std::to_string(std::int64_t(v));
      if (kind_ == Kind::integer) return std::to_string(std::numeric_limits<std::int64_t>::max());
      if (v < 0x1p64) return std::to_string(std::uint64_t(v));
      return std::to_string(std::numeric_limits<std::uint64_t>::max());
    };
    const std::string r = has_range() ? std::string(" in ") + (lo_open_ ? "(" : "[") + bound(lo_) +
                                            ", " + bound(hi_) + "]"
                                      : "";
    switch (kind_) {
      case Kind::integer:
        return "INT" + r;
      case Kind::unsigned_integer:
        return "UINT" + r;
      case Kind::real:
        return "NUMBER" + r;
      case Kind::flag:
        return "";
      case Kind::text:
        break;
    }
    if (choices_.empty()) return "TEXT";
    std::string s = "one of ";
    for (std::size_t i = 0; i < choices_.size(); ++i) s += (i ? ", " : "") + choices_[i];
    return s;
  }

  friend class Settings;
  using Getter = std::function<std::string()>;
  using Setter = std::function<void(const std::string&)>;  // takes a checked canonical text

  Setting(std::string name, Kind kind, std::string help, Getter get, Setter set)
      : name_(std::move(name)),
        key_(default_key(name_)),
        help_(std::move(help)),
        kind_(kind),
        get_(std::move(get)),
        set_(std::move(set)),
        default_(get_()) {}

  // "train.min_lr" for --min-lr.
  static std::string default_key(const std::string& name) {
    std::string k = "train." + name;
    for (char& c : k)
      if (c == '-') c = '_';
    return k;
  }

  bool has_range() const {
    return lo_ > -std::numeric_limits<double>::infinity() ||
           hi_ < std::numeric_limits<double>::infinity();
  }

  // Checks `input` and writes its canonical text (what get_ would return after set_) to `out`;
  // returns "" or the reason it is not a value of this setting. A list's text is its elements
  // joined by ',' ("" for none), each checked as a value of the element kind.
  std::string parse(std::string_view input, std::string& out) const {
    if (!list_) return parse_one(input, out);
    std::vector<std::string> elements = split_list(input);
    for (std::string& element : elements) {
      std::string canonical;
      const std::string why = parse_one(element, canonical);
      if (!why.empty()) return why;
      element = std::move(canonical);
    }
    const std::size_t count = elements.size();
    if (count < min_count_)
      return "'" + std::string(input) + "' has " + std::to_string(count) + " value" +
             (count == 1 ? "" : "s") + ", fewer than " + std::to_string(min_count_);
    out = join_list(elements);
    return "";
  }

  // parse for one value of the element kind (the whole value where the setting is no list).
  std::string parse_one(std::string_view input, std::string& out) const {
    const std::string in(input);
    const char* begin = in.data();
    const char* end = begin + in.size();
    const auto outside = [&](double v) {
      return (lo_open_ ? !(v > lo_) : !(v >= lo_)) || !(v <= hi_);
    };
    const auto range_text = [&] { return element_help().substr(element_help().find(" in ") + 4); };
    switch (kind_) {
      case Kind::integer: {
        std::int64_t v = 0;
        const auto r = std::from_chars(begin, end, v);
        if (r.ec == std::errc::result_out_of_range) return "'" + in + "' is out of range";
        if (r.ec != std::errc{} || r.ptr != end || in.empty())
          return "'" + in + "' is not an integer";
        if (has_range() && outside(double(v))) return in + " is outside " + range_text();
        out = std::to_string(v);
        return "";
      }
      case Kind::unsigned_integer: {
        // Digits only: from_chars into an unsigned type takes no sign, and an overflow is an
        // error (never 2^64 − 1).
        std::uint64_t v = 0;
        if (in.empty() || in.find_first_not_of("0123456789") != std::string::npos)
          return "'" + in + "' is not a non-negative integer";
        const auto r = std::from_chars(begin, end, v);
        if (r.ec == std::errc::result_out_of_range) return "'" + in + "' is larger than 2^64 - 1";
        if (r.ec != std::errc{} || r.ptr != end)
          return "'" + in + "' is not a non-negative integer";
        if (has_range() && outside(double(v))) return in + " is outside " + range_text();
        out = std::to_string(v);
        return "";
      }
      case Kind::real: {
        double v = 0;
        const auto r = std::from_chars(begin, end, v);
        if (r.ec != std::errc{} || r.ptr != end || in.empty() || !std::isfinite(v))
          return "'" + in + "' is not a finite number";
        if (has_range() && outside(v)) return in + " is outside " + range_text();
        out = shortest_text(v);
        return "";
      }
      case Kind::flag:
        if (in == "1" || in == "true") return out = "true", "";
        if (in == "0" || in == "false") return out = "false", "";
        return "'" + in + "' is not true or false";
      case Kind::text:
        if (!choices_.empty()) {
          bool found = false;
          for (const std::string& c : choices_) found = found || c == in;
          if (!found) return "'" + in + "' is not " + element_help();
        }
        out = in;
        return "";
    }
    return "unknown kind";
  }

  std::string name_, key_, help_;
  Kind kind_;
  Getter get_;
  Setter set_;
  std::string default_;
  double lo_ = -std::numeric_limits<double>::infinity();
  double hi_ = std::numeric_limits<double>::infinity();
  bool lo_open_ = false;
  std::vector<std::string> choices_;
  OnResume on_resume_ = OnResume::keeps;
  bool given_ = false;
  bool list_ = false;          // a list of values of kind_
  std::size_t min_count_ = 0;  // a list's fewest values
};

// The table. Each declaring function binds a setting to the variable that holds its value (which
// must outlive the table) and records that variable's value as the default.
class Settings {
 public:
  template <class Int>
  Setting& integer(std::string name, Int& target, std::string help) {
    static_assert(std::is_integral_v<Int> && std::is_signed_v<Int>,
                  "Settings::integer: a signed integer (use unsigned_integer for seeds)");
    Setting& s = add(
        std::move(name), Kind::integer, std::move(help),
        [&target] { return std::to_string(target); },
        [&target](const std::string& t) { target = static_cast<Int>(std::stoll(t)); });
    // The variable's own type bounds the range (an int option cannot take 2^40).
    s.range(double(std::numeric_limits<Int>::lowest()), double(std::numeric_limits<Int>::max()));
    return s;
  }
  Setting& unsigned_integer(std::string name, std::uint64_t& target, std::string help) {
    return add(
        std::move(name), Kind::unsigned_integer, std::move(help),
        [&target] { return std::to_string(target); },
        [&target](const std::string& t) { target = std::stoull(t); });
  }
  Setting& real(std::string name, double& target, std::string help) {
    return add(
        std::move(name), Kind::real, std::move(help), [&target] { return shortest_text(target); },
        [&target](const std::string& t) {
          std::from_chars(t.data(), t.data() + t.size(), target);
        });
  }
  Setting& text(std::string name, std::string& target, std::string help) {
    return add(
        std::move(name), Kind::text, std::move(help), [&target] { return target; },
        [&target](const std::string& t) { target = t; });
  }
  Setting& flag(std::string name, bool& target, std::string help) {
    return add(
        std::move(name), Kind::flag, std::move(help),
        [&target] { return std::string(target ? "true" : "false"); },
        [&target](const std::string& t) { target = t == "true"; });
  }

  // Lists: the value is every element, given as one text with ',' between them ("4,8,16"; on a
  // command line also as separate words) and saved so. Each element is checked as the scalar
  // kind (range and choices apply to it); at_least(n) asks for n elements or more.
  template <class Int>
  Setting& integer_list(std::string name, std::vector<Int>& target, std::string help) {
    static_assert(std::is_integral_v<Int> && std::is_signed_v<Int>,
                  "Settings::integer_list: signed integers");
    Setting& s = add_list(
        std::move(name), Kind::integer, std::move(help), target,
        [](Int v) { return std::to_string(v); },
        [](const std::string& t) { return static_cast<Int>(std::stoll(t)); });
    s.range(double(std::numeric_limits<Int>::lowest()), double(std::numeric_limits<Int>::max()));
    return s;
  }
  Setting& text_list(std::string name, std::vector<std::string>& target, std::string help) {
    return add_list(
        std::move(name), Kind::text, std::move(help), target,
        [](const std::string& v) { return v; }, [](const std::string& t) { return t; });
  }

  // The setting called `name` (without "--"); value_error when there is none.
  Setting& at(std::string_view name) {
    for (Setting& s : table_)
      if (s.name_ == name) return s;
    throw value_error("Settings: no setting --" + std::string(name));
  }
  const Setting& at(std::string_view name) const {
    for (const Setting& s : table_)
      if (s.name_ == name) return s;
    throw value_error("Settings: no setting --" + std::string(name));
  }
  bool contains(std::string_view name) const {
    for (const Setting& s : table_)
      if (s.name_ == name) return true;
    return false;
  }
  const std::deque<Setting>& table() const { return table_; }
  bool given(std::string_view name) const { return at(name).given_; }

  // Sets a setting from text (an option's value), marking it given; value_error naming the option
  // and the reason when the text is not a valid value.
  void set(std::string_view name, std::string_view input) {
    Setting& s = at(name);
    std::string canonical;
    const std::string why = s.parse(input, canonical);
    ATTN_CHECK(why.empty(), value_error, s.option(), ": ", why);
    s.set_(canonical);
    s.given_ = true;
  }

  // A command line without a command-line library: `--name value`, `--name=value`, and a flag as
  // `--name` alone; each value checked by set(). Returns the other arguments (positional ones, and
  // everything after a lone `--`), in order. An option not in the table, or one without its
  // value, is a value_error naming it. `--help` is the caller's to look for first (help() is the
  // text).
  std::vector<std::string> parse_command_line(int argc, const char* const* argv) {
    std::vector<std::string> rest;
    for (int i = 1; i < argc; ++i) {
      const std::string_view arg = argv[i];
      if (arg == "--") {
        for (++i; i < argc; ++i) rest.emplace_back(argv[i]);
        break;
      }
      if (arg.size() < 3 || arg.substr(0, 2) != "--") {
        rest.emplace_back(arg);
        continue;
      }
      const std::size_t eq = arg.find('=');
      const std::string_view name = arg.substr(2, eq == std::string_view::npos ? arg.npos : eq - 2);
      ATTN_CHECK(contains(name), value_error, "unknown option --", name);
      if (eq != std::string_view::npos)
        set(name, arg.substr(eq + 1));
      else if (at(name).kind_ == Kind::flag)
        set(name, "true");
      else {
        ATTN_CHECK(i + 1 < argc, value_error, "--", name, " needs a value");
        set(name, argv[++i]);
      }
    }
    return rest;
  }

  // Writes every saved setting (all but not_saved) into `metadata` under its key.
  void save(std::map<std::string, std::string>& metadata) const {
    for (const Setting& s : table_)
      if (s.on_resume_ != OnResume::not_saved) metadata[s.key_] = s.text();
  }

  // Continues the run whose metadata is `metadata` (`source` names it in messages). For each saved
  // setting: its saved value is checked like an option (io_error naming the source and the key);
  // a `keeps` setting given now with another value is a value_error naming both values, otherwise
  // takes the saved value; a `may_change` setting given now keeps the new value. A key missing
  // from the metadata (a checkpoint older than the setting) is taken as the setting's
  // `fallback_when_missing` value (what runs did before the setting existed; without one, the
  // current value), unless given now as may_change; without a fallback it is an io_error. `allowed`
  // ends the conflict message ("--steps and --threads may change").
  void resume_from(const std::map<std::string, std::string>& metadata, const std::string& source,
                   std::string_view allowed = {}) {
    // Every saved value is checked before any is taken, so a bad file changes nothing.
    std::vector<std::pair<Setting*, std::string>> take;
    for (Setting& s : table_) {
      if (s.on_resume_ == OnResume::not_saved) continue;
      const auto it = metadata.find(s.key_);
      if (it == metadata.end()) {
        const auto fallback = missing_ok_.find(s.name_);
        ATTN_CHECK(fallback != missing_ok_.end(), io_error, source, ": metadata '", s.key_,
                   "' is missing (", s.option(), " of the run)");
        if (fallback->second && !(s.given_ && s.on_resume_ == OnResume::may_change)) {
          if (s.given_ && s.text() != *fallback->second)
            throw conflict(s, *fallback->second, source, resume_rule(allowed));
          take.emplace_back(&s, *fallback->second);
        }
        continue;
      }
      std::string saved;
      const std::string why = s.parse(it->second, saved);
      ATTN_CHECK(why.empty(), io_error, source, ": metadata '", s.key_, "' = ", why);
      if (s.given_ && s.on_resume_ == OnResume::may_change) continue;
      if (s.given_ && s.text() != saved) throw conflict(s, saved, source, resume_rule(allowed));
      take.emplace_back(&s, std::move(saved));
    }
    for (auto& [s, saved] : take) s->set_(saved);
  }

  // Refuses a setting given now whose value differs from the one `values` holds for it (name ->
  // text; e.g. the model a checkpoint brings, saved in its own form rather than by save()): a
  // value_error naming both values and ending in `why`, the caller's rule ("--layers 2 conflicts
  // with the run in c, which has --layers 1: a run from a checkpoint's weights keeps its model").
  // Values are compared in canonical form ("0.10" is 0.1); settings not given, and names the
  // table lacks, are not compared.
  void check_given(const std::map<std::string, std::string>& values, const std::string& source,
                   std::string_view why) const {
    for (const auto& [name, value] : values) {
      if (!contains(name)) continue;
      const Setting& s = at(name);
      if (!s.given_) continue;
      std::string other;
      if (!s.parse(value, other).empty()) other = value;  // not a value of the row: as it is
      if (s.text() != other) throw conflict(s, other, source, why);
    }
  }

  // Lets resume_from accept a checkpoint that lacks `name`'s key (written before the setting
  // existed): the run then keeps the setting's current value, or takes `old_value` (checked like
  // an option now) where the runs of that time did something other than today's default.
  Settings& fallback_when_missing(std::string_view name) {
    missing_ok_[std::string(at(name).name_)] = std::nullopt;
    return *this;
  }
  Settings& fallback_when_missing(std::string_view name, std::string_view old_value) {
    Setting& s = at(name);
    std::string canonical;
    const std::string why = s.parse(std::string(old_value), canonical);
    ATTN_CHECK(why.empty(), value_error, "fallback_when_missing: ", s.option(), " ", why);
    missing_ok_[std::string(s.name_)] = std::move(canonical);
    return *this;
  }

  // The settings as help text: "  --lr NUMBER in [0, 10]  peak learning rate (default 0.002)",
  // one per line, with what a resume does where it is not `keeps`.
  std::string help() const {
    std::string out;
    for (const Setting& s : table_) {
      std::string line = "  " + s.option();
      const std::string v = s.value_help();
      if (!v.empty()) line += " " + v;
      line += "  " + s.help_;
      if (s.kind_ != Kind::flag && !s.default_.empty()) line += " (default " + s.default_ + ")";
      if (s.on_resume_ == OnResume::may_change) line += " [may change on --resume]";
      out += line + "\n";
    }
    return out;
  }

 private:
  Setting& add(std::string name, Kind kind, std::string help, Setting::Getter get,
               Setting::Setter set) {
    ATTN_CHECK(!name.empty() && name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") ==
                                    std::string::npos,
               value_error, "Settings: '", name, "' is not a setting name (lower case, digits, -)");
    ATTN_CHECK(!contains(name), value_error, "Settings: --", name, " is declared twice");
    table_.push_back(
        Setting(std::move(name), kind, std::move(help), std::move(get), std::move(set)));
    return table_.back();
  }

  template <class T, class ToText, class FromText>
  Setting& add_list(std::string name, Kind kind, std::string help, std::vector<T>& target,
                    ToText to_text, FromText from_text) {
    // A ',' in a default element would split it: refused, as on the command line.
    for (const T& v : target)
      ATTN_CHECK(to_text(v).find(',') == std::string::npos, value_error, "Settings: --", name,
                 ": the default value '", to_text(v), "' contains ','");
    Setting& s = add(
        std::move(name), kind, std::move(help),
        [&target, to_text] {
          std::vector<std::string> elements;
          for (const T& v : target) elements.push_back(to_text(v));
          return Setting::join_list(elements);
        },
        [&target, from_text](const std::string& t) {
          target.clear();
          for (const std::string& element : Setting::split_list(t))
            target.push_back(from_text(element));
        });
    s.list_ = true;
    return s;
  }

  // "--lr 0.1 conflicts with the run in c, which has --lr 0.0006: " and the rule broken.
  static value_error conflict(const Setting& s, const std::string& saved, const std::string& source,
                              std::string_view rule) {
    return value_error(s.option() + " " + s.text() + " conflicts with the run in " + source +
                       ", which has " + s.option() + " " + saved + ": " + std::string(rule));
  }
  // resume_from's rule: "a resumed run keeps its settings (--steps may change)".
  static std::string resume_rule(std::string_view allowed) {
    return "a resumed run keeps its settings" +
           (allowed.empty() ? std::string() : " (" + std::string(allowed) + ")");
  }

  std::deque<Setting> table_;  // a deque: declaring more never moves a Setting already handed out
  std::map<std::string, std::optional<std::string>> missing_ok_;  // name -> old value
};

}  // namespace attn::train
