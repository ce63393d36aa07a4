// Files for the tests that write some: a fresh scratch directory of the test's own, a file's whole
// text, a text written whole. Kept out of test_util.hpp, which every test includes.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace attn::test {

// An empty directory in the temp directory, named `prefix`, `name` and the process id (so that
// two test programs running at once do not share it); removed and made again when it exists.
inline std::filesystem::path fresh_dir(const std::string& prefix, const std::string& name) {
  const std::filesystem::path d =
      std::filesystem::temp_directory_path() / (prefix + name + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

}  // namespace attn::test
