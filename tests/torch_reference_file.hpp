// tests/torch_reference_file.hpp: the reference files that the PyTorch scripts of the tests write
// (tests/attention/torch_reference.py, torch_kernel_reference.py, tests/optim/
// torch_optim_reference.py): reading one, never throwing (a problem is reported in `error`),
// and comparing attn's tensors with its values.
#pragma once

#include <doctest/doctest.h>

#include <attn/core/tensor.hpp>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace torch_reference {

using attn::index_t;
using attn::Shape;
using attn::Tensor;

struct ReferenceFile {
  std::map<std::string, Tensor<double>> tensors;
  std::string error;  // empty when the whole file was read and is well formed
};

template <class... A>
std::string cat(const A&... a) {
  std::ostringstream s;
  s.precision(17);
  (s << ... << a);
  return s.str();
}

// Reads `in` (named `source` in messages), whose first line must be `format_line`.
inline ReferenceFile parse_reference(std::istream& in, const std::string& source,
                                     const std::string& format_line) {
  ReferenceFile file;
  auto fail = [&](long line, const std::string& what) {
    file.tensors.clear();
    file.error = cat(source, ":", line, ": ", what);
    return file;
  };
  std::string text;
  long line = 0;
  if (!std::getline(in, text)) return fail(1, "empty or unreadable file");
  ++line;
  if (text != format_line)
    return fail(line,
                cat("first line is '", text.substr(0, 40), "', expected '", format_line, "'"));
  bool ended = false;
  while (std::getline(in, text)) {
    ++line;
    if (text.empty() || text[0] == '#') continue;
    if (ended) return fail(line, "content after the 'end' line");
    std::istringstream fields(text);
    std::string name;
    fields >> name;
    if (name == "end") {
      long count = -1;
      if (!(fields >> count) || count != static_cast<long>(file.tensors.size()))
        return fail(line, cat("'end' line does not match the ", file.tensors.size(),
                              " tensors read (truncated or edited file?)"));
      ended = true;
      continue;
    }
    int rank = -1;
    if (!(fields >> rank) || rank < 0 || rank > Shape::max_rank)
      return fail(line, cat("tensor '", name, "': bad rank"));
    std::vector<index_t> dims(static_cast<std::size_t>(rank));
    for (index_t& d : dims)
      if (!(fields >> d) || d < 0) return fail(line, cat("tensor '", name, "': bad dimension"));
    const Shape shape{std::span<const index_t>(dims)};
    std::vector<double> values(static_cast<std::size_t>(shape.numel()));
    for (double& v : values)
      if (!(fields >> v) || !std::isfinite(v))
        return fail(line, cat("tensor '", name, "' ", shape, ": missing or bad value"));
    std::string extra;
    if (fields >> extra)
      return fail(line, cat("tensor '", name, "' ", shape, ": more values than its shape holds"));
    if (!file.tensors.emplace(name, Tensor<double>(shape, std::span<const double>(values))).second)
      return fail(line, cat("tensor '", name, "' appears twice"));
  }
  if (!ended) return fail(line, "no 'end' line (truncated file?)");
  return file;
}

// The file at `path`; `regenerate` says how to write it again (for the message when it is missing).
inline ReferenceFile load_reference(const std::string& path, const std::string& format_line,
                                    const std::string& regenerate) {
  std::ifstream in(path);
  if (!in) {
    ReferenceFile file;
    file.error = cat(path, ": cannot open (regenerate with ", regenerate, ")");
    return file;
  }
  return parse_reference(in, path, format_line);
}

// The tensor `name` of `file`: a failed REQUIRE naming the problem when the file could not be read
// or does not hold it.
inline const Tensor<double>& tensor(const ReferenceFile& file, const std::string& name) {
  REQUIRE_MESSAGE(file.error.empty(), file.error);
  const auto it = file.tensors.find(name);
  REQUIRE_MESSAGE(it != file.tensors.end(), "reference tensor '", name, "' is not in the file");
  return it->second;
}

// Prints every max difference when ATTN_PARITY_VERBOSE is set (for reports).
inline bool verbose() {
  static const bool on = std::getenv("ATTN_PARITY_VERBOSE") != nullptr;
  return on;
}

inline std::string index_string(const Shape& s, index_t flat) {
  std::vector<index_t> idx(static_cast<std::size_t>(s.rank()));
  for (int a = s.rank() - 1; a >= 0; --a) {
    idx[static_cast<std::size_t>(a)] = flat % s[a];
    flat /= s[a];
  }
  std::string r = "[";
  for (std::size_t a = 0; a < idx.size(); ++a) r += (a ? ", " : "") + std::to_string(idx[a]);
  return r + "]";
}

// Fails (naming `what`) unless actual and expected have one shape and differ by at most
// `tolerance` everywhere; a NaN or infinity in `actual` fails too.
inline void check_close(const std::string& what, const Tensor<double>& actual,
                        const Tensor<double>& expected, double tolerance) {
  if (actual.shape() != expected.shape()) {
    FAIL_CHECK(what, ": attn shape ", actual.shape(), " but torch shape ", expected.shape());
    return;
  }
  double worst = 0.0;
  index_t at = -1;
  for (index_t i = 0; i < actual.numel(); ++i) {
    const double d = std::abs(actual[i] - expected[i]);
    if (!(d <= worst)) {  // also true for NaN, which then stays the worst
      worst = d;
      at = i;
      if (std::isnan(d)) break;
    }
  }
  if (verbose()) std::cout << "  " << what << ": max |attn - torch| = " << worst << "\n";
  if (worst <= tolerance) return;
  FAIL_CHECK(what, ": max |attn - torch| = ", worst, " > ", tolerance, " at ",
             index_string(actual.shape(), at), " (attn ", cat(actual[at]), ", torch ",
             cat(expected[at]), ")");
}

}  // namespace torch_reference
