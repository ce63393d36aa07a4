// examples/common/run_files.hpp: the files of a training run (checkpoint, CSV log, plots) as the
// trainers guard them: output paths checked before the first step, a run that is not being
// resumed never replaces an existing one unless asked (--overwrite), a resumed run's log cut back
// to its checkpoint's step and read back for the plot, stale temp files of killed saves removed,
// and the settings a resumed run keeps compared with the options given.
// Does not choose file names (each trainer does) nor write checkpoints.
#pragma once

#include <unistd.h>
#include <attn/io/atomic_file.hpp>
#include <attn/train/paths.hpp>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "format.hpp"

namespace examples {

namespace fs = std::filesystem;

// ---- output paths ----------------------------------------------------------------------------

// Checks that files can be created in directory `dir`, or, where it does not exist yet, that it
// can be made in its nearest existing ancestor: by creating and removing a file there. A
// read-only or missing place fails now, not at the first save an hour later; nothing is left
// behind (the trainer makes the directory when it starts writing).
inline void check_writable_directory(const fs::path& dir, std::string_view option) {
  std::error_code ec;
  fs::path place = dir.empty() ? fs::path(".") : dir;
  while (!fs::exists(place, ec)) {
    const fs::path up = place.parent_path();
    place = up.empty() || up == place ? fs::path(".") : up;
  }
  if (!fs::is_directory(place, ec))
    throw attn::value_error(std::string(option) + " " + dir.string() + ": " + place.string() +
                            " is a file, not a directory");
  const fs::path probe = place / (".write_test." + std::to_string(getpid()));
  std::FILE* f = std::fopen(probe.c_str(), "wb");
  if (f == nullptr)
    throw attn::io_error(std::string(option) + " " + dir.string() + ": cannot create files in " +
                         place.string() + ": " +
                         std::error_code(errno, std::generic_category()).message());
  std::fclose(f);
  fs::remove(probe, ec);
}

// Checks that `file` can be written later: it is not a directory, and its directory takes new
// files (or, when `may_create_directory`, can be made). Throws naming the option.
inline void check_output_file(const fs::path& file, std::string_view option,
                              bool may_create_directory) {
  std::error_code ec;
  if (!file.has_filename() || fs::is_directory(file, ec))
    throw attn::value_error(std::string(option) + " " + file.string() +
                            " is a directory; give a file name");
  const fs::path dir = file.parent_path().empty() ? fs::path(".") : file.parent_path();
  if (!may_create_directory && !fs::is_directory(dir, ec))
    throw attn::value_error(std::string(option) + " " + file.string() + ": the directory " +
                            dir.string() + " does not exist");
  check_writable_directory(dir, option);
}

// ---- new runs and old ones -------------------------------------------------------------------

// Refuses to start a new run where `files` (a run's checkpoint, log, ...) already exist, unless
// `overwrite`: a new run would wipe the log at its start and replace the checkpoint at its first
// save. `option` names the output option, `how_to_continue` how to resume the old run instead.
inline void refuse_to_replace(const std::vector<fs::path>& files, bool overwrite,
                              std::string_view program, std::string_view option,
                              std::string_view how_to_continue) {
  std::string existing;
  for (const fs::path& f : files) {
    std::error_code ec;
    if (fs::exists(f, ec)) existing += (existing.empty() ? "" : ", ") + f.string();
  }
  if (existing.empty() || overwrite) return;
  throw attn::value_error(std::string(program) + ": an earlier run's files are in the way (" +
                          existing + "); " + std::string(how_to_continue) + ", choose another " +
                          std::string(option) + ", or pass --overwrite to replace that run");
}

// Removes the temp files that saves of `checkpoint` killed midway left (their process is gone),
// and says so.
inline void remove_stale_saves(const fs::path& checkpoint) {
  for (const fs::path& p : attn::io::remove_stale_temporaries(checkpoint))
    std::printf("removed %s, left by a save that was killed\n", p.c_str());
}

// True when a and b name the same file (attn/train/paths.hpp: inodes, or normalised paths).
using attn::train::same_path;

// ---- the settings a resumed run keeps -----------------------------------------------------

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

// ---- the CSV log of a resumed run -------------------------------------------------------------

// Cuts the CSV log at `path` (header `columns`, first column the step) back to the rows of steps
// <= `step`, the checkpoint's: rows after it were logged by steps the checkpoint does not hold,
// and the resumed run logs them again. A last row cut short by a crash goes too. Rewrites the
// file atomically when anything was cut; returns the rows kept (for the plot of the whole run).
// A missing log gives no rows; a log with another header is an io_error.
inline std::vector<std::vector<double>> truncate_log(const fs::path& path,
                                                     const std::vector<std::string>& columns,
                                                     std::int64_t step) {
  std::vector<std::vector<double>> rows;
  std::error_code ec;
  if (!fs::exists(path, ec)) return rows;
  const std::vector<std::byte> bytes = attn::io::read_file(path);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::string header;
  for (const std::string& c : columns) header += (header.empty() ? "" : ",") + c;
  const std::size_t first_end = text.find('\n');
  if (first_end == std::string_view::npos || text.substr(0, first_end) != header)
    throw attn::io_error(path.string() + ": not the log of this run (its first line is not '" +
                         header + "')");
  std::string kept(text.substr(0, first_end + 1));
  for (std::size_t at = first_end + 1; at < text.size();) {
    const std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) break;  // cut short by a crash
    const std::string_view line = text.substr(at, end - at);
    std::vector<double> row;
    for (std::size_t f = 0; f <= line.size();) {
      const std::size_t comma = std::min(line.find(',', f), line.size());
      double v = 0;
      const std::string_view field = line.substr(f, comma - f);
      const auto r = std::from_chars(field.data(), field.data() + field.size(), v);
      if (r.ec != std::errc{} || r.ptr != field.data() + field.size()) break;
      row.push_back(v);
      f = comma + 1;
    }
    at = end + 1;
    if (row.size() != columns.size() || row[0] > double(step)) continue;
    rows.push_back(std::move(row));
    kept.append(line).append("\n");
  }
  if (kept.size() != text.size()) attn::io::write_file_atomically(path, kept);
  return rows;
}

}  // namespace examples
