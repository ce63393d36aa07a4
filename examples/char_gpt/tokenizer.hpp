// examples/char_gpt/tokenizer.hpp: char_gpt's tokenizer (--tokenizer): characters (the demo's) or
// byte-level BPE (attn/data/bpe.hpp), made for a new run, kept in its checkpoint's metadata, and
// written beside an --export-hf model. The JSON of the BPE files stays in tokenizer.cpp.
#pragma once

#include <attn/data/bpe.hpp>
#include <attn/data/char_tokenizer.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace attn::io {
struct Safetensors;
}

namespace char_gpt {

class Tokenizer {
 public:
  // A new run's tokenizer. kind "char": the characters of `corpus`; "bpe": read from `file` (a
  // tokenizer.json of byte-level BPE) when it is not empty, else trained on `corpus` to
  // `bpe_vocab` tokens (the 256 bytes and bpe_vocab - 256 merges).
  static Tokenizer make(const std::string& kind, std::string_view corpus, std::int32_t bpe_vocab,
                        const std::string& file);
  // A checkpoint's, from its metadata ("tokenizer" absent or "char": the characters in "vocab";
  // "bpe": the tokenizer.json text in "tokenizer.json"); errors name `source`.
  static Tokenizer from_checkpoint(const attn::io::Safetensors& file, const std::string& source);
  // Writes the metadata from_checkpoint reads into `file`.
  void save(attn::io::Safetensors& file) const;

  const char* kind() const { return is_char() ? "char" : "bpe"; }
  // What a token is, for messages: "characters" or "tokens".
  const char* unit() const { return is_char() ? "characters" : "tokens"; }
  std::int32_t size() const;
  std::vector<std::int32_t> encode(std::string_view text) const;
  std::string decode(std::span<const std::int32_t> ids) const;
  // Writes the Hugging Face tokenizer files into `dir` (attn/io/hf_tokenizer.hpp), for a model of
  // context `block`.
  void export_hf(const std::string& dir, std::int64_t block) const;

 private:
  bool is_char() const { return std::holds_alternative<attn::data::CharTokenizer>(tok_); }
  std::variant<attn::data::CharTokenizer, attn::data::BpeTokenizer> tok_;
  std::string bpe_json_;  // a BPE's tokenizer.json, written into every checkpoint
};

}  // namespace char_gpt
