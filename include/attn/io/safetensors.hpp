// attn/io/safetensors.hpp: checkpoints in the safetensors format (the file PyTorch's
// safetensors.torch.load_file reads): a validating reader and a writer byte-identical to the
// reference implementation. Does not memory-map files or convert between dtypes: a tensor comes
// back only as the element type it was stored as.
//
// The format (https://github.com/huggingface/safetensors):
//   8 bytes   N, unsigned 64-bit little-endian: the header length
//   N bytes   UTF-8 JSON object, starting with '{', maybe padded with spaces:
//             {"__metadata__": {"k": "v", ...},
//              "<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [BEGIN, END]}, ...}
//   the rest  the byte buffer; each tensor's data, little-endian, row-major, at [BEGIN, END)
//             relative to the buffer start. The tensors tile the buffer exactly: no overlap, no
//             gap, nothing after the last one.
//
// Checksums: save_safetensors adds, per tensor, the metadata entry "crc32:<name>" = the CRC-32 of
// its stored bytes (the zlib/PNG CRC, Python's zlib.crc32) as 8 hex digits, and one for the
// header, "crc32:__metadata__" = the CRC-32 of every other metadata entry (the tensors'
// checksums included) and every tensor's name, dtype, shape and offsets (detail::header_crc): so
// the whole file is covered. The format allows any string metadata, so other readers load such
// files unchanged; parse_safetensors verifies every checksum present (a flipped bit in a tensor
// is an io_error naming the file and the tensor, a changed setting one naming the header) and
// takes these entries out of Safetensors::metadata. Files without them load as before.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/shape.hpp"
#include "../core/tensor.hpp"
#include "atomic_file.hpp"

// parse_header is inline in header-only mode and an ordinary function of attn::compiled.
#ifdef ATTN_COMPILED
#define ATTN_IO_INLINE
#else
#define ATTN_IO_INLINE inline
#endif

namespace attn::io {

// The reference implementation refuses headers longer than this (100 MB), to bound JSON parsing.
inline constexpr std::uint64_t safetensors_header_limit = 100'000'000;

// One tensor of a safetensors file, as stored: dtype name, shape, little-endian bytes.
struct TensorData {
  std::string dtype;                // "F32", "F64", "I32", "I64", "U8", ...
  std::vector<std::int64_t> shape;  // any rank; attn's Tensor takes rank 0 to 4
  std::vector<std::byte> bytes;     // little-endian raw data, size = numel * dtype size
};

namespace detail {

// A dtype of the format. `order` is its place in the reference implementation's Dtype enum,
// which lists dtypes by increasing alignment; the writer emits larger alignments first.
struct DtypeInfo {
  std::string_view name;
  std::uint64_t size;  // bytes per element
  int order;
};

// Every dtype the format defines with a whole number of bytes per element. (Recent versions
// also define sub-byte floats, F4 and F6_*, which this reader rejects as unknown.)
inline constexpr std::array<DtypeInfo, 15> safetensors_dtypes{{{"BOOL", 1, 0},
                                                               {"U8", 1, 1},
                                                               {"I8", 1, 2},
                                                               {"F8_E5M2", 1, 3},
                                                               {"F8_E4M3", 1, 4},
                                                               {"I16", 2, 5},
                                                               {"U16", 2, 6},
                                                               {"F16", 2, 7},
                                                               {"BF16", 2, 8},
                                                               {"I32", 4, 9},
                                                               {"U32", 4, 10},
                                                               {"F32", 4, 11},
                                                               {"F64", 8, 12},
                                                               {"I64", 8, 13},
                                                               {"U64", 8, 14}}};

inline const DtypeInfo* find_dtype(std::string_view name) {
  for (const DtypeInfo& d : safetensors_dtypes)
    if (d.name == name) return &d;
  return nullptr;
}

// The dtype that stores element type T.
template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr std::string_view name = "F32";
};
template <>
struct dtype_of<double> {
  static constexpr std::string_view name = "F64";
};
template <>
struct dtype_of<std::int8_t> {
  static constexpr std::string_view name = "I8";
};
template <>
struct dtype_of<std::int16_t> {
  static constexpr std::string_view name = "I16";
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr std::string_view name = "I32";
};
template <>
struct dtype_of<std::int64_t> {
  static constexpr std::string_view name = "I64";
};
template <>
struct dtype_of<std::uint8_t> {
  static constexpr std::string_view name = "U8";
};
template <>
struct dtype_of<std::uint16_t> {
  static constexpr std::string_view name = "U16";
};
template <>
struct dtype_of<std::uint32_t> {
  static constexpr std::string_view name = "U32";
};
template <>
struct dtype_of<std::uint64_t> {
  static constexpr std::string_view name = "U64";
};

// Copies n elements between host order and the format's little-endian order.
template <class T>
void copy_little_endian(const void* src, void* dst, std::size_t n) {
  if (n == 0) return;  // src or dst may be null for an empty tensor
  std::memcpy(dst, src, n * sizeof(T));
  if constexpr (std::endian::native == std::endian::big && sizeof(T) > 1) {
    auto* p = static_cast<unsigned char*>(dst);
    for (std::size_t i = 0; i < n; ++i) std::reverse(p + i * sizeof(T), p + (i + 1) * sizeof(T));
  }
}

// True when s is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, <= U+10FFFF),
// the check Rust's str::from_utf8 makes on the header.
inline bool is_valid_utf8(std::string_view s) {
  std::size_t i = 0;
  const std::size_t n = s.size();
  auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  auto cont = [&](std::size_t k) { return k < n && (byte(k) & 0xC0) == 0x80; };
  while (i < n) {
    const unsigned c = byte(i);
    if (c < 0x80) {
      ++i;
    } else if (c >= 0xC2 && c <= 0xDF) {
      if (!cont(i + 1)) return false;
      i += 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      if (!cont(i + 1) || !cont(i + 2)) return false;
      const unsigned c1 = byte(i + 1);
      if (c == 0xE0 && c1 < 0xA0) return false;  // overlong
      if (c == 0xED && c1 > 0x9F) return false;  // UTF-16 surrogate
      i += 3;
    } else if (c >= 0xF0 && c <= 0xF4) {
      if (!cont(i + 1) || !cont(i + 2) || !cont(i + 3)) return false;
      const unsigned c1 = byte(i + 1);
      if (c == 0xF0 && c1 < 0x90) return false;  // overlong
      if (c == 0xF4 && c1 > 0x8F) return false;  // above U+10FFFF
      i += 4;
    } else {
      return false;
    }
  }
  return true;
}

// Appends s as a JSON string literal, escaped exactly as serde_json (the reference writer)
// escapes: \" \\ \b \f \n \r \t, other bytes below 0x20 as \u00xx, everything else verbatim.
inline void append_json_string(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 0xF];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

// A name from a (possibly hostile) file, made safe to print: JSON-quoted, at most ~100 bytes.
inline std::string printable(std::string_view s) {
  constexpr std::size_t max_shown = 100;
  bool cut = false;
  if (s.size() > max_shown) {
    std::size_t k = max_shown;
    while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;  // whole characters
    s = s.substr(0, k);
    cut = true;
  }
  std::string out;
  append_json_string(out, s);
  if (cut) out.insert(out.size() - 1, "...");
  return out;
}

inline std::string shape_text(std::span<const std::int64_t> shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

// a * b into `out` when the product is at most `limit`; false (out untouched) otherwise.
inline bool checked_mul(std::uint64_t a, std::uint64_t b, std::uint64_t limit, std::uint64_t& out) {
  if (a != 0 && b > limit / a) return false;
  out = a * b;
  return true;
}

inline constexpr std::uint64_t int64_limit =
    static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

// Byte size of a tensor of this dtype and shape, or false when it overflows. The element count
// is multiplied in axis order and every partial product must fit in int64 (as the reference
// reader does with usize), so attn::Shape::numel, which multiplies in the same order, cannot
// overflow on a shape that passed.
inline bool tensor_nbytes(const DtypeInfo& dtype, std::span<const std::int64_t> shape,
                          std::uint64_t& nbytes) {
  std::uint64_t numel = 1;
  for (const std::int64_t d : shape)
    if (d < 0 || !checked_mul(numel, static_cast<std::uint64_t>(d), int64_limit, numel))
      return false;
  return checked_mul(numel, dtype.size, int64_limit, nbytes);
}

// CRC-32 as zlib, PNG and Ethernet compute it: the reflected polynomial 0xEDB88320, initial value
// and final XOR 0xFFFFFFFF; crc32("123456789") = 0xCBF43926. One table lookup per byte; slicing
// by 8 bytes: 8 tables, byte k of a word looked up in table 7 - k, the 8 results XORed (the CRC
// of those 8 bytes shifted through the remaining ones): 0.9 GB/s against 0.15 GB/s byte-wise
// (g++ -O2, one core of a loaded AVX-512 machine).
inline constexpr std::array<std::array<std::uint32_t, 256>, 8> crc32_tables = [] {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[0][i] = c;
  }
  for (std::size_t j = 1; j < 8; ++j)
    for (std::size_t i = 0; i < 256; ++i) t[j][i] = (t[j - 1][i] >> 8) ^ t[0][t[j - 1][i] & 0xFF];
  return t;
}();

inline std::uint32_t crc32(std::span<const std::byte> bytes) {
  const auto& t = crc32_tables;
  std::uint32_t c = 0xFFFFFFFFu;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  std::size_t n = bytes.size();
  for (; n >= 8; p += 8, n -= 8) {
    const std::uint32_t lo = c ^ (std::uint32_t(p[0]) | std::uint32_t(p[1]) << 8 |
                                  std::uint32_t(p[2]) << 16 | std::uint32_t(p[3]) << 24);
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
        t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
  }
  for (; n > 0; ++p, --n) c = t[0][(c ^ *p) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

// The metadata key of a tensor's checksum, and its value: 8 lowercase hex digits.
inline constexpr std::string_view checksum_prefix = "crc32:";
inline std::string checksum_text(std::uint32_t crc) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out(8, '0');
  for (int i = 7; i >= 0; --i, crc >>= 4) out[static_cast<std::size_t>(i)] = hex[crc & 0xF];
  return out;
}

// The metadata key of the header's checksum: "__metadata__" can name no tensor, so no tensor's
// checksum has this key.
inline constexpr std::string_view header_checksum_key = "crc32:__metadata__";

// Where one tensor lies, for the header's checksum.
struct TensorLayout {
  std::string_view name, dtype;
  const std::vector<std::int64_t>* shape;
  std::uint64_t begin, end;
};

// The CRC-32 of what a header says, in a form that does not depend on how its JSON is spelled:
// every metadata entry but the header checksum itself, in key order, then every tensor's name,
// dtype, shape and data offsets, in name order; each field ends in a 0 byte, so that no two
// headers give the same text. The tensors' own checksums are metadata entries, so with them the
// header checksum covers the whole file.
inline std::uint32_t header_crc(const std::map<std::string, std::string>& metadata,
                                std::vector<TensorLayout> tensors) {
  std::string text;
  const auto field = [&](std::string_view f) { text.append(f).push_back('\0'); };
  for (const auto& [k, v] : metadata)
    if (k != header_checksum_key) field(k), field(v);
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorLayout& a, const TensorLayout& b) { return a.name < b.name; });
  for (const TensorLayout& t : tensors) {
    field(t.name);
    field(t.dtype);
    for (const std::int64_t d : *t.shape) field(std::to_string(d));
    field("@");
    field(std::to_string(t.begin));
    field(std::to_string(t.end));
  }
  return crc32(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

// One tensor entry of a header while it is being read.
struct HeaderEntry {
  std::string name;
  const DtypeInfo* dtype = nullptr;
  std::vector<std::int64_t> shape;
  std::array<std::uint64_t, 2> offsets{};
  std::size_t offset_count = 0;
  bool has_dtype = false, has_shape = false, has_offsets = false;
};

struct ParsedHeader {
  std::map<std::string, std::string> metadata;
  std::vector<HeaderEntry> entries;  // sorted by data_offsets
};

// Validates a header (the N bytes after the length) describing a buffer of `buffer_size` bytes
// and returns its entries; throws io_error, naming `source`, at the first thing the format does
// not allow. Defined in safetensors_json.hpp (the only part of attn that parses JSON), which this
// header includes in header-only mode; with the compiled part (ATTN_COMPILED) it is compiled
// once in attn::compiled, so programs do not compile nlohmann_json's parser.
ATTN_IO_INLINE ParsedHeader parse_header(std::string_view header, std::uint64_t buffer_size,
                                         std::string_view source);

}  // namespace detail

// Element types a Safetensors file stores and returns (each maps to one dtype).
template <class T>
concept SafetensorsElement = requires {
  detail::dtype_of<T>::name;
};

// The contents of a safetensors file: string metadata and named tensors.
struct Safetensors {
  std::map<std::string, std::string> metadata;  // "__metadata__"
  // Written in the reference writer's order: larger dtype alignment first, then by name, so every
  // tensor starts aligned to its element size (the header length is a multiple of 8).
  std::map<std::string, TensorData> tensors;
  std::string source;  // the file it was read from, for error messages; "" when built in memory

  // Stores `t` under `name` (replacing a tensor of that name) with the dtype of T.
  template <SafetensorsElement T>
  void put(const std::string& name, const Tensor<T>& t) {
    ATTN_CHECK(name != "__metadata__", value_error,
               "Safetensors::put: \"__metadata__\" is reserved and cannot name a tensor");
    TensorData d;
    d.dtype = std::string(detail::dtype_of<T>::name);
    d.shape.assign(t.shape().dims().begin(), t.shape().dims().end());
    d.bytes.resize(static_cast<std::size_t>(t.numel()) * sizeof(T));
    detail::copy_little_endian<T>(t.data(), d.bytes.data(), static_cast<std::size_t>(t.numel()));
    tensors.insert_or_assign(name, std::move(d));
  }

  // The tensor `name` as a Tensor<T>. Throws io_error naming the file and the tensor when there
  // is no such tensor, when its dtype is not exactly T's, or when its rank exceeds 4.
  template <SafetensorsElement T>
  Tensor<T> get(const std::string& name) const {
    const TensorData& d = find(name);
    ATTN_CHECK(d.dtype == detail::dtype_of<T>::name, io_error, where(), ": tensor ",
               detail::printable(name), " has dtype ", detail::printable(d.dtype), ", expected ",
               detail::dtype_of<T>::name);
    ATTN_CHECK(d.shape.size() <= static_cast<std::size_t>(Shape::max_rank), io_error, where(),
               ": tensor ", detail::printable(name), " has rank ", d.shape.size(), " (shape ",
               detail::shape_text(d.shape), "); attn tensors have rank at most ", Shape::max_rank);
    // Every sub-product of the dimensions must fit in int64 for attn::Shape's arithmetic
    // (strides multiply trailing dimensions); a file with a 0 dimension can still list huge ones.
    std::uint64_t nonzero = 1;
    for (const std::int64_t dim : d.shape)
      ATTN_CHECK(
          dim >= 0 && (dim == 0 || detail::checked_mul(nonzero, static_cast<std::uint64_t>(dim),
                                                       detail::int64_limit, nonzero)),
          io_error, where(), ": tensor ", detail::printable(name), " has shape ",
          detail::shape_text(d.shape), ", too large for an attn tensor");
    const Shape shape(std::span<const index_t>(d.shape.data(), d.shape.size()));
    ATTN_CHECK(d.bytes.size() == static_cast<std::size_t>(shape.numel()) * sizeof(T), io_error,
               where(), ": tensor ", detail::printable(name), " holds ", d.bytes.size(),
               " bytes, but shape ", shape, " of ", detail::dtype_of<T>::name, " needs ",
               shape.numel() * static_cast<index_t>(sizeof(T)));
    Tensor<T> t(shape);
    detail::copy_little_endian<T>(d.bytes.data(), t.data(), static_cast<std::size_t>(t.numel()));
    return t;
  }

  // As get(name), and the shape must equal `expected` (io_error naming both shapes otherwise).
  template <SafetensorsElement T>
  Tensor<T> get(const std::string& name, const Shape& expected) const {
    const TensorData& d = find(name);
    ATTN_CHECK(d.shape.size() == static_cast<std::size_t>(expected.rank()) &&
                   std::equal(d.shape.begin(), d.shape.end(), expected.dims().begin()),
               io_error, where(), ": tensor ", detail::printable(name), " has shape ",
               detail::shape_text(d.shape), ", expected ", expected);
    return get<T>(name);
  }

  bool contains(const std::string& name) const { return tensors.count(name) != 0; }

 private:
  std::string where() const { return source.empty() ? std::string("safetensors") : source; }

  const TensorData& find(const std::string& name) const {
    const auto it = tensors.find(name);
    if (it != tensors.end()) return it->second;
    std::string names;
    std::size_t shown = 0;
    for (const auto& [n, d] : tensors) {
      if (shown == 8) {
        names += ", ...";
        break;
      }
      names += (shown++ ? ", " : "") + detail::printable(n);
    }
    throw io_error(attn::detail::message(where(), ": no tensor named ", detail::printable(name),
                                         " (the file holds ", tensors.size(), " tensors",
                                         tensors.empty() ? "" : ": ", names, ")"));
  }
};

// Reads and validates a whole safetensors file held in memory. Every problem throws io_error
// "<source_name>: <what is wrong>"; nothing is read outside `bytes`, and the memory allocated is
// proportional to bytes.size().
inline Safetensors parse_safetensors(std::span<const std::byte> bytes,
                                     std::string_view source_name) {
  const std::uint64_t size = bytes.size();
  ATTN_CHECK(size >= 8, io_error, source_name, ": file is too short (", size,
             " bytes) to hold the 8-byte header length");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<std::uint64_t>(bytes[i]);
  ATTN_CHECK(n != 0, io_error, source_name,
             ": header length is 0 (the header must be a JSON object)");
  ATTN_CHECK(n <= safetensors_header_limit, io_error, source_name, ": header length ", n,
             " exceeds the limit of ", safetensors_header_limit, " bytes");
  ATTN_CHECK(n <= size - 8, io_error, source_name, ": header length ", n,
             " runs past the end of the file (", size, " bytes)");
  const auto* header = reinterpret_cast<const char*>(bytes.data()) + 8;
  const std::span<const std::byte> buffer = bytes.subspan(8 + static_cast<std::size_t>(n));
  detail::ParsedHeader parsed = detail::parse_header(
      std::string_view(header, static_cast<std::size_t>(n)), buffer.size(), source_name);

  // The header's checksum (see the top of this file), when the file has one: a changed setting
  // or vocabulary character is an io_error, not a silently different run.
  if (const auto h = parsed.metadata.find(std::string(detail::header_checksum_key));
      h != parsed.metadata.end()) {
    std::vector<detail::TensorLayout> layout;
    layout.reserve(parsed.entries.size());
    for (const detail::HeaderEntry& e : parsed.entries)
      layout.push_back({e.name, e.dtype->name, &e.shape, e.offsets[0], e.offsets[1]});
    const std::string actual = detail::checksum_text(detail::header_crc(parsed.metadata, layout));
    ATTN_CHECK(
        h->second == actual, io_error, source_name,
        ": the header is corrupt (a setting, the vocabulary or a tensor's place changed): it "
        "has CRC-32 ",
        actual, ", the file records ", detail::printable(h->second));
    parsed.metadata.erase(h);
  }

  Safetensors file;
  file.source = std::string(source_name);
  file.metadata = std::move(parsed.metadata);
  for (detail::HeaderEntry& e : parsed.entries) {
    TensorData d;
    d.dtype = std::string(e.dtype->name);
    d.shape = std::move(e.shape);
    const auto data = buffer.subspan(static_cast<std::size_t>(e.offsets[0]),
                                     static_cast<std::size_t>(e.offsets[1] - e.offsets[0]));
    d.bytes.assign(data.begin(), data.end());
    file.tensors.emplace(std::move(e.name), std::move(d));
  }
  // The checksums save_safetensors writes (see the top of this file): each is verified, then
  // taken out of the metadata, so what a caller sees and saves again is the file's own metadata.
  for (auto it = file.metadata.begin(); it != file.metadata.end();) {
    if (!it->first.starts_with(detail::checksum_prefix)) {
      ++it;
      continue;
    }
    const std::string name = it->first.substr(detail::checksum_prefix.size());
    const auto tensor = file.tensors.find(name);
    ATTN_CHECK(tensor != file.tensors.end(), io_error, source_name, ": metadata ",
               detail::printable(it->first), " is the checksum of tensor ", detail::printable(name),
               ", which the file does not hold");
    const std::string actual = detail::checksum_text(detail::crc32(tensor->second.bytes));
    ATTN_CHECK(it->second == actual, io_error, source_name, ": tensor ", detail::printable(name),
               " is corrupt: its data has CRC-32 ", actual, ", the file records ",
               detail::printable(it->second));
    it = file.metadata.erase(it);
  }
  return file;
}

// Whether a file written by serialize_safetensors / save_safetensors holds the per-tensor
// checksums described at the top of this file.
enum class Checksums { omit, add };

// The bytes of `file` in the safetensors format, identical to what the reference writer
// (Python safetensors.torch.save_file / numpy.save_file) produces for the same content: compact
// JSON, "__metadata__" first (omitted when empty), tensors ordered by decreasing dtype alignment
// then name, header padded with spaces to a multiple of 8. With Checksums::add the metadata also
// gets a "crc32:<name>" entry per tensor (the content is then the file's plus those entries).
// Throws value_error when the content cannot be written: an unknown dtype, a byte count that
// does not match the shape, a name that is "__metadata__" or not valid UTF-8, a metadata key
// starting with "crc32:" (reserved for the checksums).
inline std::vector<std::byte> serialize_safetensors(const Safetensors& file,
                                                    Checksums checksums = Checksums::omit) {
  struct Item {
    const std::string* name;
    const TensorData* data;
    const detail::DtypeInfo* dtype;
  };
  std::vector<Item> items;
  items.reserve(file.tensors.size());
  for (const auto& [name, d] : file.tensors) {
    const std::string n = detail::printable(name);
    ATTN_CHECK(name != "__metadata__", value_error,
               "serialize_safetensors: \"__metadata__\" cannot name a tensor");
    ATTN_CHECK(detail::is_valid_utf8(name), value_error, "serialize_safetensors: tensor name ", n,
               " is not valid UTF-8");
    const detail::DtypeInfo* dtype = detail::find_dtype(d.dtype);
    ATTN_CHECK(dtype, value_error, "serialize_safetensors: tensor ", n, " has unknown dtype ",
               detail::printable(d.dtype));
    std::uint64_t nbytes = 0;
    ATTN_CHECK(detail::tensor_nbytes(*dtype, d.shape, nbytes), value_error,
               "serialize_safetensors: tensor ", n, " has invalid shape ",
               detail::shape_text(d.shape), " (a negative dimension, or a size that overflows)");
    ATTN_CHECK(d.bytes.size() == nbytes, value_error, "serialize_safetensors: tensor ", n,
               " holds ", d.bytes.size(), " bytes, but dtype ", d.dtype, " and shape ",
               detail::shape_text(d.shape), " need ", nbytes);
    items.push_back({&name, &d, dtype});
  }
  for (const auto& [k, v] : file.metadata) {
    ATTN_CHECK(detail::is_valid_utf8(k) && detail::is_valid_utf8(v), value_error,
               "serialize_safetensors: metadata entry ", detail::printable(k),
               " is not valid UTF-8");
    ATTN_CHECK(!k.starts_with(detail::checksum_prefix), value_error,
               "serialize_safetensors: metadata key ", detail::printable(k),
               " is reserved for the tensors' checksums (prefix \"crc32:\")");
  }
  // std::map already orders by name (byte-wise, as Rust compares strings); a stable sort by
  // decreasing alignment keeps that order within each dtype.
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.dtype->order > b.dtype->order; });
  std::map<std::string, std::string> with_checksums;
  if (checksums == Checksums::add) {
    with_checksums = file.metadata;
    for (const auto& [name, d] : file.tensors)
      with_checksums[std::string(detail::checksum_prefix) + name] =
          detail::checksum_text(detail::crc32(d.bytes));
    std::vector<detail::TensorLayout> layout;
    layout.reserve(items.size());
    std::uint64_t at = 0;
    for (const Item& it : items) {
      layout.push_back({*it.name, it.dtype->name, &it.data->shape, at, at + it.data->bytes.size()});
      at += it.data->bytes.size();
    }
    with_checksums[std::string(detail::header_checksum_key)] =
        detail::checksum_text(detail::header_crc(with_checksums, layout));
  }
  const std::map<std::string, std::string>& metadata =
      checksums == Checksums::add ? with_checksums : file.metadata;

  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) header += ',';
      first = false;
      detail::append_json_string(header, k);
      header += ':';
      detail::append_json_string(header, v);
    }
    header += '}';
  }
  std::uint64_t offset = 0;
  for (const Item& it : items) {
    if (header.size() > 1) header += ',';
    detail::append_json_string(header, *it.name);
    header += ":{\"dtype\":\"";
    header += it.dtype->name;
    header += "\",\"shape\":[";
    for (std::size_t i = 0; i < it.data->shape.size(); ++i) {
      if (i) header += ',';
      header += std::to_string(it.data->shape[i]);
    }
    header += "],\"data_offsets\":[";
    header += std::to_string(offset);
    header += ',';
    offset += it.data->bytes.size();
    header += std::to_string(offset);
    header += "]}";
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');  // the reference writer's 8-byte alignment
  ATTN_CHECK(header.size() <= safetensors_header_limit, value_error,
             "serialize_safetensors: the header would be ", header.size(),
             " bytes, over the format's limit of ", safetensors_header_limit);

  std::vector<std::byte> out;
  out.reserve(8 + header.size() + static_cast<std::size_t>(offset));
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((n >> (8 * i)) & 0xFF));
  const auto* h = reinterpret_cast<const std::byte*>(header.data());
  out.insert(out.end(), h, h + header.size());
  for (const Item& it : items) out.insert(out.end(), it.data->bytes.begin(), it.data->bytes.end());
  return out;
}

// Writes `file` to `path` atomically (see write_file_atomically): a crash leaves the old
// checkpoint or the new one, never a torn one. With a checksum per tensor unless told otherwise
// (Checksums::omit writes exactly what the reference writer would).
inline void save_safetensors(const std::filesystem::path& path, const Safetensors& file,
                             Checksums checksums = Checksums::add) {
  write_file_atomically(path, serialize_safetensors(file, checksums));
}

// Reads and validates the safetensors file at `path` (see parse_safetensors); error messages
// start with the path.
inline Safetensors load_safetensors(const std::filesystem::path& path) {
  const std::vector<std::byte> bytes = read_file(path);
  return parse_safetensors(bytes, path.string());
}

}  // namespace attn::io

#ifndef ATTN_COMPILED
#include "safetensors_json.hpp"
#endif
