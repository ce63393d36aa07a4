// Tests of attn/io/safetensors.hpp: round trips, byte-exact agreement with the reference layout
// (golden file from tests/io/make_golden.py), and the validation of hostile files.
// Does not run Python: the golden file is committed (tests/io/data/golden.safetensors).
#include <doctest/doctest.h>
#include <attn/io/safetensors.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "../test_util.hpp"
#include "io_fixture.hpp"

namespace fs = std::filesystem;
using attn::Shape;
using attn::Tensor;
using attn::io::Safetensors;
using attn::test::message_of;

namespace {

const fs::path golden_path = fs::path(ATTN_TESTS_SOURCE_DIR) / "io" / "data" / "golden.safetensors";

// A file with the given header length field, followed by `rest` (header text and buffer).
std::vector<std::byte> with_length(std::uint64_t length, std::string_view rest) {
  std::vector<std::byte> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((length >> (8 * i)) & 0xFF));
  const auto tail = attn::test::to_bytes(rest);
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

// A well-framed file: the header text (its length in front) and `buffer` bytes of data 0, 1, 2...
std::vector<std::byte> framed(std::string_view header, std::size_t buffer = 0) {
  std::vector<std::byte> out = with_length(header.size(), header);
  for (std::size_t i = 0; i < buffer; ++i) out.push_back(static_cast<std::byte>(i));
  return out;
}

std::string parse_error(const std::vector<std::byte>& bytes) {
  return message_of<attn::io_error>(
      [&] { attn::io::parse_safetensors(bytes, "hostile.safetensors"); });
}

// The file must be rejected with io_error "hostile.safetensors: ..." containing `phrase`.
void check_rejected(const std::vector<std::byte>& bytes, const std::string& phrase) {
  const std::string msg = parse_error(bytes);
  INFO("message: ", msg);
  INFO("expected phrase: ", phrase);
  CHECK(msg.rfind("hostile.safetensors: ", 0) == 0);
  CHECK(msg.find(phrase) != std::string::npos);
}

template <class T>
Tensor<T> sample(const Shape& shape, int seed) {
  Tensor<T> t(shape);
  for (attn::index_t i = 0; i < t.numel(); ++i) {
    if constexpr (std::is_floating_point_v<T>)
      t[i] = static_cast<T>(0.1 * static_cast<double>(i * 7 + seed) - 3.3);
    else if constexpr (std::is_signed_v<T>)
      t[i] = static_cast<T>((i * 37 + seed) % 200 - 100);
    else
      t[i] = static_cast<T>((i * 37 + seed) % 256);
  }
  return t;
}

template <class T>
bool same_bits(const Tensor<T>& a, const Tensor<T>& b) {
  return a.shape() == b.shape() &&
         (a.numel() == 0 ||
          std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.numel()) * sizeof(T)) == 0);
}

}  // namespace

// ---- round trips ---------------------------------------------------------------------------

TEST_CASE_TEMPLATE("safetensors: round trip of every rank 0..4", T, float, double, std::int32_t,
                   std::int64_t, std::uint8_t) {
  const std::vector<Shape> shapes = {Shape{}, Shape{5}, Shape{2, 3}, Shape{2, 3, 4},
                                     Shape{1, 2, 3, 2}};
  Safetensors file;
  for (std::size_t r = 0; r < shapes.size(); ++r)
    file.put("rank" + std::to_string(r), sample<T>(shapes[r], static_cast<int>(r)));
  const Safetensors back = attn::io::parse_safetensors(attn::io::serialize_safetensors(file), "rt");
  CHECK(back.tensors.size() == shapes.size());
  for (std::size_t r = 0; r < shapes.size(); ++r) {
    const std::string name = "rank" + std::to_string(r);
    const Tensor<T> got = back.get<T>(name, shapes[r]);
    CHECK(same_bits(got, sample<T>(shapes[r], static_cast<int>(r))));
    CHECK(back.tensors.at(name).dtype == file.tensors.at(name).dtype);
  }
}

TEST_CASE("safetensors: float specials and extreme integers keep their exact bits") {
  const float fnan = std::numeric_limits<float>::quiet_NaN();
  const float finf = std::numeric_limits<float>::infinity();
  Safetensors file;
  file.put("f", Tensor<float>(Shape{6}, {fnan, finf, -finf, -0.0f, 1e-45f, 3.4028235e38f}));
  file.put("d", Tensor<double>(Shape{2}, {std::numeric_limits<double>::denorm_min(), -0.0}));
  file.put("i", Tensor<std::int64_t>(Shape{2}, {std::numeric_limits<std::int64_t>::min(),
                                                std::numeric_limits<std::int64_t>::max()}));
  file.put("u", Tensor<std::uint8_t>(Shape{2}, {0, 255}));
  const Safetensors back = attn::io::parse_safetensors(attn::io::serialize_safetensors(file), "x");
  CHECK(same_bits(back.get<float>("f"), file.get<float>("f")));
  CHECK(same_bits(back.get<double>("d"), file.get<double>("d")));
  CHECK(same_bits(back.get<std::int64_t>("i"), file.get<std::int64_t>("i")));
  CHECK(same_bits(back.get<std::uint8_t>("u"), file.get<std::uint8_t>("u")));
  // Little-endian on disk: the bytes of 1.0f are 00 00 80 3f.
  file.put("one", Tensor<float>(Shape{}, {1.0f}));
  const auto& b = file.tensors.at("one").bytes;
  CHECK(b == std::vector<std::byte>{std::byte{0}, std::byte{0}, std::byte{0x80}, std::byte{0x3f}});
}

TEST_CASE("safetensors: metadata, empty tensors, many tensors, replacing a tensor") {
  Safetensors file;
  file.metadata = {{"format", "pt"}, {"note", "line\nbreak \"quoted\" \u00e9"}, {"", ""}};
  file.put("empty_a", Tensor<float>(Shape{0}));
  file.put("empty_b", Tensor<double>(Shape{3, 0, 2}));
  for (int i = 0; i < 300; ++i) {
    const std::string name = "layer." + std::to_string(i);
    switch (i % 5) {
      case 0:
        file.put(name, sample<float>(Shape{i % 7, 3}, i));
        break;
      case 1:
        file.put(name, sample<double>(Shape{2, i % 4}, i));
        break;
      case 2:
        file.put(name, sample<std::int32_t>(Shape{i % 3}, i));
        break;
      case 3:
        file.put(name, sample<std::int64_t>(Shape{}, i));
        break;
      default:
        file.put(name, sample<std::uint8_t>(Shape{1, 1, i % 5}, i));
        break;
    }
  }
  file.put("layer.0", sample<float>(Shape{4}, 99));  // replaces the first one
  CHECK(file.contains("layer.0"));
  CHECK(!file.contains("layer.300"));

  const std::vector<std::byte> bytes = attn::io::serialize_safetensors(file);
  const Safetensors back = attn::io::parse_safetensors(bytes, "many");
  CHECK(back.metadata == file.metadata);
  CHECK(back.tensors.size() == 302);
  CHECK(back.source == "many");
  for (const auto& kv : file.tensors) {
    const std::string& name = kv.first;  // not a structured binding: clang 14 cannot capture one
    const attn::io::TensorData& d = kv.second;
    CAPTURE(name);
    const auto& e = back.tensors.at(name);
    CHECK(e.dtype == d.dtype);
    CHECK(e.shape == d.shape);
    CHECK(e.bytes == d.bytes);
  }
  CHECK(same_bits(back.get<float>("layer.0"), sample<float>(Shape{4}, 99)));
  CHECK(back.get<double>("empty_b").shape() == Shape{3, 0, 2});
  // Serializing what was read gives the same bytes again.
  CHECK(attn::io::serialize_safetensors(back) == bytes);
}

TEST_CASE("safetensors: save and load through a file") {
  attn::test::TempDir dir;
  const fs::path p = dir / "model.safetensors";
  Safetensors file;
  file.metadata["step"] = "100";
  file.put("w", sample<float>(Shape{3, 4}, 1));
  attn::io::save_safetensors(p, file);
  CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});
  const Safetensors back = attn::io::load_safetensors(p);
  CHECK(back.source == p.string());
  CHECK(back.metadata.at("step") == "100");
  CHECK(same_bits(back.get<float>("w", Shape{3, 4}), sample<float>(Shape{3, 4}, 1)));

  const std::string missing =
      message_of<attn::io_error>([&] { attn::io::load_safetensors(dir / "nope.safetensors"); });
  CHECK(missing.find("cannot open") != std::string::npos);
  CHECK(missing.find("nope.safetensors") != std::string::npos);

  // A corrupt file on disk: the message starts with its path.
  attn::io::write_file_atomically(dir / "bad.safetensors",
                                  std::string_view("\x03\0\0\0\0\0\0\0{}", 10));
  const std::string bad =
      message_of<attn::io_error>([&] { attn::io::load_safetensors(dir / "bad.safetensors"); });
  CHECK(bad.rfind((dir / "bad.safetensors").string() + ": ", 0) == 0);
}

// ---- agreement with the reference writer ---------------------------------------------------

TEST_CASE("safetensors: golden file (reference layout) loads, and our writer reproduces it") {
  const Safetensors g = attn::io::load_safetensors(golden_path);
  CHECK(g.metadata == std::map<std::string, std::string>{{"format", "pt"}});
  CHECK(g.tensors.size() == 8);
  CHECK(same_bits(g.get<float>("embed.weight", Shape{2, 3}),
                  Tensor<float>(Shape{2, 3}, {0.5f, -1.25f, 3.0f, 0.001f, -2.0f, 100.0f})));
  CHECK(same_bits(g.get<float>("block.0.attn.w", Shape{1, 2, 1, 2}),
                  Tensor<float>(Shape{1, 2, 1, 2}, {1, 2, 3, 4})));
  CHECK(same_bits(g.get<double>("ln.bias"), Tensor<double>(Shape{2}, {3.141592653589793, -2.5})));
  CHECK(same_bits(g.get<std::int32_t>("tokens"),
                  Tensor<std::int32_t>(Shape{3}, {-1, 0, 2147483647})));
  CHECK(same_bits(g.get<std::int64_t>("step", Shape{}),
                  Tensor<std::int64_t>(Shape{}, {1234567890123})));
  CHECK(same_bits(g.get<std::uint8_t>("mask"), Tensor<std::uint8_t>(Shape{4}, {0, 1, 254, 255})));
  CHECK(g.get<float>("empty").shape() == Shape{0, 3});
  CHECK(same_bits(g.get<float>("\u00fcn\u00efcode"), Tensor<float>(Shape{1}, {7.0f})));

  // The same content built here serializes to the golden bytes exactly.
  Safetensors mine;
  mine.metadata["format"] = "pt";
  mine.put("embed.weight", g.get<float>("embed.weight"));
  mine.put("block.0.attn.w", g.get<float>("block.0.attn.w"));
  mine.put("ln.bias", g.get<double>("ln.bias"));
  mine.put("tokens", g.get<std::int32_t>("tokens"));
  mine.put("step", g.get<std::int64_t>("step"));
  mine.put("mask", g.get<std::uint8_t>("mask"));
  mine.put("empty", Tensor<float>(Shape{0, 3}));
  mine.put("\u00fcn\u00efcode", Tensor<float>(Shape{1}, {7.0f}));
  const std::vector<std::byte> golden = attn::io::read_file(golden_path);
  CHECK(attn::io::serialize_safetensors(mine) == golden);

  attn::test::TempDir dir;
  attn::io::save_safetensors(dir / "copy.safetensors", mine, attn::io::Checksums::omit);
  CHECK(attn::io::read_file(dir / "copy.safetensors") == golden);
}

// ---- checksums -----------------------------------------------------------------------------

namespace {
// CRC-32 bit by bit, straight from its definition (reflected polynomial 0xEDB88320, initial value
// and final XOR all ones): the oracle of the table-driven one.
std::uint32_t crc32_bitwise(const std::vector<std::byte>& bytes) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (const std::byte b : bytes) {
    c ^= std::to_integer<std::uint32_t>(b);
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
  }
  return ~c;
}
}  // namespace

TEST_CASE("safetensors: crc32 is zlib's CRC-32") {
  using attn::io::detail::crc32;
  CHECK(crc32(attn::test::to_bytes("123456789")) == 0xCBF43926u);  // the standard check value
  CHECK(crc32({}) == 0u);
  CHECK(crc32(attn::test::to_bytes("The quick brown fox jumps over the lazy dog")) ==
        0x414FA339u);  // Python: zlib.crc32(b"The quick brown fox jumps over the lazy dog")
  // Every length and alignment around the 8-byte steps, against the bit-by-bit definition.
  std::vector<std::byte> all;
  for (int i = 0; i < 67; ++i) all.push_back(static_cast<std::byte>((i * 151 + 7) % 256));
  for (std::size_t begin = 0; begin < 9; ++begin)
    for (std::size_t end = begin; end <= all.size(); ++end) {
      const std::vector<std::byte> part(all.begin() + static_cast<long>(begin),
                                        all.begin() + static_cast<long>(end));
      REQUIRE(crc32(part) == crc32_bitwise(part));
    }
}

TEST_CASE("safetensors: save_safetensors stores a checksum per tensor; a flipped bit is an error") {
  attn::test::TempDir dir;
  const fs::path p = dir / "model.safetensors";
  Safetensors file;
  file.metadata["step"] = "7";
  file.put("w", sample<float>(Shape{3, 4}, 1));
  file.put("b", sample<double>(Shape{5}, 2));
  file.put("empty", Tensor<float>(Shape{0, 3}));
  attn::io::save_safetensors(p, file);
  const std::vector<std::byte> bytes = attn::io::read_file(p);
  const std::string text = attn::test::to_string(bytes);
  char expected[16];
  std::snprintf(expected, sizeof expected, "%08x", crc32_bitwise(file.tensors.at("w").bytes));
  CHECK(text.find(std::string("\"crc32:w\":\"") + expected + "\"") != std::string::npos);
  CHECK(text.find("\"crc32:empty\":\"00000000\"") != std::string::npos);

  // Loads with the checksums verified and out of the metadata: the file's own content comes back.
  const Safetensors back = attn::io::load_safetensors(p);
  CHECK(back.metadata == file.metadata);
  CHECK(same_bits(back.get<float>("w"), file.get<float>("w")));
  CHECK(attn::io::serialize_safetensors(back) == attn::io::serialize_safetensors(file));

  // Every single flipped bit in any tensor's data is caught, and the message names the tensor.
  const std::size_t header = 8 + static_cast<std::size_t>(std::to_integer<unsigned>(bytes[0]) |
                                                          std::to_integer<unsigned>(bytes[1]) << 8);
  const std::size_t b_end = header + 5 * 8;  // "b" (F64) comes first, then "w"
  for (std::size_t at = header; at < bytes.size(); ++at)
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<std::byte> bad = bytes;
      bad[at] ^= static_cast<std::byte>(1 << bit);
      const std::string msg = message_of<attn::io_error>(
          [&] { attn::io::parse_safetensors(bad, "model.safetensors"); });
      REQUIRE(msg.rfind("model.safetensors: tensor \"" + std::string(at < b_end ? "b" : "w") +
                            "\" is corrupt",
                        0) == 0);
    }
  // On disk too, through load_safetensors.
  std::vector<std::byte> bad = bytes;
  bad.back() ^= std::byte{0x40};
  attn::io::write_file_atomically(p, bad);
  const std::string msg = message_of<attn::io_error>([&] { attn::io::load_safetensors(p); });
  CHECK(msg.rfind(p.string() + ": tensor \"w\" is corrupt: its data has CRC-32 ", 0) == 0);
}

TEST_CASE("safetensors: the header's checksum covers the metadata and every tensor's place") {
  Safetensors file;
  file.metadata["train.lr"] = "0.002";
  file.metadata["vocab"] = "abc";
  file.put("w", sample<float>(Shape{3, 4}, 1));
  file.put("b", sample<float>(Shape{2, 6}, 2));
  const std::vector<std::byte> bytes =
      attn::io::serialize_safetensors(file, attn::io::Checksums::add);
  const std::string text = attn::test::to_string(bytes);
  CHECK(text.find("\"crc32:__metadata__\":\"") != std::string::npos);
  const Safetensors back = attn::io::parse_safetensors(bytes, "model.safetensors");
  CHECK(back.metadata == file.metadata);  // the checksum entries are taken out
  // Same-length edits that leave the JSON well-formed: a setting, a vocabulary character, two
  // tensors' shapes swapped.
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"\"0.002\"", "\"0.009\""}, {"\"abc\"", "\"abd\""}, {"[3,4]", "[4,3]"}}) {
    std::string edited = text;
    const std::size_t at = edited.find(from);
    REQUIRE(at != std::string::npos);
    edited.replace(at, from.size(), to);
    std::vector<std::byte> bad(edited.size());
    std::memcpy(bad.data(), edited.data(), edited.size());
    CHECK(message_of<attn::io_error>([&] {
            attn::io::parse_safetensors(bad, "model.safetensors");
          }).rfind("model.safetensors: the header is corrupt", 0) == 0);
  }
}

TEST_CASE("safetensors: the checksums are the ones an independent writer computes") {
  // tests/io/make_golden.py computes them with Python's zlib from the format's description.
  const fs::path checksummed = golden_path.parent_path() / "checksummed.safetensors";
  const Safetensors golden = attn::io::load_safetensors(golden_path);
  const Safetensors back = attn::io::load_safetensors(checksummed);  // both checksums verified
  CHECK(back.metadata == golden.metadata);
  CHECK(attn::io::serialize_safetensors(golden, attn::io::Checksums::add) ==
        attn::io::read_file(checksummed));
}

TEST_CASE("safetensors: files without checksums load; checksum entries must fit the file") {
  Safetensors file;
  file.put("w", sample<float>(Shape{2}, 1));
  // Written without checksums (as by other writers, or by attn before them): a flipped bit in
  // the data cannot be seen, and the file loads.
  std::vector<std::byte> plain = attn::io::serialize_safetensors(file);
  plain.back() ^= std::byte{1};
  CHECK(attn::io::parse_safetensors(plain, "old.safetensors").tensors.size() == 1);
  // The golden file (the Python writer's) has none either.
  CHECK(attn::io::load_safetensors(golden_path).tensors.size() == 8);

  // Checksums only for some tensors: those present are checked.
  const std::string header_some =
      R"({"__metadata__":{"crc32:a":"d202ef8d"},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
      R"("b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
  CHECK(attn::io::parse_safetensors(framed(header_some, 2), "some").metadata.empty());
  // crc32(b"\x00") = 0xd202ef8d; a wrong or malformed value is corruption.
  check_rejected(framed(R"({"__metadata__":{"crc32:a":"D202EF8D"},)"
                        R"("a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
                        1),
                 "tensor \"a\" is corrupt: its data has CRC-32 d202ef8d, the file records "
                 "\"D202EF8D\"");
  check_rejected(framed(R"({"__metadata__":{"crc32:zz":"00000000"}})"),
                 "metadata \"crc32:zz\" is the checksum of tensor \"zz\", which the file does not "
                 "hold");

  // A caller cannot write a checksum entry of its own.
  Safetensors reserved;
  reserved.metadata["crc32:w"] = "00000000";
  CHECK(message_of<attn::value_error>([&] {
          attn::io::serialize_safetensors(reserved);
        }).find("is reserved for the tensors' checksums") != std::string::npos);
}

TEST_CASE("safetensors: the reference implementation's own serialization examples") {
  // From the upstream test suite (safetensors/src/tensor.rs): header lengths 64 and 72 with the
  // padding that aligns the data, and the empty files of 8 and 40 header bytes.
  Safetensors one;
  one.put("attn.0", Tensor<float>(Shape{1, 2, 3}, {0, 1, 2, 3, 4, 5}));
  std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  header.append(64 - header.size(), ' ');
  std::vector<std::byte> expected = with_length(64, header);
  const auto data = one.tensors.at("attn.0").bytes;
  expected.insert(expected.end(), data.begin(), data.end());
  CHECK(attn::io::serialize_safetensors(one) == expected);

  Safetensors two;
  two.put("attn0", Tensor<float>(Shape{1, 1, 2, 3}, {0, 1, 2, 3, 4, 5}));
  CHECK(attn::test::to_string(attn::io::serialize_safetensors(two)).substr(0, 8) ==
        std::string("\x48\0\0\0\0\0\0\0", 8));  // 72

  Safetensors empty;
  CHECK(attn::io::serialize_safetensors(empty) == with_length(8, "{}      "));
  empty.metadata["framework"] = "pt";
  CHECK(attn::io::serialize_safetensors(empty) ==
        with_length(40, "{\"__metadata__\":{\"framework\":\"pt\"}}     "));
  CHECK(attn::io::parse_safetensors(with_length(8, "{}      "), "e").tensors.empty());
}

TEST_CASE("safetensors: the writer orders tensors by decreasing alignment, then by name") {
  Safetensors file;
  file.put("a_u8", Tensor<std::uint8_t>(Shape{3}, {1, 2, 3}));
  file.put("b_f32", Tensor<float>(Shape{1}, {1}));
  file.put("c_i64", Tensor<std::int64_t>(Shape{1}, {1}));
  file.put("d_f64", Tensor<double>(Shape{1}, {1}));
  file.put("e_f32", Tensor<float>(Shape{1}, {1}));
  const std::string text = attn::test::to_string(attn::io::serialize_safetensors(file));
  const auto at = [&](const char* name) { return text.find(name); };
  CHECK(at("c_i64") < at("d_f64"));
  CHECK(at("d_f64") < at("b_f32"));
  CHECK(at("b_f32") < at("e_f32"));
  CHECK(at("e_f32") < at("a_u8"));
  CHECK(text.find(R"("c_i64":{"dtype":"I64","shape":[1],"data_offsets":[0,8]})") !=
        std::string::npos);
  CHECK(text.find(R"("a_u8":{"dtype":"U8","shape":[3],"data_offsets":[24,27]})") !=
        std::string::npos);
}

TEST_CASE("safetensors: names are escaped as serde_json escapes them, and read back") {
  const std::vector<std::string> names = {
      "quote\"d",         "back\\slash", "new\nline", "tab\t", std::string("\x01\x1f", 2),
      "\u00e9\u4e2d/\x7f"};
  Safetensors file;
  for (const auto& n : names) file.put(n, Tensor<float>(Shape{1}, {1.0f}));
  const std::string text = attn::test::to_string(attn::io::serialize_safetensors(file));
  for (const char* escaped : {R"("quote\"d")", R"("back\\slash")", R"("new\nline")", R"("tab\t")",
                              R"("\u0001\u001f")", "\"\u00e9\u4e2d/\x7f\""})
    CHECK(text.find(escaped) != std::string::npos);
  const Safetensors back = attn::io::parse_safetensors(attn::test::to_bytes(text), "esc");
  for (const auto& n : names) CHECK(back.contains(n));
}

// ---- what the reader accepts that our writer does not produce ------------------------------

TEST_CASE("safetensors: the reader accepts any valid layout, not only the writer's") {
  // Entries out of offset order, metadata last, JSON whitespace, dtypes attn has no type for.
  const std::string header =
      "{ \"b\" : {\"shape\": [2], \"dtype\": \"BF16\", \"data_offsets\": [4, 8]},\n"
      "  \"a\": {\"data_offsets\": [0, 4], \"dtype\": \"I32\", \"shape\": []},"
      "  \"z\": {\"dtype\": \"F32\", \"shape\": [0, 5], \"data_offsets\": [8, 8]},"
      "  \"__metadata__\": {} }\t\n  ";
  const Safetensors f = attn::io::parse_safetensors(framed(header, 8), "loose");
  CHECK(f.metadata.empty());
  CHECK(f.tensors.at("b").dtype == "BF16");
  CHECK(f.tensors.at("b").bytes.size() == 4);
  CHECK(f.get<std::int32_t>("a").shape() == Shape{});
  CHECK(f.get<float>("z").numel() == 0);
  // Two empty tensors at the same offset, and the empty file: fine.
  CHECK(
      attn::io::parse_safetensors(framed(R"({"p":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},)"
                                         R"("q":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})"),
                                  "e")
          .tensors.size() == 2);
}

// ---- hostile files -------------------------------------------------------------------------

TEST_CASE("safetensors: every truncation of a valid file is rejected") {
  const std::vector<std::byte> golden = attn::io::read_file(golden_path);
  for (std::size_t n = 0; n < golden.size(); ++n) {
    CAPTURE(n);
    const std::string msg =
        parse_error(std::vector<std::byte>(golden.begin(), golden.begin() + static_cast<long>(n)));
    CHECK(!msg.empty());
  }
  const auto cut = [&](std::size_t n) {
    return std::vector<std::byte>(golden.begin(), golden.begin() + static_cast<long>(n));
  };
  check_rejected(cut(0), "file is too short (0 bytes)");
  check_rejected(cut(7), "file is too short (7 bytes)");
  check_rejected(cut(8), "runs past the end of the file");
  check_rejected(cut(100), "runs past the end of the file");
  const std::size_t header_end = 8 + 0x218;  // the golden header is 536 bytes
  check_rejected(cut(header_end), "run past the end of the data buffer (0 bytes)");
  check_rejected(cut(header_end + 10), "run past the end of the data buffer (10 bytes)");
  check_rejected(cut(golden.size() - 1), "run past the end of the data buffer");
}

TEST_CASE("safetensors: hostile header lengths") {
  check_rejected(with_length(0, "{}"), "header length is 0");
  check_rejected(with_length(std::uint64_t{1} << 63, "{}"), "exceeds the limit of 100000000 bytes");
  check_rejected(with_length(std::numeric_limits<std::uint64_t>::max(), "{}"), "exceeds the limit");
  check_rejected(with_length(100'000'001, "{}"), "exceeds the limit");
  check_rejected(with_length(1000, "{}"),
                 "header length 1000 runs past the end of the file (10 bytes)");
}

TEST_CASE("safetensors: hostile headers") {
  SUBCASE("not JSON") {
    check_rejected(framed(R"({"a":)"), "header is not valid JSON");
    check_rejected(framed(R"({} x)"), "header is not valid JSON");
    check_rejected(framed(std::string("{}\0\0\0", 5)), "header is not valid JSON");
    check_rejected(framed("{'a':1}"), "header is not valid JSON");
  }
  SUBCASE("not UTF-8 or not an object") {
    check_rejected(framed("{\"\xff\":{}}"), "header is not valid UTF-8");
    check_rejected(framed("{\"\xed\xa0\x80\":{}}"), "header is not valid UTF-8");  // surrogate
    check_rejected(framed("[]"), "does not start with '{'");
    check_rejected(framed(" {}"), "does not start with '{'");
    check_rejected(framed("{\"a\":\"\\ud800\"}"), "header is not valid JSON");  // lone surrogate
  }
  SUBCASE("entries of the wrong kind") {
    check_rejected(framed(R"({"a":5})"), "entry \"a\" must be an object");
    check_rejected(framed(R"({"a":[1]})"), "entry \"a\" must be an object");
    check_rejected(framed(R"({"a":null})"), "entry \"a\" must be an object");
  }
  SUBCASE("missing and extra keys") {
    check_rejected(framed(R"({"a":{"dtype":"F32","shape":[]}})"),
                   "tensor \"a\": missing \"data_offsets\"");
    check_rejected(framed(R"({"a":{"shape":[],"data_offsets":[0,4]}})", 4), "missing \"dtype\"");
    check_rejected(framed(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4), "missing \"shape\"");
    check_rejected(framed(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,4],"x":1}})", 4),
                   "unexpected key \"x\"");
    check_rejected(framed(R"({"a":{"dtype":"F32","offsets":[0,4]}})", 4),
                   "unexpected key \"offsets\"");
  }
  SUBCASE("dtype") {
    check_rejected(framed(R"({"a":{"dtype":"F33","shape":[],"data_offsets":[0,4]}})", 4),
                   "unknown dtype \"F33\"");
    check_rejected(framed(R"({"a":{"dtype":"f32","shape":[],"data_offsets":[0,4]}})", 4),
                   "unknown dtype \"f32\"");
    check_rejected(framed(R"({"a":{"dtype":4,"shape":[],"data_offsets":[0,4]}})", 4),
                   "dtype must be a string");
  }
  SUBCASE("shape") {
    const std::string phrase = "shape must be a list of non-negative integers";
    check_rejected(framed(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})"), phrase);
    check_rejected(framed(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4),
                   phrase);
    check_rejected(framed(R"({"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", 4),
                   phrase);
    check_rejected(framed(R"({"a":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})", 4),
                   phrase);
    check_rejected(framed(R"({"a":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", 4),
                   phrase);
    check_rejected(framed(R"({"a":{"dtype":"F32","shape":3,"data_offsets":[0,12]}})", 12), phrase);
    check_rejected(framed(R"({"a":{"dtype":"F32","shape":{},"data_offsets":[0,4]}})", 4), phrase);
    check_rejected(
        framed(R"({"a":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,0]}})"),
        "is too large");
    check_rejected(
        framed(R"({"a":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,0]}})"),
        phrase);
  }
  SUBCASE("shape overflow") {
    // 2^62 * 8 elements overflows; so does 2^62 elements of 4 bytes; and 2^40 * 2^40 * 0, whose
    // partial product overflows before the 0 (the reference reader rejects it the same way).
    check_rejected(
        framed(R"({"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,0]}})"),
        "overflows");
    check_rejected(
        framed(R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})"),
        "overflows");
    check_rejected(
        framed(
            R"({"a":{"dtype":"U8","shape":[1099511627776,1099511627776,0],"data_offsets":[0,0]}})"),
        "overflows");
  }
  SUBCASE("data_offsets") {
    const std::string phrase = "data_offsets must be a list of two non-negative integers";
    check_rejected(framed(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,8]}})", 4),
                   "run past the end of the data buffer (4 bytes)");
    check_rejected(framed(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[8,4]}})", 8),
                   "data_offsets [8, 4] has begin > end");
    check_rejected(framed(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4),
                   "size mismatch");
    check_rejected(framed(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0]}})", 4), phrase);
    check_rejected(framed(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4,4]}})", 4), phrase);
    check_rejected(framed(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[-1,4]}})", 4), phrase);
    check_rejected(framed(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":"0,4"}})", 4), phrase);
    check_rejected(framed(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4.0]}})", 4), phrase);
    check_rejected(
        framed(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[18446744073709551615,4]}})", 4),
        "begin > end");
  }
  SUBCASE("tensors must tile the buffer") {
    check_rejected(framed(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                          12),
                   "tensors \"a\" (data_offsets [0, 8]) and \"b\" (data_offsets [4, 12]) overlap");
    check_rejected(framed(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                          4),
                   "overlap");
    check_rejected(framed(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                          8),
                   "overlap");
    check_rejected(framed(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                          12),
                   "bytes [4, 8) of the data buffer belong to no tensor");
    check_rejected(framed(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
                   "bytes [0, 4) of the data buffer belong to no tensor");
    check_rejected(framed(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8),
                   "bytes [4, 8) of the data buffer belong to no tensor");
    check_rejected(framed("{}", 1), "bytes [0, 1) of the data buffer belong to no tensor");
  }
  SUBCASE("metadata") {
    check_rejected(framed(R"({"__metadata__":{"a":1}})"),
                   "__metadata__ must map strings to strings, but the value of \"a\" is a number");
    check_rejected(framed(R"({"__metadata__":{"a":{"b":"c"}}})"), "must map strings to strings");
    check_rejected(framed(R"({"__metadata__":{"a":["b"]}})"), "must map strings to strings");
    check_rejected(framed(R"({"__metadata__":{"a":null}})"), "must map strings to strings");
    check_rejected(framed(R"({"__metadata__":["a"]})"), "__metadata__ must be an object");
    check_rejected(framed(R"({"__metadata__":"a"})"), "__metadata__ must be an object");
  }
  SUBCASE("duplicate keys") {
    const std::string t = R"({"dtype":"U8","shape":[0],"data_offsets":[0,0]})";
    check_rejected(framed("{\"a\":" + t + ",\"a\":" + t + "}"),
                   "duplicate key \"a\" in the header");
    check_rejected(framed(R"({"__metadata__":{},"__metadata__":{}})"),
                   "duplicate key \"__metadata__\"");
    check_rejected(framed(R"({"__metadata__":{"k":"1","k":"2"}})"),
                   "duplicate key \"k\" in __metadata__");
    check_rejected(framed(R"({"a":{"dtype":"U8","dtype":"U8","shape":[0],"data_offsets":[0,0]}})"),
                   "tensor \"a\": duplicate key \"dtype\"");
    // The same key spelled with an escape is the same key.
    check_rejected(framed("{\"a\":" + t + ",\"\\u0061\":" + t + "}"), "duplicate key \"a\"");
  }
  SUBCASE("hostile names are printed escaped and shortened") {
    const std::string long_name(500, 'n');
    const std::string msg = parse_error(framed("{\"" + long_name + "\\n\":5}"));
    CHECK(msg.find("must be an object") != std::string::npos);
    CHECK(msg.find(std::string(100, 'n') + "...\"") != std::string::npos);
    CHECK(msg.size() < 400);
    const std::string ctl = parse_error(framed("{\"\\u001b[31m\":5}"));
    CHECK(ctl.find("\"\\u001b[31m\"") != std::string::npos);
  }
}

// ---- get ----------------------------------------------------------------------------------

TEST_CASE("safetensors: get checks the name, the dtype, the rank and the expected shape") {
  const std::string header =
      R"({"ids":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
      R"("big":{"dtype":"F32","shape":[1,1,1,1,1],"data_offsets":[8,12]},)"
      R"("wide":{"dtype":"U8","shape":[0,4294967296,4294967296],"data_offsets":[12,12]}})";
  const Safetensors f = attn::io::parse_safetensors(framed(header, 12), "model.safetensors");

  const std::string dtype = message_of<attn::io_error>([&] { f.get<float>("ids"); });
  CHECK(dtype == "model.safetensors: tensor \"ids\" has dtype \"I32\", expected F32");
  CHECK(!message_of<attn::io_error>([&] { f.get<std::int64_t>("ids"); }).empty());
  CHECK(f.get<std::int32_t>("ids").shape() == Shape{2});

  const std::string shape = message_of<attn::io_error>([&] {
    f.get<std::int32_t>("ids", Shape{2, 1});
  });
  CHECK(shape == "model.safetensors: tensor \"ids\" has shape [2], expected [2, 1]");

  const std::string missing = message_of<attn::io_error>([&] { f.get<float>("idz"); });
  CHECK(missing.find("model.safetensors: no tensor named \"idz\"") == 0);
  CHECK(missing.find("\"big\", \"ids\", \"wide\"") != std::string::npos);

  const std::string rank = message_of<attn::io_error>([&] { f.get<float>("big"); });
  CHECK(rank.find("has rank 5") != std::string::npos);
  CHECK(rank.find("rank at most 4") != std::string::npos);

  // Valid in the file (0 elements), but the trailing product overflows attn::Shape's strides.
  CHECK(message_of<attn::io_error>([&] { f.get<std::uint8_t>("wide"); }).find("too large") !=
        std::string::npos);

  Safetensors mem;  // built in memory: errors say "safetensors"
  CHECK(message_of<attn::io_error>([&] { mem.get<float>("x"); }) ==
        "safetensors: no tensor named \"x\" (the file holds 0 tensors)");
}

TEST_CASE("safetensors: the writer rejects content it cannot write") {
  Safetensors f;
  CHECK(message_of<attn::value_error>([&] {
          f.put("__metadata__", Tensor<float>(Shape{1}));
        }).find("reserved") != std::string::npos);

  Safetensors bad_dtype;
  bad_dtype.tensors["x"] = {"F33", {1}, std::vector<std::byte>(4)};
  CHECK(message_of<attn::value_error>([&] {
          attn::io::serialize_safetensors(bad_dtype);
        }).find("unknown dtype \"F33\"") != std::string::npos);

  Safetensors bad_size;
  bad_size.tensors["x"] = {"F32", {2}, std::vector<std::byte>(4)};
  CHECK(message_of<attn::value_error>([&] {
          attn::io::serialize_safetensors(bad_size);
        }).find("holds 4 bytes") != std::string::npos);

  Safetensors bad_shape;
  bad_shape.tensors["x"] = {"F32", {-1}, {}};
  CHECK(message_of<attn::value_error>([&] {
          attn::io::serialize_safetensors(bad_shape);
        }).find("invalid shape") != std::string::npos);

  Safetensors bad_name;
  bad_name.tensors["\xff"] = {"U8", {0}, {}};
  CHECK(message_of<attn::value_error>([&] {
          attn::io::serialize_safetensors(bad_name);
        }).find("not valid UTF-8") != std::string::npos);

  Safetensors reserved;
  reserved.tensors["__metadata__"] = {"U8", {0}, {}};
  CHECK(!message_of<attn::value_error>([&] { attn::io::serialize_safetensors(reserved); }).empty());

  // Nothing is written when serialization fails.
  attn::test::TempDir dir;
  CHECK_THROWS_AS(attn::io::save_safetensors(dir / "x.safetensors", bad_size), attn::value_error);
  CHECK(dir.entries().empty());
}

TEST_CASE("safetensors: the example of docs/io.md") {
  attn::test::TempDir dir;
  const fs::path path = dir / "model.safetensors";
  const attn::index_t V = 5, D = 3;
  attn::Tensor<float> wte = sample<float>(Shape{V, D}, 3);
  attn::Tensor<std::int64_t> tokens(Shape{4}, {1, 2, 3, 4});

  attn::io::Safetensors ckpt;
  ckpt.metadata["step"] = "1000";          // string -> string only
  ckpt.put("wte.weight", wte);             // Tensor<float>   -> F32
  ckpt.put("tokens", tokens);              // Tensor<int64_t> -> I64
  attn::io::save_safetensors(path, ckpt);  // atomic

  const attn::io::Safetensors in = attn::io::load_safetensors(path);  // validated
  attn::Tensor<float> w = in.get<float>("wte.weight", attn::Shape{V, D});
  if (in.contains("tokens")) tokens = in.get<std::int64_t>("tokens");
  CHECK(same_bits(w, wte));
  CHECK(tokens[3] == 4);
  CHECK(in.metadata.at("step") == "1000");
}

TEST_CASE("safetensors: a JSON error inside a long token gives a short message") {
  const std::string header = "{\"" + std::string(100000, 'a');  // unterminated string
  const std::string msg = parse_error(framed(header));
  CHECK(msg.find("header is not valid JSON") != std::string::npos);
  CHECK(msg.size() < 500);
}
