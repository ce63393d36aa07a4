// tests/fuzz/replay_main.cpp: a main() for compilers without libFuzzer: feeds every file named on
// the command line (directories: every file in them) to LLVMFuzzerTestOneInput once.
// Does not mutate inputs or search for new ones; that is the clang build's job.
#include <attn/io/atomic_file.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    if (fs::is_directory(argv[i])) {
      for (const auto& e : fs::directory_iterator(argv[i]))
        if (e.is_regular_file()) inputs.push_back(e.path());
    } else {
      inputs.emplace_back(argv[i]);
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "fuzz_safetensors_replay: no inputs given\n");
    return 1;
  }
  for (const fs::path& p : inputs) {
    const std::vector<std::byte> bytes = attn::io::read_file(p);
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("fuzz_safetensors_replay: %zu inputs replayed\n", inputs.size());
  return 0;
}
