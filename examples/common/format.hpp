// examples/common/format.hpp: numbers as the example programs show and compare them: shortest(),
// the text of a double that reads back as the same double.
// Does not parse: cli.hpp checks options, run_files.hpp compares saved settings.
#pragma once

#include <attn/train/settings.hpp>

#include <string>

namespace examples {

// The shortest text that reads back as the same double, in %g's style ("0.1", "0.0006",
// "2e-05"): how options and saved settings are shown and compared (the settings table's own).
inline std::string shortest(double v) {
  return attn::train::shortest_text(v);
}

}  // namespace examples
