// attn/io/safetensors_json.hpp: the JSON half of the safetensors reader, parse_header with
// nlohmann_json's SAX parser. Included by safetensors.hpp in header-only mode, compiled into
// attn::compiled otherwise (src/safetensors.cpp); include safetensors.hpp, not this file.
// Does not write JSON (serialize_safetensors writes the header itself, byte for byte).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "safetensors.hpp"

namespace attn::io::detail {

// A SAX handler for nlohmann::json that reads a header straight into HeaderEntry records and
// throws io_error at the first thing the format does not allow. SAX rather than a DOM: it sees
// duplicate keys (a DOM silently keeps one), it stops at the first value of the wrong kind
// (nesting depth never exceeds 3), and memory stays proportional to what a header describes.
class HeaderReader {
 public:
  using json = nlohmann::json;

  HeaderReader(std::string_view source, std::uint64_t buffer_size)
      : source_(source), buffer_size_(buffer_size) {}

  bool null() { return wrong_value("null"); }
  bool boolean(bool) { return wrong_value("a boolean"); }
  bool number_integer(json::number_integer_t v) {
    if (v >= 0) return number_unsigned(static_cast<json::number_unsigned_t>(v));
    return wrong_value("a negative number");
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (where_ == Where::shape) {
      if (v > int64_limit)
        fail("tensor ", printable(name_), ": shape dimension ", v, " is too large (over 2^63 - 1)");
      entry_.shape.push_back(static_cast<std::int64_t>(v));
      return true;
    }
    if (where_ == Where::offsets) {
      if (entry_.offset_count == 2)
        fail("tensor ", printable(name_),
             ": data_offsets must be a list of two non-negative integers [begin, end], found more");
      entry_.offsets[entry_.offset_count++] = v;
      return true;
    }
    return wrong_value("a number");
  }
  bool number_float(json::number_float_t, const json::string_t&) {
    return wrong_value("a number that is not an integer");
  }
  bool string(json::string_t& v) {
    if (where_ == Where::metadata) {
      metadata_[meta_key_] = std::move(v);
      return true;
    }
    if (where_ == Where::entry && field_ == Field::dtype) {
      entry_.dtype = find_dtype(v);
      if (!entry_.dtype)
        fail("tensor ", printable(name_), ": unknown dtype ", printable(v),
             " (known: BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 BF16 I32 U32 F32 F64 I64 U64)");
      return true;
    }
    return wrong_value("a string");
  }
  bool binary(json::binary_t&) { return wrong_value("binary data"); }  // never from JSON text

  bool start_object(std::size_t) {
    if (where_ == Where::start) {
      where_ = Where::top;
      return true;
    }
    if (where_ == Where::top) {
      if (name_ == "__metadata__") {
        where_ = Where::metadata;
      } else {
        where_ = Where::entry;
        entry_ = HeaderEntry{};
        entry_.name = name_;
      }
      return true;
    }
    return wrong_value("an object");
  }
  bool key(json::string_t& k) {
    if (where_ == Where::top) {
      if (!names_.insert(k).second) fail("duplicate key ", printable(k), " in the header");
      name_ = std::move(k);
    } else if (where_ == Where::entry) {
      bool* seen = nullptr;
      if (k == "dtype") {
        field_ = Field::dtype;
        seen = &entry_.has_dtype;
      } else if (k == "shape") {
        field_ = Field::shape;
        seen = &entry_.has_shape;
      } else if (k == "data_offsets") {
        field_ = Field::offsets;
        seen = &entry_.has_offsets;
      } else {
        fail("tensor ", printable(name_), ": unexpected key ", printable(k),
             " (a tensor entry has exactly \"dtype\", \"shape\" and \"data_offsets\")");
      }
      if (*seen) fail("tensor ", printable(name_), ": duplicate key ", printable(k));
      *seen = true;
    } else {  // Where::metadata: start_object/start_array admit no other place a key can occur
      if (metadata_.count(k)) fail("duplicate key ", printable(k), " in __metadata__");
      meta_key_ = std::move(k);
      metadata_[meta_key_];  // present from now on, so a repeat is seen even before its value
    }
    return true;
  }
  bool end_object() {
    if (where_ == Where::entry) {
      finish_entry();
      where_ = Where::top;
    } else if (where_ == Where::metadata) {
      where_ = Where::top;
    } else {
      where_ = Where::done;
    }
    return true;
  }
  bool start_array(std::size_t) {
    if (where_ == Where::entry && field_ == Field::shape) {
      where_ = Where::shape;
      return true;
    }
    if (where_ == Where::entry && field_ == Field::offsets) {
      where_ = Where::offsets;
      return true;
    }
    return wrong_value("a list");
  }
  bool end_array() {
    if (where_ == Where::offsets && entry_.offset_count != 2)
      fail("tensor ", printable(name_),
           ": data_offsets must be a list of two non-negative integers [begin, end], found ",
           entry_.offset_count);
    where_ = Where::entry;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const json::exception& e) {
    // nlohmann quotes the whole last token, which can be a 100 MB string: keep the start.
    std::string what = e.what();
    if (what.size() > 300) {
      std::size_t cut = 300;
      while (cut > 0 && (static_cast<unsigned char>(what[cut]) & 0xC0) == 0x80) --cut;
      what = what.substr(0, cut) + "...";
    }
    fail("header is not valid JSON (at byte ", position, "): ", what);
  }

  // The result, once nlohmann::json::sax_parse has returned.
  ParsedHeader finish() {
    if (where_ != Where::done) fail("header is not a complete JSON object");
    check_coverage();
    return {std::move(metadata_), std::move(entries_)};
  }

 private:
  enum class Where { start, top, entry, shape, offsets, metadata, done };
  enum class Field { dtype, shape, offsets };

  template <class... Args>
  [[noreturn]] void fail(Args&&... args) const {
    throw io_error(attn::detail::message(source_, ": ", std::forward<Args>(args)...));
  }

  // A value of kind `what` where the format wants something else; says what it wants there.
  bool wrong_value(const char* what) const {
    switch (where_) {
      case Where::top:
        if (name_ == "__metadata__")
          fail("__metadata__ must be an object mapping strings to strings, not ", what);
        fail("entry ", printable(name_),
             " must be an object {\"dtype\", \"shape\", \"data_offsets\"}", ", not ", what);
      case Where::entry:
      case Where::shape:
      case Where::offsets:
        if (field_ == Field::dtype)
          fail("tensor ", printable(name_), ": dtype must be a string, not ", what);
        if (field_ == Field::shape)
          fail("tensor ", printable(name_),
               ": shape must be a list of non-negative integers, found ", what);
        fail("tensor ", printable(name_),
             ": data_offsets must be a list of two non-negative integers [begin, end], found ",
             what);
      case Where::metadata:
        fail("__metadata__ must map strings to strings, but the value of ", printable(meta_key_),
             " is ", what);
      default:
        fail("header must be a JSON object, not ", what);
    }
  }

  // Checks one complete entry: all fields present, size consistent, inside the buffer.
  void finish_entry() {
    const auto& e = entry_;
    const std::string n = printable(name_);
    if (!e.has_dtype) fail("tensor ", n, ": missing \"dtype\"");
    if (!e.has_shape) fail("tensor ", n, ": missing \"shape\"");
    if (!e.has_offsets) fail("tensor ", n, ": missing \"data_offsets\"");
    std::uint64_t nbytes = 0;
    if (!tensor_nbytes(*e.dtype, e.shape, nbytes))
      fail("tensor ", n, ": shape ", shape_text(e.shape), " overflows: its size in bytes (dtype ",
           e.dtype->name, ") does not fit in 63 bits");
    const auto [begin, end] = e.offsets;
    if (begin > end) fail("tensor ", n, ": data_offsets [", begin, ", ", end, "] has begin > end");
    if (end > buffer_size_)
      fail("tensor ", n, ": data_offsets [", begin, ", ", end,
           "] run past the end of the data buffer (", buffer_size_, " bytes)");
    if (end - begin != nbytes)
      fail("tensor ", n, ": data_offsets [", begin, ", ", end, "] hold ", end - begin,
           " bytes, but dtype ", e.dtype->name, " and shape ", shape_text(e.shape), " need ",
           nbytes, " bytes (size mismatch)");
    entries_.push_back(std::move(entry_));
  }

  // The tensors must tile the buffer: sorted by offsets, each begins where the previous ended,
  // the first at 0 and the last ends at the buffer's end. (No overlap, no gap: a file cannot
  // hide data between tensors, and loading never needs more memory than the file's size.)
  void check_coverage() {
    std::stable_sort(entries_.begin(), entries_.end(),
                     [](const auto& a, const auto& b) { return a.offsets < b.offsets; });
    std::uint64_t pos = 0;
    const HeaderEntry* prev = nullptr;
    for (const HeaderEntry& e : entries_) {
      if (e.offsets[0] < pos)
        fail("tensors ", printable(prev->name), " (data_offsets [", prev->offsets[0], ", ",
             prev->offsets[1], "]) and ", printable(e.name), " (data_offsets [", e.offsets[0], ", ",
             e.offsets[1], "]) overlap");
      if (e.offsets[0] > pos)
        fail("bytes [", pos, ", ", e.offsets[0], ") of the data buffer belong to no tensor (a gap",
             " before tensor ", printable(e.name), "); the tensors must cover the buffer exactly");
      pos = e.offsets[1];
      prev = &e;
    }
    if (pos != buffer_size_)
      fail("bytes [", pos, ", ", buffer_size_, ") of the data buffer belong to no tensor (",
           buffer_size_ - pos, " bytes after the last tensor); the tensors must cover the buffer",
           " exactly");
  }

  std::string_view source_;
  std::uint64_t buffer_size_;
  Where where_ = Where::start;
  Field field_ = Field::dtype;
  std::string name_;      // the current top-level key
  std::string meta_key_;  // the current key inside __metadata__
  HeaderEntry entry_;
  std::set<std::string> names_;
  std::map<std::string, std::string> metadata_;
  std::vector<HeaderEntry> entries_;
};

// parse_header, declared in safetensors.hpp.
ATTN_IO_INLINE ParsedHeader parse_header(std::string_view header, std::uint64_t buffer_size,
                                         std::string_view source) {
  ATTN_CHECK(is_valid_utf8(header), io_error, source, ": header is not valid UTF-8");
  ATTN_CHECK(!header.empty() && header.front() == '{', io_error, source,
             ": header does not start with '{' (it must be a JSON object)");
  // A NUL byte is never valid JSON text (inside strings it must be escaped), but nlohmann's lexer
  // takes it for the end of the input, so "{}\0<anything>" would pass without this check.
  const std::size_t nul = header.find('\0');
  ATTN_CHECK(nul == std::string_view::npos, io_error, source,
             ": header is not valid JSON: a NUL byte at byte ", nul);
  HeaderReader reader(source, buffer_size);
  nlohmann::json::sax_parse(header.data(), header.data() + header.size(), &reader);
  return reader.finish();
}

}  // namespace attn::io::detail
