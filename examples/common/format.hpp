// examples/common/format.hpp: numbers as the example programs show and compare them (shortest(),
// the text of a double that reads back as the same double), and their one-line errors.
// Does not parse: cli.hpp checks options, run_files.hpp compares saved settings.
#pragma once

#include <unistd.h>
#include <attn/train/settings.hpp>

#include <cstdio>
#include <string>
#include <string_view>

namespace examples {

// The shortest text that reads back as the same double, in %g's style ("0.1", "0.0006",
// "2e-05"): how options and saved settings are shown and compared (the settings table's own).
inline std::string shortest(double v) {
  return attn::train::shortest_text(v);
}

// Prints "error: <what>" as one line on stderr: line breaks inside `what` become spaces. On a
// terminal a progress line may be half drawn, so the error starts on a line of its own there.
inline void print_error(std::string_view what) {
  std::string line(what);
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  std::fprintf(stderr, "%serror: %s\n", isatty(fileno(stderr)) ? "\n" : "", line.c_str());
}

}  // namespace examples
