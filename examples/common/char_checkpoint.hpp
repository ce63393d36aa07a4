// examples/common/char_checkpoint.hpp: reading what the character-level trainers write and read:
// a text corpus, and a char_gpt checkpoint (safetensors with format attn.char_gpt.v1 metadata:
// attention name, vocabulary, GPT config, training settings).
// Does not build the model (the caller picks its type from the "attention" metadata).
#pragma once

#include <attn/io/checkpoint.hpp>
#include <attn/io/io.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace examples {

inline std::string read_text(const std::string& path) {
  const std::vector<std::byte> bytes = attn::io::read_file(path);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// Loads a checkpoint and checks that char_gpt wrote it; throws attn::io_error otherwise.
inline attn::io::Safetensors open_checkpoint(const std::string& path) {
  attn::io::Safetensors file = attn::io::load_safetensors(path);
  const auto it = file.metadata.find("format");
  ATTN_CHECK(it != file.metadata.end() && it->second == "attn.char_gpt.v1", attn::io_error, path,
             ": not a char_gpt checkpoint (metadata 'format' is missing or not attn.char_gpt.v1)");
  return file;
}

}  // namespace examples
