// attn/io/csv_log.hpp: CsvLog, a CSV file of numeric rows (training curves, benchmark results),
// each row flushed as it is written. Does not read CSV back, quote or escape values (every value
// is a number), or write atomically: a log grows row by row.
#pragma once

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "atomic_file.hpp"

namespace attn::io {

// A CSV log with a fixed list of columns:
//
//   CsvLog log("train.csv", {"step", "loss", "lr"});
//   log.row({step, loss, lr});
//
// The header line is written when the file is created; with append = true an existing file is
// continued instead, provided its header line is the same (io_error otherwise). Numbers are
// written with 9 significant digits ("%.9g", enough to round-trip a float) independent of the C
// locale; NaN and infinities come out as nan, inf, -inf. Each row is flushed when written, so a
// crash loses at most the row being written.
class CsvLog {
 public:
  CsvLog(const std::filesystem::path& path, std::vector<std::string> columns, bool append = false)
      : path_(path), columns_(std::move(columns)) {
    ATTN_CHECK(!columns_.empty(), value_error, "CsvLog: '", path_.string(), "': no columns given");
    std::string header;
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      if (i) header += ',';
      append_field(header, columns_[i]);
    }

    bool write_header = true;
    bool needs_newline = false;
    if (append) {
      std::error_code ec;
      const bool exists = std::filesystem::exists(path_, ec);
      if (exists && std::filesystem::file_size(path_, ec) > 0 && !ec) {
        const auto [same_header, first_line, ends_with_newline] = inspect_existing(header);
        ATTN_CHECK(same_header, io_error, "CsvLog: cannot append to '", path_.string(),
                   "': its header is '", first_line, "' but this log writes '", header, "'");
        write_header = false;
        needs_newline = !ends_with_newline;  // a row cut short by a crash: start a fresh line
      }
    }

    file_.reset(std::fopen(path_.string().c_str(), append ? "ab" : "wb"));
    if (!file_) {
      const int err = errno;
      throw io_error(attn::detail::message("CsvLog: cannot open '", path_.string(),
                                           "' for writing: ", detail::errno_text(err)));
    }
    if (needs_newline) write("\n");
    if (write_header) write(header + "\n");
  }

  CsvLog(CsvLog&&) noexcept = default;
  CsvLog& operator=(CsvLog&&) noexcept = default;

  // Writes one row, one value per column, and flushes it. Throws value_error when the count of
  // values differs from the count of columns, io_error when the write fails.
  void row(std::span<const double> values) {
    ATTN_CHECK(values.size() == columns_.size(), value_error, "CsvLog::row: ", values.size(),
               " values for ", columns_.size(), " columns in '", path_.string(), "'");
    std::string line;
    line.reserve(values.size() * 16);
    char buf[32];
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (i) line += ',';
      // to_chars, not printf: printf would write "0,5" under a German LC_NUMERIC.
      const auto r = std::to_chars(buf, buf + sizeof buf, values[i], std::chars_format::general, 9);
      line.append(buf, r.ptr);
    }
    line += '\n';
    write(line);
  }

  void row(std::initializer_list<double> values) {
    row(std::span<const double>(values.begin(), values.size()));
  }

  const std::filesystem::path& path() const { return path_; }
  const std::vector<std::string>& columns() const { return columns_; }

 private:
  // A column name as a CSV field: quoted (RFC 4180) only when it holds a comma, quote or newline.
  static void append_field(std::string& out, std::string_view name) {
    if (name.find_first_of(",\"\r\n") == std::string_view::npos) {
      out += name;
      return;
    }
    out += '"';
    for (const char c : name) {
      if (c == '"') out += '"';
      out += c;
    }
    out += '"';
  }

  struct Existing {
    bool same_header;        // the file starts with `header` and a line end ("\n" or "\r\n")
    std::string first_line;  // for the error message (at most 200 bytes)
    bool ends_with_newline;
  };

  // Compares the start of the existing file with `header` byte for byte (a quoted column name
  // may hold a newline, so "the first line" is not the unit), and looks at its last byte.
  Existing inspect_existing(const std::string& header) const {
    detail::FilePtr f(std::fopen(path_.string().c_str(), "rb"));
    if (!f) {
      const int err = errno;
      throw io_error(attn::detail::message("CsvLog: cannot open '", path_.string(),
                                           "' to check its header: ", detail::errno_text(err)));
    }
    std::string start(header.size() + 2, '\0');
    start.resize(std::fread(start.data(), 1, start.size(), f.get()));
    const std::string_view rest =
        std::string_view(start).substr(std::min(header.size(), start.size()));
    const bool same = start.compare(0, header.size(), header) == 0 &&
                      (rest.starts_with("\n") || rest.starts_with("\r\n"));
    std::string first_line = start.substr(0, std::min<std::size_t>(start.find('\n'), 200));
    if (!first_line.empty() && first_line.back() == '\r') first_line.pop_back();
    bool ends_with_newline = false;
    if (std::fseek(f.get(), -1, SEEK_END) == 0) ends_with_newline = std::fgetc(f.get()) == '\n';
    return {same, first_line, ends_with_newline};
  }

  void write(std::string_view s) {
    ATTN_CHECK(file_, value_error, "CsvLog: write to a moved-from log");
    if (std::fwrite(s.data(), 1, s.size(), file_.get()) != s.size() ||
        std::fflush(file_.get()) != 0) {
      const int err = errno;
      throw io_error(attn::detail::message("CsvLog: cannot write to '", path_.string(),
                                           "': ", detail::errno_text(err)));
    }
  }

  std::filesystem::path path_;
  std::vector<std::string> columns_;
  detail::FilePtr file_;
};

}  // namespace attn::io
