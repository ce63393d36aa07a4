// examples/common/char_checkpoint.hpp: reading what the example trainers read and write: a text
// corpus (checked: not empty, UTF-8), and a checkpoint (safetensors) checked by its "format"
// metadata; char_gpt's is attn.char_gpt.v1 (attention name, vocabulary, GPT config, training
// settings).
// Does not build the model (the caller picks its type from the "attention" metadata).
#pragma once

#include <attn/data/char_tokenizer.hpp>
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

// Returns f(); a value_error it throws (a tokenizer's "invalid UTF-8 at byte 12", "character 'é'
// is not in the vocabulary") comes out prefixed with `where`: the file or option it is about.
template <class F>
auto about(const std::string& where, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const attn::value_error& e) {
    throw attn::value_error(where + ": " + e.what());
  }
}

// A text to train or evaluate on: read_text, refused when it is empty or not UTF-8 (the message
// names the file).
// At most 1 GiB, so a device such as /dev/zero fails with a message, not by exhausting memory.
inline std::string read_corpus(const std::string& path) {
  const std::vector<std::byte> bytes = attn::io::read_file(path, std::size_t{1} << 30);
  std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  ATTN_CHECK(!text.empty(), attn::value_error, path, " is empty");
  about(path, [&] { return attn::data::CharTokenizer::from_corpus(text); });  // UTF-8 check
  return text;
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
