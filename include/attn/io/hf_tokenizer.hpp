// attn/io/hf_tokenizer.hpp: a model's tokenizer in the Hugging Face format, beside the model that
// attn/io/hf.hpp saves: tokenizer.json (with vocab.json and merges.txt for byte-level BPE) and a
// tokenizer_config.json, so that transformers' AutoTokenizer.from_pretrained(directory) encodes
// and decodes text exactly as attn's tokenizer does, with no code of ours.
// Does not write special tokens attn's tokenizers do not have, nor read these files back (a
// tokenizer.json of byte-level BPE reads with io::load_bpe_tokenizer_json).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>

#include "../core/error.hpp"
#include "../data/bpe.hpp"
#include "../data/char_tokenizer.hpp"
#include "atomic_file.hpp"
#include "bpe_files.hpp"

namespace attn::io::hf {

namespace detail {

// tokenizer_config.json: the fast tokenizer of tokenizer.json as it is (PreTrainedTokenizerFast:
// transformers adds no beginning or end token of its own), with decode's clean-up of spaces before
// punctuation off, so that decode gives back the tokens' text byte for byte.
inline void write_tokenizer_config(const std::filesystem::path& dir,
                                   std::int64_t model_max_length) {
  ATTN_CHECK(model_max_length > 0, value_error, "hf::save_tokenizer: model_max_length is ",
             model_max_length, ", not positive");
  nlohmann::ordered_json c;
  c["tokenizer_class"] = "PreTrainedTokenizerFast";
  c["model_max_length"] = model_max_length;
  c["clean_up_tokenization_spaces"] = false;
  write_file_atomically(dir / "tokenizer_config.json", c.dump(2) + "\n");
}

}  // namespace detail

// Writes byte-level BPE `tok` into `dir` (created when missing): vocab.json, merges.txt and
// tokenizer.json as io::save_bpe writes them, and tokenizer_config.json. model_max_length: the
// model's context (block size), which transformers warns about exceeding. Throws io_error when a
// file cannot be written.
inline void save_tokenizer(const std::filesystem::path& dir, const data::BpeTokenizer& tok,
                           std::int64_t model_max_length) {
  save_bpe(tok, dir);  // makes the folder
  detail::write_tokenizer_config(dir, model_max_length);
}

// Writes character-level `tok` into `dir` (created when missing) as a tokenizer.json that
// Hugging Face tokenizers runs to the same ids: a BPE model whose vocabulary is the characters
// (id = attn's id) and that has no merges, with no normalizer and no pre-tokenizer, so each
// character of the text is one token, and the Fuse decoder, which joins the tokens without
// spaces. A character outside the vocabulary is dropped by tokenizers where attn's encode throws.
inline void save_tokenizer(const std::filesystem::path& dir, const data::CharTokenizer& tok,
                           std::int64_t model_max_length) {
  namespace d = io::detail::bpe;
  d::make_folder(dir, "hf::save_tokenizer");
  nlohmann::ordered_json vocab = d::vocab_json(tok.size(), [&](std::int32_t id) {
    const std::int32_t ids[1] = {id};
    return tok.decode(ids);
  });
  const nlohmann::ordered_json j =
      d::document(nlohmann::ordered_json::array(), nullptr, {{"type", "Fuse"}}, std::move(vocab),
                  nlohmann::ordered_json::array(), false);
  write_file_atomically(dir / "tokenizer.json", j.dump(2));
  detail::write_tokenizer_config(dir, model_max_length);
}

}  // namespace attn::io::hf
