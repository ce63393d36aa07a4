// examples/char_gpt/tokenizer.cpp: see tokenizer.hpp.
#include "tokenizer.hpp"

#include <attn/io/bpe_files.hpp>
#include <attn/io/checkpoint.hpp>
#include <attn/io/hf_tokenizer.hpp>

namespace char_gpt {

namespace data = attn::data;

Tokenizer Tokenizer::make(const std::string& kind, std::string_view corpus, std::int32_t bpe_vocab,
                          const std::string& file) {
  Tokenizer t;
  if (kind == "char") {
    t.tok_ = data::CharTokenizer::from_corpus(corpus);
  } else if (!file.empty()) {
    t.tok_ = attn::io::load_bpe_tokenizer_json(file);
  } else {
    t.tok_ = data::train_bpe(corpus, bpe_vocab);
  }
  if (kind != "char")
    t.bpe_json_ = attn::io::bpe_tokenizer_json(std::get<data::BpeTokenizer>(t.tok_));
  return t;
}

Tokenizer Tokenizer::from_checkpoint(const attn::io::Safetensors& file, const std::string& source) {
  const auto kind = file.metadata.find("tokenizer");
  Tokenizer t;
  if (kind == file.metadata.end() || kind->second == "char") {
    t.tok_ = data::CharTokenizer::from_vocabulary(attn::io::metadata_string(file, "vocab", source));
  } else if (kind->second == "bpe") {
    t.bpe_json_ = attn::io::metadata_string(file, "tokenizer.json", source);
    t.tok_ =
        attn::io::parse_bpe_tokenizer_json(t.bpe_json_, source + " (metadata 'tokenizer.json')");
  } else {
    throw attn::io_error(source + ": metadata 'tokenizer' is '" + kind->second +
                         "', not char or bpe");
  }
  return t;
}

void Tokenizer::save(attn::io::Safetensors& file) const {
  auto& metadata = file.metadata;
  if (const auto* c = std::get_if<data::CharTokenizer>(&tok_)) {
    metadata["vocab"] = c->vocabulary();  // "tokenizer" absent: as before BPE existed
  } else {
    metadata["tokenizer"] = "bpe";
    metadata["tokenizer.json"] = bpe_json_;
  }
}

std::int32_t Tokenizer::size() const {
  return std::visit([](const auto& t) { return t.size(); }, tok_);
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text) const {
  return std::visit([&](const auto& t) { return t.encode(text); }, tok_);
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids) const {
  return std::visit([&](const auto& t) { return t.decode(ids); }, tok_);
}

void Tokenizer::export_hf(const std::string& dir, std::int64_t block) const {
  std::visit([&](const auto& t) { attn::io::hf::save_tokenizer(dir, t, block); }, tok_);
}

}  // namespace char_gpt
