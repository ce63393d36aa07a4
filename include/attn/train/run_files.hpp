// attn/train/run_files.hpp: the files of a training run with one owner. RunFiles checks, before
// anything is trained, everything that could make a save fail or lose data an hour later: no output
// is one of the run's inputs, the directory takes new files, no other process owns the run (a lock
// held until the process ends), a new run does not replace an earlier one unless asked (overwrite),
// and stale temp files of killed saves are removed. It then writes the run's CSV log: a resumed
// run's log is cut back to its checkpoint's step and continued; a new run's earlier files (an
// overwrite) are removed only when the new run first writes, so a run stopped before its first step
// leaves the old one as it was.
// Does not choose file names (each trainer does) nor write checkpoints (io/checkpoint.hpp); its
// functions are also usable one by one.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../io/atomic_file.hpp"
#include "../io/csv_log.hpp"
#include "paths.hpp"
#include "run_lock.hpp"

namespace attn::train {

// ---- output paths ----------------------------------------------------------------------------

// Checks that files can be created in directory `dir`, or, where it does not exist yet, that it
// can be made in its nearest existing ancestor: by creating and removing a file there. A
// read-only or missing place fails now, not at the first save an hour later; nothing is left
// behind (the run makes the directory when it starts writing).
inline void check_writable_directory(const std::filesystem::path& dir, std::string_view option) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path place = dir.empty() ? fs::path(".") : dir;
  while (!fs::exists(place, ec)) {
    const fs::path up = place.parent_path();
    place = up.empty() || up == place ? fs::path(".") : up;
  }
  if (!fs::is_directory(place, ec))
    throw value_error(std::string(option) + " " + dir.string() + ": " + place.string() +
                      " is a file, not a directory");
  const fs::path probe = place / (".write_test." + std::to_string(::getpid()));
  std::FILE* f = std::fopen(probe.c_str(), "wb");
  if (f == nullptr)
    throw io_error(std::string(option) + " " + dir.string() + ": cannot create files in " +
                   place.string() + ": " +
                   std::error_code(errno, std::generic_category()).message());
  std::fclose(f);
  fs::remove(probe, ec);
}

// Checks that `file` can be written later: it is not a directory, and its directory takes new
// files (or, when `may_create_directory`, can be made). Throws naming the option.
inline void check_output_file(const std::filesystem::path& file, std::string_view option,
                              bool may_create_directory) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!file.has_filename() || fs::is_directory(file, ec))
    throw value_error(std::string(option) + " " + file.string() +
                      " is a directory; give a file name");
  const fs::path dir = file.parent_path().empty() ? fs::path(".") : file.parent_path();
  if (!may_create_directory && !fs::is_directory(dir, ec))
    throw value_error(std::string(option) + " " + file.string() + ": the directory " +
                      dir.string() + " does not exist");
  check_writable_directory(dir, option);
}

// ---- new runs and old ones -------------------------------------------------------------------

// Refuses to start a new run where `files` (a run's checkpoint, log, ...) already exist, unless
// `overwrite`: a new run would replace the log and the checkpoint when it first writes. `option`
// names the output option, `how_to_continue` how to resume the old run instead.
inline void refuse_to_replace(const std::vector<std::filesystem::path>& files, bool overwrite,
                              std::string_view program, std::string_view option,
                              std::string_view how_to_continue) {
  std::string existing;
  for (const std::filesystem::path& f : files) {
    std::error_code ec;
    if (std::filesystem::exists(f, ec)) existing += (existing.empty() ? "" : ", ") + f.string();
  }
  if (existing.empty() || overwrite) return;
  throw value_error(std::string(program) + ": an earlier run's files are in the way (" + existing +
                    "); " + std::string(how_to_continue) + ", choose another " +
                    std::string(option) + ", or pass --overwrite to replace that run");
}

// Removes the temp files that saves of `checkpoint` killed midway left (their process is gone),
// and says so on stdout.
inline void remove_stale_saves(const std::filesystem::path& checkpoint) {
  for (const std::filesystem::path& p : io::remove_stale_temporaries(checkpoint))
    std::printf("removed %s, left by a save that was killed\n", p.c_str());
}

// Cuts the CSV log at `path` (header `columns`, first column the step) back to the rows of steps
// <= `step`, the checkpoint's: rows after it were logged by steps the checkpoint does not hold,
// and the resumed run logs them again. A last row cut short by a crash goes too. Rewrites the
// file atomically when anything was cut; returns the rows kept (for the plot of the whole run).
// A missing log gives no rows; a log with another header is an io_error.
inline std::vector<std::vector<double>> truncate_log(const std::filesystem::path& path,
                                                     const std::vector<std::string>& columns,
                                                     std::int64_t step) {
  std::vector<std::vector<double>> rows;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return rows;
  const std::vector<std::byte> bytes = io::read_file(path);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::string header;
  for (const std::string& c : columns) header += (header.empty() ? "" : ",") + c;
  const std::size_t first_end = text.find('\n');
  if (first_end == std::string_view::npos || text.substr(0, first_end) != header)
    throw io_error(path.string() + ": not the log of this run (its first line is not '" + header +
                   "')");
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
  if (kept.size() != text.size()) io::write_file_atomically(path, kept);
  return rows;
}

// ---- the files of one run --------------------------------------------------------------------

// Where a run's files go; the trainer names them.
struct RunLayout {
  std::filesystem::path checkpoint;            // what --resume reads and every save replaces
  std::filesystem::path log;                   // the CSV log, first column the step
  std::vector<std::string> log_columns;        // its header
  std::vector<std::filesystem::path> outputs;  // the other files it writes (plots, samples)
  std::filesystem::path lock;                  // the lock file ("<dir>/.lock", "<ckpt>.lock")
};

// What the trainer was asked to do, for the checks and their messages.
struct RunRequest {
  std::string program;          // "char_gpt: ..." in every message
  std::string option;           // the option that says where the run goes ("--out")
  std::filesystem::path where;  // its value: the run's directory, or its checkpoint
  bool resuming = false;        // continue the run whose checkpoint is layout.checkpoint
  bool overwrite = false;       // a new run may replace an earlier one's files
  std::string how_to_continue;  // "continue that run with --resume runs/x/ckpt"
  std::vector<Input> inputs;    // the files the run reads: no output may be one of them
};

class RunFiles {
 public:
  // Owns nothing: the other ranks of a data-parallel run, which write no files.
  RunFiles() = default;

  // Everything checked, in this order: no file of `layout` is one of `request.inputs`; the
  // checkpoint's directory takes files (made if missing); the lock is taken (another
  // process owning the run is a value_error naming its pid); a new run refuses to replace an
  // earlier one's checkpoint or log unless `request.overwrite`; stale temp files of killed saves
  // of the checkpoint are removed. Nothing of an earlier run is changed yet.
  RunFiles(RunLayout layout, const RunRequest& request)
      : layout_(std::move(layout)), resuming_(request.resuming), owner_(true) {
    namespace fs = std::filesystem;
    std::vector<fs::path> files{layout_.checkpoint, layout_.log};
    files.insert(files.end(), layout_.outputs.begin(), layout_.outputs.end());
    const std::string named = request.option + " " + request.where.string();
    for (const fs::path& p : files)
      check_not_an_input(p,
                         same_path(p, request.where)
                             ? request.option
                             : named + " (its " + p.filename().string() + ")",
                         request.inputs);
    const fs::path dir = layout_.checkpoint.parent_path();
    if (same_path(request.where, dir.empty() ? fs::path(".") : dir))
      check_writable_directory(request.where, request.option);
    else
      check_output_file(layout_.checkpoint, request.option, true);
    if (!dir.empty()) fs::create_directories(dir);
    lock_ = RunLock(layout_.lock,
                    request.program + ": the run in " +
                        (request.where.empty() ? layout_.checkpoint : request.where).string());
    if (!resuming_)
      refuse_to_replace({layout_.checkpoint, layout_.log}, request.overwrite, request.program,
                        request.option, request.how_to_continue);
    remove_stale_saves(layout_.checkpoint);
  }

  bool owner() const { return owner_; }
  const RunLayout& layout() const { return layout_; }

  // A resumed run: its log cut back to the checkpoint's `step` (see truncate_log); the rows kept
  // start rows(). A new run: nothing to do.
  void resume_log(std::int64_t step) {
    if (owner_ && resuming_) rows_ = truncate_log(layout_.log, layout_.log_columns, step);
  }

  // The run's log as it stands: the rows a resumed run kept, then this session's (what its plot
  // draws). Column `c` of every row: a curve.
  const std::vector<std::vector<double>>& rows() const { return rows_; }
  std::vector<double> column(std::size_t c) const {
    ATTN_CHECK(c < layout_.log_columns.size(), value_error, "RunFiles::column: ", c,
               " is not a column of ", layout_.log.string());
    std::vector<double> values;
    values.reserve(rows_.size());
    for (const std::vector<double>& row : rows_) values.push_back(row[c]);
    return values;
  }

  // Before this session writes its first file (the trainer calls it before its first save;
  // log_row calls it): a new run removes the earlier run's files it replaces (after the checks of
  // the constructor, and only now: a run stopped before its first step leaves them as they were)
  // and starts its log; a resumed run appends to its own. Called again, it does nothing.
  void begin_writing() {
    if (!owner_ || log_) return;
    if (!resuming_) {
      std::error_code ec;
      std::filesystem::remove(layout_.checkpoint, ec);
      for (const std::filesystem::path& p : layout_.outputs) std::filesystem::remove(p, ec);
    }
    log_.emplace(layout_.log, layout_.log_columns, resuming_);
  }
  bool writing() const { return log_.has_value(); }

  // One row of the log (begin_writing first). Does nothing where this process owns no files.
  void log_row(const std::vector<double>& values) {
    if (!owner_) return;
    begin_writing();
    log_->row(values);
    rows_.push_back(values);
  }

 private:
  RunLayout layout_;
  bool resuming_ = false, owner_ = false;
  RunLock lock_;
  std::optional<io::CsvLog> log_;
  std::vector<std::vector<double>> rows_;
};

}  // namespace attn::train
