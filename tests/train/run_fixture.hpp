// The run that the training layer's tests set up in a scratch directory: its files (a checkpoint,
// a log of step and loss, one plot, the lock) and the request of a trainer named "trainer" whose
// output option is --out. Shared by test_loop.cpp and test_trainer.cpp.
#pragma once

#include <attn/train/run_files.hpp>

#include <filesystem>

namespace attn::test {

inline train::RunLayout run_layout_in(const std::filesystem::path& dir) {
  return {dir / "checkpoint.safetensors",
          dir / "log.csv",
          {"step", "loss"},
          {dir / "loss.svg"},
          dir / ".lock"};
}

inline train::RunRequest run_request(const std::filesystem::path& dir, bool resuming,
                                     bool overwrite = false) {
  return {.program = "trainer",
          .option = "--out",
          .where = dir,
          .resuming = resuming,
          .overwrite = overwrite,
          .how_to_continue = "resume it",
          .inputs = {}};
}

}  // namespace attn::test
