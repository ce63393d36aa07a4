// attn/train/paths.hpp: a run's outputs checked against its inputs before anything is written:
// no output may be a file the run reads (the corpus, the checkpoint it starts from), under any
// spelling of the path (./x, a/../x, a symbolic link, a hard link).
// Does not check permissions or free space (the trainers check that writing works).
#pragma once

#include <sys/stat.h>
#include <attn/core/error.hpp>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace attn::train {

// True when a and b name the same file: the same device and inode when both exist (so hard links
// and symbolic links count), the same normalised absolute path otherwise.
inline bool same_path(const std::filesystem::path& a, const std::filesystem::path& b) {
  struct stat sa {
  }, sb{};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  std::error_code ea, eb;
  const std::filesystem::path ca = std::filesystem::weakly_canonical(a, ea);
  const std::filesystem::path cb = std::filesystem::weakly_canonical(b, eb);
  return !ea && !eb ? ca == cb : a.lexically_normal() == b.lexically_normal();
}

// One file a run reads, and the option that names it ("--data").
struct Input {
  std::filesystem::path path;
  std::string option;
};

// Throws value_error when `output` (named by `output_option`) is one of `inputs`: writing it would
// replace what the run reads. "--outputs-path data/dev.tsv is the file --eval-corpus reads: ..."
inline void check_not_an_input(const std::filesystem::path& output,
                               const std::string& output_option, const std::vector<Input>& inputs) {
  for (const Input& in : inputs)
    if (!in.path.empty() && same_path(output, in.path))
      throw value_error(output_option + " " + output.string() + " is the file " + in.option +
                        " reads (" + in.path.string() +
                        "): writing it would replace that input; choose another " + output_option);
}

}  // namespace attn::train
