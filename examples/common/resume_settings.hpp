// examples/common/resume_settings.hpp: the model settings a resumed run keeps, compared with the
// options given (an option that contradicts the checkpoint is an error naming both values), for
// the settings that are not yet rows of a program's attn::train::Settings table.
// Does not read checkpoints: the caller lists the saved values.
#pragma once

#include <attn/core/error.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace examples {

// One setting of a run: the option that sets it and its value as text (numbers as shortest()).
struct Setting {
  std::string option;
  std::string value;
};

// The shape of a model as the options that set it, for the checks below (a trainer appends the
// other model options it has).
inline std::vector<Setting> model_settings(std::int64_t layers, std::int64_t heads,
                                           std::int64_t embd, std::int64_t block) {
  return {{"--layers", std::to_string(layers)},
          {"--heads", std::to_string(heads)},
          {"--embd", std::to_string(embd)},
          {"--block", std::to_string(block)}};
}

// The settings of a resumed run come from its checkpoint (`saved`); an option given on the
// command line with another value than the saved one is an error naming both, instead of being
// ignored in silence. `cmd.count(option)` says whether an option was given (a CLI::App, or the
// set of the options given). `allowed` explains what may change instead.
template <class Command>
void check_resume_conflicts(const Command& cmd, const std::vector<Setting>& given,
                            const std::vector<Setting>& saved, const std::string& checkpoint,
                            std::string_view allowed) {
  for (const Setting& g : given) {
    if (cmd.count(g.option) == 0) continue;
    for (const Setting& s : saved)
      if (s.option == g.option && s.value != g.value)
        throw attn::value_error(g.option + " " + g.value + " conflicts with the run in " +
                                checkpoint + ", which has " + g.option + " " + s.value +
                                ": a resumed run keeps its settings (" + std::string(allowed) +
                                ")");
  }
}

}  // namespace examples
