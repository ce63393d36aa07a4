// attn/io/bpe_files.hpp: byte-level BPE tokenizers (attn/data/bpe.hpp) in their files: GPT-2's
// vocab.json + merges.txt, and the tokenizer.json of Hugging Face tokenizers, read and written.
// Does not read other tokenizer types (WordPiece, Unigram, SentencePiece models) nor other
// pre-tokenizers than ByteLevel; included on request (it brings nlohmann_json).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../data/bpe.hpp"
#include "atomic_file.hpp"

namespace attn::io {

// The largest tokenizer file read (GPT-2's vocab.json is 1 MB, tokenizer.json files of 200k-token
// vocabularies about 10 MB).
inline constexpr std::size_t bpe_file_limit = std::size_t{1} << 28;  // 256 MiB

namespace detail::bpe {

using json = nlohmann::json;

// A string for a one-line message: JSON-quoted (newlines and controls escaped), cut at 60 bytes.
inline std::string printable(std::string_view s) {
  std::string q =
      json(std::string(s.substr(0, 60))).dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) q += "...";
  return q;
}

[[noreturn]] inline void fail(const std::filesystem::path& path, const std::string& what) {
  throw io_error(path.string() + ": " + what);
}

inline std::string read_text(const std::filesystem::path& path) {
  const std::vector<std::byte> bytes = read_file(path, bpe_file_limit);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

inline json parse(const std::filesystem::path& path, const std::string& text) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail(path, std::string("not valid JSON (") + e.what() + ")");
  }
}

inline const char* kind(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_float:
      return "a number that is not an integer";
    default:
      return "a number";
  }
}

// vocab.json (or tokenizer.json's model.vocab, named `where`): an object of token -> id, the ids
// 0 .. n-1, each once. Returns the tokens by id.
inline std::vector<std::string> read_vocab(const std::filesystem::path& path, const json& v,
                                           const std::string& where) {
  if (!v.is_object()) fail(path, where + " must be a JSON object of token -> id, found " + kind(v));
  const std::size_t n = v.size();
  std::vector<std::string> tokens(n);
  std::vector<bool> seen(n, false);
  for (const auto& [token, id] : v.items()) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0)
      fail(path, where + ": the id of token " + printable(token) +
                     " must be a non-negative integer, found " +
                     (id.is_number_integer() ? id.dump() : kind(id)));
    const std::int64_t i = id.get<std::int64_t>();
    if (i >= std::int64_t(n))
      fail(path, where + ": token " + printable(token) + " has id " + std::to_string(i) +
                     ", not below the vocabulary's size " + std::to_string(n) +
                     " (ids must be 0 .. size - 1)");
    if (seen[std::size_t(i)])
      fail(path, where + ": tokens " + printable(tokens[std::size_t(i)]) + " and " +
                     printable(token) + " have the same id " + std::to_string(i));
    if (token.empty()) fail(path, where + ": id " + std::to_string(i) + " is an empty token");
    seen[std::size_t(i)] = true;
    tokens[std::size_t(i)] = token;
  }
  return tokens;
}

// A token -> id lookup of `tokens`, for checking merges with messages of their own.
inline std::unordered_map<std::string, std::int32_t> index_of(
    const std::vector<std::string>& tokens) {
  std::unordered_map<std::string, std::int32_t> index;
  for (std::size_t i = 0; i < tokens.size(); ++i) index.emplace(tokens[i], std::int32_t(i));
  return index;
}

// Why (a, b) is not a merge of the vocabulary, or "".
inline std::string merge_problem(const std::unordered_map<std::string, std::int32_t>& index,
                                 const std::string& a, const std::string& b,
                                 const std::string& vocab_name) {
  const std::string merge = printable(a + " " + b);
  for (const std::string* part : {&a, &b})
    if (!index.contains(*part))
      return "the merge " + merge + ": " + printable(*part) + " is not in " + vocab_name;
  if (!index.contains(a + b))
    return "the merge " + merge + " makes " + printable(a + b) + ", which is not in " + vocab_name;
  return {};
}

// One "left right" merge line or string; false when it is not two tokens and one space.
inline bool split_merge(std::string_view line, std::pair<std::string, std::string>& out) {
  const std::size_t space = line.find(' ');
  if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
    return false;
  out = {std::string(line.substr(0, space)), std::string(line.substr(space + 1))};
  return true;
}

inline const json* field(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

inline bool read_bool(const std::filesystem::path& path, const json& object, const char* key,
                      const std::string& where, bool fallback) {
  const json* v = field(object, key);
  if (!v || v->is_null()) return fallback;
  if (!v->is_boolean()) fail(path, where + "." + key + " must be true or false, found " + kind(*v));
  return v->get<bool>();
}

inline std::string type_of(const std::filesystem::path& path, const json& object,
                           const std::string& where) {
  if (!object.is_object()) fail(path, where + " must be an object, found " + kind(object));
  const json* t = field(object, "type");
  if (!t || !t->is_string()) fail(path, where + " has no \"type\" string");
  return t->get<std::string>();
}

}  // namespace detail::bpe

// GPT-2's tokenizer files: vocab.json (token -> id) and merges.txt (an optional "#version" line,
// then one merge a line, "left right", rank = order). Throws io_error naming the file and what is
// wrong: not a regular file, not JSON, not an object of token -> non-negative integer, ids that
// are not 0 .. n-1 each once, a merges line that is not two tokens separated by one space (with
// its line number), a merge whose parts or result are not in the vocabulary.
inline data::BpeTokenizer load_bpe(const std::filesystem::path& vocab_json,
                                   const std::filesystem::path& merges_txt) {
  namespace d = detail::bpe;
  std::vector<std::string> tokens =
      d::read_vocab(vocab_json, d::parse(vocab_json, d::read_text(vocab_json)), "the vocabulary");
  const auto index = d::index_of(tokens);
  const std::string text = d::read_text(merges_txt);
  std::vector<std::pair<std::string, std::string>> merges;
  std::size_t line_no = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.ends_with('\r')) line.remove_suffix(1);  // Rust's lines() takes CRLF too
    if (line.starts_with("#version")) continue;
    std::pair<std::string, std::string> merge;
    if (!d::split_merge(line, merge))
      d::fail(merges_txt, "line " + std::to_string(line_no) +
                              ": expected two tokens separated by one space, found " +
                              d::printable(line));
    if (const std::string p =
            d::merge_problem(index, merge.first, merge.second, vocab_json.filename().string());
        !p.empty())
      d::fail(merges_txt, "line " + std::to_string(line_no) + ": " + p);
    merges.push_back(std::move(merge));
  }
  return data::BpeTokenizer(std::move(tokens), merges);
}

// The tokenizer.json of Hugging Face tokenizers for a GPT-2 style tokenizer: model.type "BPE"
// (vocab, merges as "left right" strings or [left, right] pairs, ignore_merges), pre_tokenizer
// ByteLevel (add_prefix_space, use_regex), no normalizer, decoder and post_processor ByteLevel or
// null, added_tokens without single_word/lstrip/rstrip. truncation and padding are not read (attn's
// encode neither truncates nor pads). Throws io_error naming the file and the field for anything
// else: a model that is not BPE, dropout, a continuing-subword prefix or end-of-word suffix,
// byte_fallback, an unk_token with a byte missing from the vocabulary, another pre-tokenizer or
// normalizer, and the errors of load_bpe with the merge's index in model.merges.
// The same, from the text of such a file; `path` names it in the messages (a checkpoint that holds
// a tokenizer.json passes its own name).
inline data::BpeTokenizer parse_bpe_tokenizer_json(const std::string& text,
                                                   const std::filesystem::path& path) {
  namespace d = detail::bpe;
  const d::json j = d::parse(path, text);
  if (!j.is_object()) d::fail(path, std::string("must be a JSON object, found ") + d::kind(j));
  const d::json* model = d::field(j, "model");
  if (!model) d::fail(path, "has no \"model\"");
  const std::string type = d::type_of(path, *model, "model");
  if (type != "BPE")
    d::fail(path, "model.type is " + d::printable(type) + "; attn reads byte-level BPE only");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const d::json* v = d::field(*model, key);
    if (v && !v->is_null() && !(v->is_string() && v->get<std::string>().empty()))
      d::fail(path, std::string("model.") + key + " is " + v->dump() +
                        "; byte-level BPE has none (attn does not apply one)");
  }
  if (const d::json* v = d::field(*model, "dropout");
      v && !v->is_null() && !(v->is_number() && v->get<double>() == 0.0))
    d::fail(path, "model.dropout is " + v->dump() + "; attn encodes without dropout");
  if (d::read_bool(path, *model, "byte_fallback", "model", false))
    d::fail(path, "model.byte_fallback is true; byte-level BPE does not use it");
  data::BpeOptions options;
  options.ignore_merges = d::read_bool(path, *model, "ignore_merges", "model", false);

  const d::json* vocab = d::field(*model, "vocab");
  if (!vocab) d::fail(path, "model has no \"vocab\"");
  std::vector<std::string> tokens = d::read_vocab(path, *vocab, "model.vocab");
  const auto index = d::index_of(tokens);
  if (const d::json* unk = d::field(*model, "unk_token"); unk && !unk->is_null()) {
    for (unsigned b = 0; b < 256; ++b) {
      std::string symbol;
      data::detail::append_utf8(symbol, data::byte_to_unicode[b]);
      if (!index.contains(symbol))
        d::fail(path, "model.unk_token is set and the byte symbol " + d::printable(symbol) +
                          " is not in the vocabulary: attn would not use the unknown token");
    }
  }

  const d::json* merges_json = d::field(*model, "merges");
  if (!merges_json || !merges_json->is_array())
    d::fail(path, std::string("model.merges must be an array, found ") +
                      (merges_json ? d::kind(*merges_json) : "nothing"));
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merges_json->size());
  for (std::size_t k = 0; k < merges_json->size(); ++k) {
    const d::json& m = (*merges_json)[k];
    const std::string where = "model.merges[" + std::to_string(k) + "]";
    std::pair<std::string, std::string> merge;
    if (m.is_string()) {
      if (!d::split_merge(m.get<std::string>(), merge))
        d::fail(path, where + ": expected two tokens separated by one space, found " +
                          d::printable(m.get<std::string>()));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merge = {m[0].get<std::string>(), m[1].get<std::string>()};
    } else {
      d::fail(path, where + ": expected \"left right\" or [left, right], found " + m.dump());
    }
    if (const std::string p = d::merge_problem(index, merge.first, merge.second, "model.vocab");
        !p.empty())
      d::fail(path, where + ": " + p);
    merges.push_back(std::move(merge));
  }

  if (const d::json* n = d::field(j, "normalizer"); n && !n->is_null())
    d::fail(path, "normalizer " + d::printable(d::type_of(path, *n, "normalizer")) +
                      " is not supported (GPT-2 has none)");
  const d::json* pre = d::field(j, "pre_tokenizer");
  if (!pre || pre->is_null())
    d::fail(path, "has no pre_tokenizer (byte-level BPE needs ByteLevel)");
  if (const std::string t = d::type_of(path, *pre, "pre_tokenizer"); t != "ByteLevel")
    d::fail(path, "pre_tokenizer " + d::printable(t) + " is not supported (attn reads ByteLevel)");
  options.add_prefix_space =
      d::read_bool(path, *pre, "add_prefix_space", "pre_tokenizer", options.add_prefix_space);
  options.use_regex = d::read_bool(path, *pre, "use_regex", "pre_tokenizer", true);
  for (const char* key : {"decoder", "post_processor"}) {
    if (const d::json* v = d::field(j, key); v && !v->is_null())
      if (const std::string t = d::type_of(path, *v, key); t != "ByteLevel")
        d::fail(path, std::string(key) + " " + d::printable(t) +
                          " is not supported (attn's is ByteLevel's)");
  }

  std::vector<data::AddedToken> added;
  if (const d::json* list = d::field(j, "added_tokens"); list && !list->is_null()) {
    if (!list->is_array())
      d::fail(path, std::string("added_tokens must be an array, found ") + d::kind(*list));
    for (std::size_t k = 0; k < list->size(); ++k) {
      const d::json& a = (*list)[k];
      const std::string where = "added_tokens[" + std::to_string(k) + "]";
      if (!a.is_object()) d::fail(path, where + " must be an object, found " + d::kind(a));
      const d::json* id = d::field(a, "id");
      const d::json* content = d::field(a, "content");
      if (!id || !id->is_number_integer() || id->get<std::int64_t>() < 0 ||
          id->get<std::int64_t>() >= std::numeric_limits<std::int32_t>::max())
        d::fail(path, where + ".id must be a non-negative integer");
      if (!content || !content->is_string() || content->get<std::string>().empty())
        d::fail(path, where + ".content must be a non-empty string");
      for (const char* flag : {"single_word", "lstrip", "rstrip"})
        if (d::read_bool(path, a, flag, where, false))
          d::fail(path, where + " (" + d::printable(content->get<std::string>()) + ") has " + flag +
                            " true, which attn does not implement");
      added.push_back({content->get<std::string>(), std::int32_t(id->get<std::int64_t>()),
                       d::read_bool(path, a, "special", where, false)});
    }
  }
  try {
    return data::BpeTokenizer(std::move(tokens), merges, options, std::move(added));
  } catch (const value_error& e) {
    d::fail(path, e.what());
  }
}

inline data::BpeTokenizer load_bpe_tokenizer_json(const std::filesystem::path& path) {
  return parse_bpe_tokenizer_json(detail::bpe::read_text(path), path);
}

namespace detail::bpe {

// Makes the folder `dir` where it is missing; io_error "`operation`: cannot create the folder ...".
inline void make_folder(const std::filesystem::path& dir, const char* operation) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw io_error(std::string(operation) + ": cannot create the folder '" + dir.string() +
                   "': " + ec.message());
}

// A vocabulary object, token -> id, in id order: token_of(id) for id 0 .. n-1, all distinct.
template <class TokenOf>
nlohmann::ordered_json vocab_json(std::int32_t n, TokenOf&& token_of) {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  // ordered_map is a vector of pairs: emplace_back appends without the linear search for an
  // existing key that operator[] does (the tokens are distinct).
  auto& entries = vocab.get_ref<nlohmann::ordered_json::object_t&>();
  entries.reserve(std::size_t(n));
  for (std::int32_t id = 0; id < n; ++id) entries.emplace_back(token_of(id), id);
  return vocab;
}

// vocab.json of `tok`.
inline nlohmann::ordered_json vocab_json(const data::BpeTokenizer& tok) {
  return vocab_json(tok.vocabulary_size(), [&](std::int32_t id) { return tok.token(id); });
}

// A tokenizer.json of a BPE model, in the order and with the defaults Hugging Face tokenizers
// writes: no normalizer, post-processor, truncation or padding.
inline nlohmann::ordered_json document(nlohmann::ordered_json added,
                                       nlohmann::ordered_json pre_tokenizer,
                                       nlohmann::ordered_json decoder, nlohmann::ordered_json vocab,
                                       nlohmann::ordered_json merges, bool ignore_merges) {
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = std::move(added);
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = std::move(pre_tokenizer);
  j["post_processor"] = nullptr;
  j["decoder"] = std::move(decoder);
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", ignore_merges},
                {"vocab", std::move(vocab)},
                {"merges", std::move(merges)}};
  return j;
}

// tokenizer.json as Hugging Face tokenizers writes it, around `vocab` (vocab_json's).
inline nlohmann::ordered_json tokenizer_json(const data::BpeTokenizer& tok,
                                             nlohmann::ordered_json vocab) {
  nlohmann::ordered_json merges = nlohmann::ordered_json::array();
  for (const auto& [l, r] : tok.merges()) merges.push_back({tok.token(l), tok.token(r)});
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (const data::AddedToken& a : tok.added_tokens())
    added.push_back({{"id", a.id},
                     {"content", a.content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", a.special}});
  const data::BpeOptions& o = tok.options();
  const auto byte_level = [&](bool prefix) {
    return nlohmann::ordered_json{{"type", "ByteLevel"},
                                  {"add_prefix_space", prefix},
                                  {"trim_offsets", true},
                                  {"use_regex", o.use_regex}};
  };
  return document(std::move(added), byte_level(o.add_prefix_space), byte_level(true),
                  std::move(vocab), std::move(merges), o.ignore_merges);
}

}  // namespace detail::bpe

// `tok` as the text of a tokenizer.json (what save_bpe writes there; parse_bpe_tokenizer_json
// reads it back).
inline std::string bpe_tokenizer_json(const data::BpeTokenizer& tok) {
  return detail::bpe::tokenizer_json(tok, detail::bpe::vocab_json(tok)).dump(2);
}

// Writes `tok` into `dir` (created when missing) as vocab.json (compact, ids in order),
// merges.txt ("#version: 0.2" then one merge a line) and tokenizer.json (as Hugging Face
// tokenizers writes it), each atomically (attn/io/atomic_file.hpp). Hugging Face tokenizers
// (Tokenizer.from_file) and transformers (GPT2TokenizerFast.from_pretrained(dir)) load the folder.
// Throws io_error when the folder cannot be made, a file cannot be written, or a merge's token
// holds a space or newline (merges.txt cannot say it).
inline void save_bpe(const data::BpeTokenizer& tok, const std::filesystem::path& dir) {
  namespace d = detail::bpe;
  d::make_folder(dir, "save_bpe");
  std::string merges_txt = "#version: 0.2\n";
  for (const auto& [l, r] : tok.merges()) {
    const std::string& a = tok.token(l);
    const std::string& b = tok.token(r);
    for (const std::string* t : {&a, &b})
      if (t->find_first_of(" \n\r") != std::string::npos)
        d::fail(dir / "merges.txt",
                "the token " + d::printable(*t) + " of a merge holds a space or newline");
    merges_txt += a + " " + b + "\n";
  }
  nlohmann::ordered_json vocab = d::vocab_json(tok);
  write_file_atomically(dir / "vocab.json", vocab.dump());
  write_file_atomically(dir / "merges.txt", merges_txt);
  write_file_atomically(dir / "tokenizer.json", d::tokenizer_json(tok, std::move(vocab)).dump(2));
}

}  // namespace attn::io
