// examples/common/char_checkpoint.hpp: reading what the example trainers write: a text corpus,
// and a checkpoint (safetensors) checked by its "format" metadata; char_gpt's is attn.char_gpt.v1
// (attention name, vocabulary, GPT config, training settings).
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

// The checkpoint at `path`, checked to be one of `program`'s: its metadata "format" must be
// `format` (io_error otherwise, naming the file).
inline attn::io::Safetensors open_checkpoint(const std::string& path, const std::string& format,
                                             const std::string& program) {
  attn::io::Safetensors file = attn::io::load_safetensors(path);
  const auto it = file.metadata.find("format");
  ATTN_CHECK(it != file.metadata.end() && it->second == format, attn::io_error, path, ": not a ",
             program, " checkpoint (metadata 'format' is missing or not ", format, ")");
  return file;
}

// A char_gpt checkpoint (format attn.char_gpt.v1).
inline attn::io::Safetensors open_checkpoint(const std::string& path) {
  return open_checkpoint(path, "attn.char_gpt.v1", "char_gpt");
}

}  // namespace examples
