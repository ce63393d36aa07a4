// examples/common/cli.hpp: what every example program's command line shares: option checks that
// CLI11 lacks (finite numbers, unsigned seeds), the settings-table adapter, and run_main, which
// turns a bad option into one line and exit status 2 and anything the program throws into one
// line and exit status 1.
// Does not define options (each program does) nor know about files, checkpoints or training.
#pragma once

#include <CLI/CLI.hpp>
#include <attn/core/error.hpp>
#include <attn/train/settings.hpp>

#include <cxxabi.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <new>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "format.hpp"

namespace examples {

// Exit statuses of the example programs.
inline constexpr int exit_error = 1;  // the program ran into a problem (a file, the data, memory)
inline constexpr int exit_usage = 2;  // a bad option: nothing was read or written

// A check for a floating-point option: a finite number in [lo, hi] (or (lo, hi] when lo_open).
// CLI::Range lets NaN through (every comparison with NaN is false), so `--temperature nan` used
// to pass the parser and fail after the whole run.
inline CLI::Validator number_in(double lo, double hi, bool lo_open = false) {
  const std::string range = (lo_open ? "(" : "[") + shortest(lo) + ", " + shortest(hi) + "]";
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        double v = 0;
        const char* end = input.data() + input.size();
        const auto r = std::from_chars(input.data(), end, v);
        if (r.ec != std::errc{} || r.ptr != end || !std::isfinite(v))
          return "'" + input + "' is not a finite number";
        if ((lo_open ? v <= lo : v < lo) || v > hi) return input + " is outside " + range;
        return {};
      },
      "NUMBER in " + range);
}

// A check for unsigned integer options (seeds): digits only, at most 2^64 - 1. CLI11 2.1 reads
// "-1", and any number above 2^64 - 1, into a uint64 as 2^64 - 1 without a word.
inline CLI::Validator unsigned_integer() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        if (input.empty() || input.find_first_not_of("0123456789") != std::string::npos)
          return "'" + input + "' is not a non-negative integer";
        std::uint64_t v = 0;  // and it fits: CLI11 would store 2^64 - 1 for anything larger
        if (std::from_chars(input.data(), input.data() + input.size(), v).ec != std::errc{})
          return "'" + input + "' is larger than 2^64 - 1";
        return {};
      },
      "UINT");
}

// Adds an option to `app` for every row of `settings` (the table stays the one place a setting is
// declared): its name, help, accepted values and default come from the row, the row's own check
// validates the text (a bad value is a CLI11 parse error: one line, exit status 2), and a valid
// one is stored through settings.set, which marks it given.
inline void add_settings(CLI::App& app, attn::train::Settings& settings) {
  for (const attn::train::Setting& row : settings.table()) {
    const std::string name = row.name();
    if (row.kind() == attn::train::Kind::flag) {
      app.add_flag_callback(
          row.option(), [&settings, name] { settings.set(name, "true"); }, row.help());
      continue;
    }
    const attn::train::Setting* r = &row;  // rows never move (the table is a deque)
    if (row.is_list()) {  // "--models dot additive" or "--models dot,additive": one set() of all
      app.add_option_function<std::vector<std::string>>(
             row.option(),
             [&settings, name](const std::vector<std::string>& values) {
               const std::string joined = attn::train::Setting::join_list(values);
               const std::string why = settings.at(name).check(joined);  // e.g. too few values
               if (!why.empty()) throw CLI::ValidationError("--" + name, why);
               settings.set(name, joined);
             },
             row.help())
          ->delimiter(',')
          ->type_name(r->value_help())
          ->check(CLI::Validator([r](std::string& in) { return r->check_element(in); }, ""))
          ->default_str(row.default_text());
      continue;
    }
    app.add_option_function<std::string>(
           row.option(), [&settings, name](const std::string& v) { settings.set(name, v); },
           row.help())
        ->type_name(r->value_help())
        ->check(CLI::Validator([r](std::string& in) { return r->check(in); }, ""))
        ->default_str(row.default_text());
  }
}

// "std::invalid_argument" for an exception of that type (the mangled name where demangling fails).
inline std::string type_name(const std::type_info& t) {
  int status = 0;
  char* name = abi::__cxa_demangle(t.name(), nullptr, nullptr, &status);
  const std::string out = status == 0 && name != nullptr ? name : t.name();
  std::free(name);
  return out;
}

// Returns body()'s exit status; an exception from it prints one line and returns exit_error,
// whatever its type: attn's errors, std::bad_alloc (out of memory), std::invalid_argument,
// anything (a CLI::ParseError, an option combination checked after parsing: exit_usage). No
// example program ends with an uncaught exception (abort, core dump, exit status 134). With
// `kept`, the line is kept there instead of printed (a data-parallel job prints one rank's, once:
// attn::dist::DataParallel::finish).
// The error line `what`: kept in `kept` when given, else printed (print_error).
inline void say_error(std::string* kept, const std::string& what) {
  if (kept != nullptr)
    *kept = what;
  else
    print_error(what);
}

template <class Body>
int guarded(Body&& body, std::string* kept = nullptr) {
  try {
    return body();
  } catch (const CLI::ParseError& e) {  // an option combination checked after parsing
    say_error(kept, std::string(e.what()) + " (see --help)");
    return exit_usage;
  } catch (const std::bad_alloc&) {
    say_error(kept, "out of memory (std::bad_alloc): use a smaller model, batch or block");
  } catch (const std::filesystem::filesystem_error& e) {
    say_error(kept, e.what());
  } catch (const attn::error& e) {
    say_error(kept, e.what());
  } catch (const std::exception& e) {
    say_error(kept, type_name(typeid(e)) + ": " + e.what());
  } catch (...) {
    say_error(kept, "an exception of unknown type");
  }
  return exit_error;
}

// Where a program's error line goes (run_main): printed at once, or kept for a data-parallel
// job to print once, from the first rank that failed (`quiet_help`: a rank other than 0, which
// prints no --help either).
struct ErrorOutput {
  std::string* kept = nullptr;
  bool quiet_help = false;
};

// Parses the command line into `app`'s options, then returns guarded(body). A bad option prints
// one line and returns exit_usage (--help prints the help and returns 0).
template <class Body>
int run_main(CLI::App& app, int argc, char** argv, Body&& body, ErrorOutput out = {}) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return out.quiet_help ? 0 : app.exit(e);  // --help, --version
    say_error(out.kept, std::string(e.what()) + " (see --help)");
    return exit_usage;
  }
  return guarded(body, out.kept);
}

}  // namespace examples
