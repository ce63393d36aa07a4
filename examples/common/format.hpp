// examples/common/format.hpp: numbers as the example programs show and compare them: shortest(),
// the text of a double that reads back as the same double.
// Does not parse: cli.hpp checks options, run_files.hpp compares saved settings.
#pragma once

#include <charconv>
#include <string>

namespace examples {

// The shortest text that reads back as the same double, in %g's style ("0.1", "0.0006",
// "2e-05"): how options and saved settings are shown and compared.
inline std::string shortest(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general);
  return std::string(buf, r.ptr);
}

}  // namespace examples
