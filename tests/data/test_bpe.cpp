// Byte-level BPE (attn/data/bpe.hpp, attn/io/bpe_files.hpp): the byte alphabet, the character
// classes, GPT-2's pre-tokenizer on hand-written cases and on invalid UTF-8, encodings and merges
// equal to Hugging Face tokenizers' (data/bpe_reference, written by tests/data/bpe_reference.py),
// round trips on any bytes, training, hostile files, save then load.
#include <doctest/doctest.h>

#include <attn/data/bpe.hpp>
#include <attn/io/bpe_files.hpp>
#include <attn/io/hf_tokenizer.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "../test_files.hpp"
#include "../test_util.hpp"

namespace {

namespace fs = std::filesystem;
using attn::data::BpeTokenizer;
using attn::data::char_class;
using attn::data::CharClass;
using attn::data::gpt2_pieces;
using attn::test::message_of;

const fs::path reference_dir = fs::path(ATTN_TESTS_SOURCE_DIR) / ".." / "data" / "bpe_reference";
const char* const regenerate = "build/oracle-venv/bin/python tests/data/bpe_reference.py";

std::string from_hex(const std::string& hex) {
  if (hex == "-") return "";
  std::string s;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    s += char(std::stoi(hex.substr(i, 2), nullptr, 16));
  return s;
}

// data/bpe_reference/reference.txt (format in tests/data/bpe_reference.py).
struct Reference {
  std::vector<std::string> names;  // in file order
  std::map<std::string, std::string> text;
  std::map<std::string, std::vector<std::size_t>> pieces, prefixed;
  std::map<std::string, std::vector<std::int32_t>> ids, ids_small;
  std::int32_t small_vocab = 0;
  std::vector<std::pair<std::string, std::string>> small_merges;
};

const Reference& reference() {
  static const Reference r = [] {
    Reference r;
    std::ifstream in(reference_dir / "reference.txt");
    REQUIRE_MESSAGE(in, "cannot open data/bpe_reference/reference.txt (", regenerate, ")");
    std::string line;
    std::getline(in, line);
    REQUIRE(line == "attn-bpe-reference 1");
    std::size_t records = 0;
    bool ended = false;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream f(line);
      std::string kind, name;
      f >> kind;
      if (kind == "end") {
        std::size_t n = 0;
        f >> n;
        REQUIRE(n == records);
        ended = true;
        break;
      }
      ++records;
      if (kind == "train_small") {
        f >> r.small_vocab;
      } else if (kind == "merge") {
        std::string a, b;
        f >> a >> b;
        r.small_merges.emplace_back(from_hex(a), from_hex(b));
      } else if (kind == "text") {
        std::string hex;
        f >> name >> hex;
        r.names.push_back(name);
        r.text[name] = from_hex(hex);
      } else if (kind == "pieces" || kind == "prefixed") {
        f >> name;
        auto& v = (kind == "pieces" ? r.pieces : r.prefixed)[name];
        for (std::size_t n; f >> n;) v.push_back(n);
      } else if (kind == "ids" || kind == "ids_small") {
        f >> name;
        auto& v = (kind == "ids" ? r.ids : r.ids_small)[name];
        for (std::int32_t id; f >> id;) v.push_back(id);
      } else {
        FAIL("unknown record '", kind, "' in reference.txt");
      }
    }
    REQUIRE_MESSAGE(ended, "reference.txt has no 'end' line (truncated?)");
    return r;
  }();
  return r;
}

std::vector<std::size_t> lengths(const std::vector<std::string_view>& pieces) {
  std::vector<std::size_t> n;
  for (std::string_view p : pieces) n.push_back(p.size());
  return n;
}

std::string tinyshakespeare(std::size_t bytes) {
  std::ifstream in(fs::path(ATTN_TESTS_SOURCE_DIR) / ".." / "data" / "tinyshakespeare.txt",
                   std::ios::binary);
  std::string s(bytes, '\0');
  in.read(s.data(), std::streamsize(bytes));
  REQUIRE(std::size_t(in.gcount()) == bytes);
  return s;
}

std::string random_bytes(std::mt19937& rng, std::size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = char(rng() & 0xFF);
  return s;
}

}  // namespace

TEST_CASE("bpe: bytes as printable code points (GPT-2's bytes_to_unicode)") {
  using attn::data::byte_to_unicode;
  using attn::data::unicode_to_byte;
  CHECK(byte_to_unicode[' '] == 0x120);   // 'Ġ'
  CHECK(byte_to_unicode['\n'] == 0x10A);  // 'Ċ'
  CHECK(byte_to_unicode[0] == 0x100);
  CHECK(byte_to_unicode[0x7F] == 0x121);
  CHECK(byte_to_unicode[0xA0] == 0x142);
  CHECK(byte_to_unicode[0xAD] == 0x143);
  CHECK(byte_to_unicode['!'] == '!');
  CHECK(byte_to_unicode[0xFF] == 0xFF);
  for (unsigned b = 0; b < 256; ++b) CHECK(unicode_to_byte(byte_to_unicode[b]) == int(b));
  CHECK(unicode_to_byte(' ') == -1);
  CHECK(unicode_to_byte(0x144) == -1);
  CHECK(attn::data::to_byte_level("hi \n\xFF") == "hi\xC4\xA0\xC4\x8A\xC3\xBF");
}

TEST_CASE("bpe: character classes of Unicode 16.0") {
  CHECK(char_class('a') == CharClass::letter);
  CHECK(char_class('1') == CharClass::number);
  CHECK(char_class(' ') == CharClass::space);
  CHECK(char_class('!') == CharClass::other);
  CHECK(char_class('\'') == CharClass::other);
  CHECK(char_class(0x0B) == CharClass::space);    // vertical tab
  CHECK(char_class(0x1C) == CharClass::other);    // Python's isspace says yes, \s says no
  CHECK(char_class(0x85) == CharClass::space);    // next line
  CHECK(char_class(0xA0) == CharClass::space);    // no-break space
  CHECK(char_class(0x2028) == CharClass::space);  // line separator
  CHECK(char_class(0x3000) == CharClass::space);
  CHECK(char_class(0x200B) == CharClass::other);  // zero width space: format, not a space
  CHECK(char_class(0x0301) == CharClass::other);  // combining acute: a mark
  CHECK(char_class(0x093F) == CharClass::other);  // Devanagari vowel sign i (Mc)
  CHECK(char_class(0x0663) == CharClass::number);
  CHECK(char_class(0x00BD) == CharClass::number);  // ½ (No)
  CHECK(char_class(0x216B) == CharClass::number);  // Ⅻ (Nl)
  CHECK(char_class(0x4F60) == CharClass::letter);
  CHECK(char_class(0x1F600) == CharClass::other);
  CHECK(char_class(0x1C89) == CharClass::letter);  // new in Unicode 16.0
  CHECK(char_class(0x088F) == CharClass::other);   // a letter from Unicode 17.0 on
  CHECK(char_class(0x323AF) == CharClass::letter);
  CHECK(char_class(0xE0041) == CharClass::other);
  CHECK(char_class(0x10FFFF) == CharClass::other);
}

TEST_CASE("bpe: GPT-2's pre-tokenizer on hand-written cases") {
  using V = std::vector<std::string_view>;
  CHECK(gpt2_pieces("Hello world") == V{"Hello", " world"});
  CHECK(gpt2_pieces("a  b") == V{"a", " ", " b"});
  CHECK(gpt2_pieces("x   ") == V{"x", "   "});
  CHECK(gpt2_pieces("x \n\ny") == V{"x", " \n", "\n", "y"});
  CHECK(gpt2_pieces("\ty") == V{"\t", "y"});
  CHECK(gpt2_pieces("I'm here's") == V{"I", "'m", " here", "'s"});
  CHECK(gpt2_pieces("we'll they're I've he'd") ==
        V{"we", "'ll", " they", "'re", " I", "'ve", " he", "'d"});
  CHECK(gpt2_pieces("IT'S") == V{"IT", "'", "S"});
  CHECK(gpt2_pieces(" 's") == V{" '", "s"});
  CHECK(gpt2_pieces("!'s") == V{"!'", "s"});
  CHECK(gpt2_pieces("'sx") == V{"'s", "x"});
  CHECK(gpt2_pieces("123 4567x") == V{"123", " 4567", "x"});
  CHECK(gpt2_pieces("hello!!! world") == V{"hello", "!!!", " world"});
  CHECK(gpt2_pieces("e\xCC\x81") == V{"e", "\xCC\x81"});  // a combining mark is other
  CHECK(gpt2_pieces("a\xC2\xA0"
                    "b") == V{"a", "\xC2\xA0", "b"});  // NBSP: space, not ' '
  CHECK(gpt2_pieces("").empty());
  // Invalid UTF-8: each byte outside a well-formed sequence is one character of class other.
  CHECK(gpt2_pieces("a\xFF b") == V{"a", "\xFF", " b"});
  CHECK(gpt2_pieces("\xFF\xFE!x") == V{"\xFF\xFE!", "x"});
  CHECK(gpt2_pieces(" \xFF") == V{" \xFF"});
  CHECK(gpt2_pieces("\xE2\x82"
                    "a") == V{"\xE2\x82", "a"});                        // truncated sequence
  CHECK(gpt2_pieces("x\xED\xA0\x80y") == V{"x", "\xED\xA0\x80", "y"});  // a surrogate
  CHECK(gpt2_pieces("\xC0\x80"
                    "a") == V{"\xC0\x80", "a"});                    // overlong NUL
  CHECK(gpt2_pieces("\xF4\x90\x80\x80") == V{"\xF4\x90\x80\x80"});  // above U+10FFFF
  CHECK(gpt2_pieces("\xE2\x82\xAC"
                    "5") == V{"\xE2\x82\xAC", "5"});  // '€' itself is valid
}

TEST_CASE("bpe: invalid bytes split where U+FFFD would") {
  // For random byte strings, the pieces' boundaries are those of the same text with each invalid
  // byte replaced by U+FFFD (EF BF BD): attn's rule for text that is not UTF-8.
  std::mt19937 rng(51);
  const std::string atoms[] = {"a",        " ",    "1",           "!",
                               "'",        "s",    "\n",          "\xC3\xA9",
                               "\xFF",     "\x80", "\xE2\x82",    "\xED\xA0\x80",
                               "\xC0\xAF", "  ",   "\xE2\x80\xA8"};
  for (int trial = 0; trial < 400; ++trial) {
    std::string x;
    for (std::size_t n = rng() % 12; n > 0; --n) x += atoms[rng() % std::size(atoms)];
    std::string replaced;
    std::vector<std::size_t> at;  // at[i]: where byte i of x starts in `replaced`
    for (std::size_t i = 0; i < x.size();) {
      const auto c = attn::data::detail::char_at(x, i);
      const bool invalid = c.length == 1 && static_cast<unsigned char>(x[i]) >= 0x80;
      for (std::size_t k = 0; k < c.length; ++k) at.push_back(replaced.size() + k);
      replaced += invalid ? std::string("\xEF\xBF\xBD") : x.substr(i, c.length);
      i += c.length;
    }
    at.push_back(replaced.size());
    std::vector<std::size_t> cuts, cuts_replaced;
    std::size_t pos = 0;
    for (std::string_view p : gpt2_pieces(x)) cuts.push_back(at[pos += p.size()]);
    pos = 0;
    for (std::string_view p : gpt2_pieces(replaced)) cuts_replaced.push_back(pos += p.size());
    CHECK_MESSAGE(cuts == cuts_replaced, "text (hex) of trial ", trial);
  }
}

TEST_CASE("bpe: pre-tokenizer pieces equal Hugging Face tokenizers' (reference texts)") {
  const Reference& r = reference();
  REQUIRE(r.names.size() > 150);
  for (const std::string& name : r.names) {
    const std::string& text = r.text.at(name);
    CHECK_MESSAGE(lengths(gpt2_pieces(text)) == r.pieces.at(name), name);
    const std::string prefixed = text.empty() || text[0] == ' ' ? text : " " + text;
    CHECK_MESSAGE(lengths(gpt2_pieces(prefixed)) == r.prefixed.at(name), name);
  }
}

TEST_CASE("bpe: encodings equal Hugging Face tokenizers' (both file formats), decode inverts") {
  const Reference& r = reference();
  const BpeTokenizer gpt2_files =
      attn::io::load_bpe(reference_dir / "vocab.json", reference_dir / "merges.txt");
  const BpeTokenizer json_file =
      attn::io::load_bpe_tokenizer_json(reference_dir / "tokenizer.json");
  CHECK(gpt2_files.size() == 1000);
  CHECK(gpt2_files.merges().size() == 744);
  CHECK(json_file.merges() == gpt2_files.merges());
  for (const std::string& name : r.names) {
    const std::string& text = r.text.at(name);
    const std::vector<std::int32_t> ids = gpt2_files.encode(text);
    CHECK_MESSAGE(ids == r.ids.at(name), name);
    CHECK_MESSAGE(json_file.encode(text) == ids, name);
    CHECK_MESSAGE(gpt2_files.decode(ids) == text, name);
  }
}

TEST_CASE("bpe: the fast merge equals the plain definition, long pieces too") {
  const BpeTokenizer tok =
      attn::io::load_bpe(reference_dir / "vocab.json", reference_dir / "merges.txt");
  std::mt19937 rng(7);
  const char letters[] = "ethaosinr  ";
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t n = trial < 100 ? rng() % 16 : rng() % 400;
    std::string piece;
    for (std::size_t i = 0; i < n; ++i) piece += letters[rng() % (sizeof(letters) - 1)];
    std::vector<std::int32_t> fast;
    tok.encode_piece(piece, fast);
    CHECK_MESSAGE(fast == tok.encode_piece_reference(piece), "piece '", piece, "'");
    CHECK(tok.decode(fast) == piece);
  }
}

TEST_CASE("bpe: a long text (the piece cache) encodes as its pieces one by one") {
  const BpeTokenizer tok =
      attn::io::load_bpe(reference_dir / "vocab.json", reference_dir / "merges.txt");
  std::string numbers;  // 70,000 distinct pieces: the cache is emptied once on the way
  for (int i = 0; i < 70000; ++i) {  // appended piece by piece: g++ 12 warns on " " + string
    numbers += ' ';
    numbers += std::to_string(i * 7919 % 1000003);
    numbers += 'x';
  }
  for (const std::string& text : {tinyshakespeare(50000), numbers}) {
    std::vector<std::int32_t> one_by_one;
    for (std::string_view piece : gpt2_pieces(text)) tok.encode_piece(piece, one_by_one);
    CHECK(tok.encode(text) == one_by_one);
  }
}

TEST_CASE("bpe: decode(encode(x)) == x for any bytes") {
  const BpeTokenizer tok =
      attn::io::load_bpe(reference_dir / "vocab.json", reference_dir / "merges.txt");
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    const std::string x = random_bytes(rng, rng() % 200);
    CHECK(tok.decode(tok.encode(x)) == x);
  }
  const std::vector<std::string> odd = {"\xFF\xFE",   "caf\xC3",     "\xED\xA0\x80\xED\xB0\x80",
                                        "\xC0\x80 a", "end\xE2\x82", std::string(3, '\0')};
  for (const std::string& x : odd) {
    CHECK(tok.decode(tok.encode(x)) == x);
  }
}

TEST_CASE("bpe: training gives the merges of Hugging Face's BpeTrainer") {
  const BpeTokenizer reference_tok =
      attn::io::load_bpe(reference_dir / "vocab.json", reference_dir / "merges.txt");
  SUBCASE("tinyshakespeare's first 100,000 bytes, vocabulary 1000") {
    const BpeTokenizer tok = attn::data::train_bpe(tinyshakespeare(100000), 1000);
    REQUIRE(tok.size() == reference_tok.size());
    for (std::int32_t id = 0; id < tok.size(); ++id)
      CHECK_MESSAGE(tok.token(id) == reference_tok.token(id), "id ", id);
    CHECK(tok.merges() == reference_tok.merges());
  }
  SUBCASE("the test texts (non-Latin scripts, many ties), vocabulary 420") {
    const Reference& r = reference();
    std::vector<std::string_view> texts;
    for (const std::string& name : r.names)
      if (!name.starts_with("fuzz")) texts.push_back(r.text.at(name));
    const BpeTokenizer tok = attn::data::train_bpe(texts, r.small_vocab);
    CHECK(tok.size() == r.small_vocab);
    REQUIRE(tok.merges().size() == r.small_merges.size());
    for (std::size_t k = 0; k < r.small_merges.size(); ++k) {
      const auto [l, rr] = tok.merges()[k];
      CHECK_MESSAGE(tok.token(l) == r.small_merges[k].first, "merge ", k);
      CHECK_MESSAGE(tok.token(rr) == r.small_merges[k].second, "merge ", k);
    }
    for (const std::string& name : r.names)
      CHECK_MESSAGE(tok.encode(r.text.at(name)) == r.ids_small.at(name), name);
  }
  CHECK(message_of([] { attn::data::train_bpe("abc", 255); }) ==
        "train_bpe: vocab_size is 255, below the 256 byte tokens it starts from");
  // Text that is not UTF-8 trains too (each byte is a byte token).
  const BpeTokenizer odd = attn::data::train_bpe("\xFF\xFE\xFF\xFE \xFF\xFE", 258);
  CHECK(odd.size() == 258);
  CHECK(odd.encode("\xFF\xFE").size() == 1);
}

TEST_CASE("bpe: save then load gives the same tokenizer; Hugging Face's own files back") {
  const fs::path dir = attn::test::fresh_dir("attn_bpe_", "save");
  const BpeTokenizer tok = attn::data::train_bpe(tinyshakespeare(20000), 400);
  attn::io::save_bpe(tok, dir / "tok");
  const BpeTokenizer a = attn::io::load_bpe(dir / "tok" / "vocab.json", dir / "tok" / "merges.txt");
  const BpeTokenizer b = attn::io::load_bpe_tokenizer_json(dir / "tok" / "tokenizer.json");
  for (const BpeTokenizer* t : {&a, &b}) {
    REQUIRE(t->size() == tok.size());
    for (std::int32_t id = 0; id < tok.size(); ++id) CHECK(t->token(id) == tok.token(id));
    CHECK(t->merges() == tok.merges());
  }
  const std::string text = tinyshakespeare(30000).substr(20000);
  CHECK(a.encode(text) == tok.encode(text));
  // The tokenizer.json text alone (as a checkpoint keeps it), read back under the name given.
  const std::string json_text = attn::io::bpe_tokenizer_json(tok);
  CHECK(json_text == attn::test::read_text(dir / "tok" / "tokenizer.json"));
  const BpeTokenizer c = attn::io::parse_bpe_tokenizer_json(json_text, "run/checkpoint");
  CHECK(c.encode(text) == tok.encode(text));
  CHECK(message_of([&] {
          attn::io::parse_bpe_tokenizer_json("{", "run/checkpoint");
        }).starts_with("run/checkpoint: not valid JSON"));
  CHECK(message_of([&] { attn::io::save_bpe(tok, dir / "tok" / "vocab.json"); })
            .starts_with("save_bpe: cannot create the folder '" +
                         (dir / "tok" / "vocab.json").string() + "': "));
  // The reference folder, loaded and saved, is what Hugging Face wrote, byte for byte.
  const BpeTokenizer ref = attn::io::load_bpe_tokenizer_json(reference_dir / "tokenizer.json");
  attn::io::save_bpe(ref, dir / "ref");
  for (const char* file : {"vocab.json", "merges.txt", "tokenizer.json"})
    CHECK_MESSAGE(
        attn::test::read_text(dir / "ref" / file) == attn::test::read_text(reference_dir / file),
        file);
  fs::remove_all(dir);
}

TEST_CASE("bpe: a model's tokenizer files for transformers (hf::save_tokenizer)") {
  const fs::path dir = attn::test::fresh_dir("attn_bpe_", "hf");
  using json = nlohmann::json;
  const auto read_json = [](const fs::path& p) { return json::parse(attn::test::read_text(p)); };
  const auto check_config = [&](const fs::path& d, int max_length) {
    const json c = read_json(d / "tokenizer_config.json");
    CHECK(c.at("tokenizer_class") == "PreTrainedTokenizerFast");
    CHECK(c.at("model_max_length") == max_length);
    CHECK(c.at("clean_up_tokenization_spaces") == false);  // decode gives the bytes back
  };
  // Byte-level BPE: save_bpe's three files and the config.
  const BpeTokenizer tok = attn::data::train_bpe(tinyshakespeare(20000), 300);
  attn::io::hf::save_tokenizer(dir / "bpe", tok, 64);
  attn::io::save_bpe(tok, dir / "plain");
  for (const char* file : {"vocab.json", "merges.txt", "tokenizer.json"})
    CHECK_MESSAGE(
        attn::test::read_text(dir / "bpe" / file) == attn::test::read_text(dir / "plain" / file),
        file);
  const BpeTokenizer back = attn::io::load_bpe_tokenizer_json(dir / "bpe" / "tokenizer.json");
  CHECK(back.merges() == tok.merges());
  check_config(dir / "bpe", 64);
  // Characters: a BPE model over the characters, ids as attn's, no merges, no pre-tokenizer (the
  // whole text is one word of characters) and the Fuse decoder (tokens joined with nothing).
  const auto chars = attn::data::CharTokenizer::from_corpus("ba\n é€a");
  attn::io::hf::save_tokenizer(dir / "char", chars, 32);
  const json j = read_json(dir / "char" / "tokenizer.json");
  CHECK(j.at("model").at("type") == "BPE");
  CHECK(j.at("model").at("merges").empty());
  CHECK(j.at("model").at("unk_token").is_null());
  CHECK(j.at("pre_tokenizer").is_null());
  CHECK(j.at("normalizer").is_null());
  CHECK(j.at("decoder") == json{{"type", "Fuse"}});
  const json& vocab = j.at("model").at("vocab");
  REQUIRE(vocab.size() == 6);
  for (const char* ch : {"\n", " ", "a", "b", "\xC3\xA9", "\xE2\x82\xAC"})
    CHECK_MESSAGE(vocab.at(ch) == chars.id_of(ch), ch);
  check_config(dir / "char", 32);
  CHECK(message_of([&] { attn::io::hf::save_tokenizer(dir / "x", chars, 0); }) ==
        "hf::save_tokenizer: model_max_length is 0, not positive");
  fs::remove_all(dir);
}

TEST_CASE("bpe: added tokens, options, errors") {
  // a b c, ab, abc: "abc" merges to [ab, c] (no merge makes abc).
  const std::vector<std::string> tokens = {"a", "b", "c", "ab", "abc", "\xC4\xA0"};  // Ġ = ' '
  const std::vector<std::pair<std::string, std::string>> merges = {{"a", "b"}};
  const BpeTokenizer plain(tokens, merges);
  CHECK(plain.encode("abc") == std::vector<std::int32_t>{3, 2});
  attn::data::BpeOptions ignore;
  ignore.ignore_merges = true;
  CHECK(BpeTokenizer(tokens, merges, ignore).encode("abc") == std::vector<std::int32_t>{4});
  attn::data::BpeOptions prefix;
  prefix.add_prefix_space = true;
  CHECK(BpeTokenizer(tokens, merges, prefix).encode("ab") == std::vector<std::int32_t>{5, 3});
  CHECK(BpeTokenizer(tokens, merges, prefix).encode(" ab") == std::vector<std::int32_t>{5, 3});
  CHECK(BpeTokenizer(tokens, merges, prefix).encode("").empty());
  attn::data::BpeOptions whole;
  whole.use_regex = false;
  CHECK(BpeTokenizer(tokens, merges, whole).encode("ab ab") == std::vector<std::int32_t>{3, 5, 3});

  // Added tokens: split out of the raw text first, leftmost, the longer at one position.
  const BpeTokenizer added(tokens, merges, {},
                           {{"<|end|>", 6, true}, {"<|end|>!", 7, true}, {"c", 2, false}});
  CHECK(added.size() == 8);
  CHECK(added.encode("ab<|end|>ba") == std::vector<std::int32_t>{3, 6, 1, 0});
  CHECK(added.encode("<|end|>!<|end|>") == std::vector<std::int32_t>{7, 6});
  CHECK(added.encode("acb") == std::vector<std::int32_t>{0, 2, 1});
  CHECK(added.decode(std::vector<std::int32_t>{7, 3}) == "<|end|>!ab");
  // add_prefix_space puts a space before each stretch between added tokens (as tokenizers does).
  const BpeTokenizer prefixed({"a", "b", "ab", "\xC4\xA0"}, {{"a", "b"}}, prefix,
                              {{"<e>", 4, true}});
  CHECK(prefixed.encode("ab<e>ab") == std::vector<std::int32_t>{3, 2, 4, 3, 2});
  CHECK(prefixed.encode("<e> ab") == std::vector<std::int32_t>{4, 3, 2});
  CHECK(prefixed.encode("<e>") == std::vector<std::int32_t>{4});
  CHECK(message_of([&] { added.encode_ordinary("<"); }) ==
        "BpeTokenizer::encode: the byte 0x3C has no token in the vocabulary");

  CHECK(message_of([&] {
          plain.decode(std::vector<std::int32_t>{0, 6});
        }) == "BpeTokenizer::decode: id 6 at position 1 is outside the vocabulary of 6");
  CHECK(message_of([&] {
          BpeTokenizer({"a", "a"}, {});
        }) == "BpeTokenizer: token 'a' has two ids, 0 and 1");
  CHECK(message_of([&] {
          BpeTokenizer({"a", "b"}, {{"a", "b"}});
        }) == "BpeTokenizer: merge 0: the merge 'a b' makes 'ab', which is not in the vocabulary");
  CHECK(message_of([&] {
          BpeTokenizer({"a"}, {}, {}, {{"x", 3, true}});
        }) ==
        "BpeTokenizer: added token 'x' has id 3, which leaves a gap after the vocabulary of 1");
}

TEST_CASE("bpe: hostile files give one-line errors naming the file") {
  const fs::path dir = attn::test::fresh_dir("attn_bpe_", "hostile");
  const fs::path vocab = dir / "vocab.json", merges = dir / "merges.txt";
  const std::string good_vocab = R"({"a": 0, "b": 1, "ab": 2})";
  const auto load = [&](const std::string& v, const std::string& m) {
    attn::test::write_text(vocab, v);
    attn::test::write_text(merges, m);
    return message_of([&] { attn::io::load_bpe(vocab, merges); });
  };
  const std::string v = vocab.string() + ": ", m = merges.string() + ": ";
  CHECK(load(good_vocab, "#version: 0.2\na b\n").empty());
  CHECK(load(good_vocab, "a b\r\n").empty());  // CRLF lines
  CHECK(load("{", "").starts_with(v + "not valid JSON ([json.exception.parse_error.101]"));
  CHECK(load("[1, 2]", "") ==
        v + "the vocabulary must be a JSON object of token -> id, found an array");
  CHECK(load(R"({"a": "0"})", "") ==
        v + "the vocabulary: the id of token \"a\" must be a non-negative integer, found a string");
  CHECK(load(R"({"a": 0.5})", "") == v + "the vocabulary: the id of token \"a\" must be a "
                                         "non-negative integer, found a number that is not an "
                                         "integer");
  CHECK(load(R"({"a": -1})", "") ==
        v + "the vocabulary: the id of token \"a\" must be a non-negative integer, found -1");
  CHECK(load(R"({"a": 0, "b": 0})", "") ==
        v + "the vocabulary: tokens \"a\" and \"b\" have the same id 0");
  CHECK(load(R"({"a": 0, "b": 2})", "") ==
        v + "the vocabulary: token \"b\" has id 2, not below the vocabulary's size 2 (ids must "
            "be 0 .. size - 1)");
  CHECK(load(R"({"": 0})", "") == v + "the vocabulary: id 0 is an empty token");
  CHECK(load(good_vocab, "#version: 0.2\na b\nab\n") ==
        m + "line 3: expected two tokens separated by one space, found \"ab\"");
  CHECK(load(good_vocab, "a b\n\na b\n") ==
        m + "line 2: expected two tokens separated by one space, found \"\"");
  CHECK(load(good_vocab, "a  b\n") ==
        m + "line 1: expected two tokens separated by one space, found \"a  b\"");
  CHECK(load(good_vocab, "a\nb c\n") ==
        m + "line 1: expected two tokens separated by one space, found \"a\"");
  CHECK(load(good_vocab, "a b\nb x\n") ==
        m + "line 2: the merge \"b x\": \"x\" is not in vocab.json");
  CHECK(load(good_vocab, "b a\n") ==
        m + "line 1: the merge \"b a\" makes \"ba\", which is not in vocab.json");
  // Not regular files, or missing.
  CHECK(message_of([&] { attn::io::load_bpe(dir, merges); }) ==
        "read_file: '" + dir.string() + "' is a directory, not a regular file");
  CHECK(message_of([&] {
          attn::io::load_bpe(dir / "none.json", merges);
        }).starts_with("read_file: cannot open '" + (dir / "none.json").string() + "'"));

  // tokenizer.json
  const fs::path tj = dir / "tokenizer.json";
  const std::string t = tj.string() + ": ";
  const auto load_json = [&](const std::string& text) {
    attn::test::write_text(tj, text);
    return message_of([&] { attn::io::load_bpe_tokenizer_json(tj); });
  };
  const auto with = [](const std::string& model, const std::string& rest) {
    return R"({"model": )" + model + R"(, "pre_tokenizer": {"type": "ByteLevel"})" + rest + "}";
  };
  const std::string model = R"({"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": )";
  CHECK(load_json(with(model + R"(["a b"]})", "")).empty());
  CHECK(load_json(with(model + R"([["a", "b"]]})", "")).empty());
  CHECK(load_json(with(R"({"type": "WordPiece", "vocab": {}})", "")) ==
        t + "model.type is \"WordPiece\"; attn reads byte-level BPE only");
  CHECK(load_json("[]") == t + "must be a JSON object, found an array");
  CHECK(load_json("{}") == t + "has no \"model\"");
  CHECK(load_json(with(model + R"(["a b", "ab"]})", "")) ==
        t + "model.merges[1]: expected two tokens separated by one space, found \"ab\"");
  CHECK(load_json(with(model + R"([["a", 1]]})", "")) ==
        t + "model.merges[0]: expected \"left right\" or [left, right], found [\"a\",1]");
  CHECK(load_json(with(model + R"([["b", "a"]]})", "")) ==
        t + "model.merges[0]: the merge \"b a\" makes \"ba\", which is not in model.vocab");
  CHECK(load_json(with(R"({"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []})", "")) ==
        t + "model.vocab: tokens \"a\" and \"b\" have the same id 0");
  CHECK(load_json(with(model + R"([], "dropout": 0.1})", "")) ==
        t + "model.dropout is 0.1; attn encodes without dropout");
  CHECK(load_json(with(model + R"([], "continuing_subword_prefix": "##"})", "")) ==
        t + "model.continuing_subword_prefix is \"##\"; byte-level BPE has none (attn does not "
            "apply one)");
  CHECK(load_json(with(model + R"([], "unk_token": "a"})", "")) ==
        t + "model.unk_token is set and the byte symbol \"\u0100\" is not in the vocabulary: "
            "attn would not use the unknown token");
  CHECK(load_json(R"({"model": )" + model + R"([]}, "pre_tokenizer": {"type": "Metaspace"}})") ==
        t + "pre_tokenizer \"Metaspace\" is not supported (attn reads ByteLevel)");
  CHECK(load_json(R"({"model": )" + model + R"([]}})") ==
        t + "has no pre_tokenizer (byte-level BPE needs ByteLevel)");
  CHECK(load_json(with(model + "[]}", R"(, "normalizer": {"type": "NFC"})")) ==
        t + "normalizer \"NFC\" is not supported (GPT-2 has none)");
  CHECK(load_json(with(model + "[]}", R"(, "post_processor": {"type": "TemplateProcessing"})")) ==
        t + "post_processor \"TemplateProcessing\" is not supported (attn's is ByteLevel's)");
  CHECK(load_json(with(model + "[]}",
                       R"(, "added_tokens": [{"id": 3, "content": "<s>", "lstrip": true}])")) ==
        t + "added_tokens[0] (\"<s>\") has lstrip true, which attn does not implement");
  CHECK(load_json(with(model + "[]}", R"(, "added_tokens": [{"id": 5, "content": "<s>"}])")) ==
        t + "BpeTokenizer: added token '<s>' has id 5, which leaves a gap after the vocabulary "
            "of 3");
  CHECK(load_json(R"({"model": )" + model +
                  R"([]}, "pre_tokenizer": {"type": "ByteLevel", "use_regex": 1}})") ==
        t + "pre_tokenizer.use_regex must be true or false, found a number");
  // Every message is one line, even for a token with a newline in it.
  CHECK(load(R"({"a\n": 0, "b": 0})", "").find('\n') == std::string::npos);
  fs::remove_all(dir);
}
