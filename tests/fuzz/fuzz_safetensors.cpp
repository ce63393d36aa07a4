// tests/fuzz/fuzz_safetensors.cpp: the libFuzzer entry point for attn::io::parse_safetensors, and
// the property every accepted file must have: it re-serializes and reads back to the same content.
// Does not catch anything but attn::io_error: any other exception, an abort or a sanitizer report
// is a finding.
#include <attn/io/safetensors.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_safetensors: %s\n", what);
  std::abort();
}

bool same(const attn::io::Safetensors& a, const attn::io::Safetensors& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (const auto& [name, d] : a.tensors) {
    const auto it = b.tensors.find(name);
    if (it == b.tensors.end() || it->second.dtype != d.dtype || it->second.shape != d.shape ||
        it->second.bytes != d.bytes)
      return false;
  }
  return true;
}

// get<T> either returns a tensor of the stored size or throws io_error (rank > 4, huge shape).
template <class T>
void check_get(const attn::io::Safetensors& file, const std::string& name) {
  try {
    const attn::Tensor<T> t = file.get<T>(name);
    if (static_cast<std::size_t>(t.numel()) * sizeof(T) != file.tensors.at(name).bytes.size())
      finding("get returned a tensor whose size differs from the stored bytes");
  } catch (const attn::io_error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  attn::io::Safetensors file;
  try {
    file = attn::io::parse_safetensors(bytes, "fuzz");
  } catch (const attn::io_error&) {
    return 0;  // rejected with the documented exception: fine
  }
  // Accepted: the writer must take it (no exception of any kind), the reader must accept the
  // result and see the same content, and the writer's form is canonical (a fixed point).
  const std::vector<std::byte> again = attn::io::serialize_safetensors(file);
  const attn::io::Safetensors back = attn::io::parse_safetensors(again, "fuzz-reserialized");
  if (!same(file, back)) finding("re-serialized file reads back with different content");
  if (attn::io::serialize_safetensors(back) != again) finding("serialization is not canonical");

  for (const auto& [name, d] : file.tensors) {
    if (d.dtype == "F32") check_get<float>(file, name);
    if (d.dtype == "F64") check_get<double>(file, name);
    if (d.dtype == "I8") check_get<std::int8_t>(file, name);
    if (d.dtype == "I16") check_get<std::int16_t>(file, name);
    if (d.dtype == "I32") check_get<std::int32_t>(file, name);
    if (d.dtype == "I64") check_get<std::int64_t>(file, name);
    if (d.dtype == "U8") check_get<std::uint8_t>(file, name);
    if (d.dtype == "U16") check_get<std::uint16_t>(file, name);
    if (d.dtype == "U32") check_get<std::uint32_t>(file, name);
    if (d.dtype == "U64") check_get<std::uint64_t>(file, name);
    check_get<float>(file, name);  // the dtype-mismatch path for every other dtype
  }
  return 0;
}
