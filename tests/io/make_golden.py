#!/usr/bin/env python3
# Writes tests/io/data/golden.safetensors by hand (struct + json), laid out exactly as the
# reference writer (huggingface/safetensors, used by safetensors.torch.save_file) lays out a file,
# and tests/io/data/checksummed.safetensors: the same content with the checksums attn's
# save_safetensors adds (one per tensor, one of the header), computed here independently of attn.
# Does not need torch or safetensors; when the safetensors package is installed it also checks
# that the package reads the file back and re-serializes it to the same bytes.
#
# Usage: python3 tests/io/make_golden.py           (rewrites the golden file)
#        python3 tests/io/make_golden.py --check   (exit 1 if the committed file differs)
#
# The reference writer's layout (safetensors/src/tensor.rs, `prepare` and `serialize`):
#   * tensors sorted by decreasing dtype alignment (the order of its Dtype enum, reversed), then
#     by name (byte-wise); the data buffer holds them in that order, back to back;
#   * header = compact JSON (serde_json: no spaces, non-ASCII verbatim, control characters as
#     \u00xx), "__metadata__" first when given, each entry's keys as dtype, shape, data_offsets;
#   * header padded with spaces (0x20) to a multiple of 8 bytes, preceded by its length as a
#     little-endian u64.
import json
import pathlib
import struct
import sys
import zlib

# The reference implementation's Dtype enum order (increasing alignment).
DTYPE_ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16",
               "I32", "U32", "F32", "F64", "I64", "U64"]
STRUCT_CODE = {"F32": "f", "F64": "d", "I32": "i", "I64": "q", "U8": "B"}

# The content the C++ test (tests/io/test_safetensors.cpp, "golden") rebuilds and compares.
TENSORS = {
    "embed.weight": ("F32", [2, 3], [0.5, -1.25, 3.0, 0.001, -2.0, 100.0]),
    "block.0.attn.w": ("F32", [1, 2, 1, 2], [1.0, 2.0, 3.0, 4.0]),
    "ln.bias": ("F64", [2], [3.141592653589793, -2.5]),
    "tokens": ("I32", [3], [-1, 0, 2147483647]),
    "step": ("I64", [], [1234567890123]),
    "mask": ("U8", [4], [0, 1, 254, 255]),
    "empty": ("F32", [0, 3], []),
    "\u00fcn\u00efcode": ("F32", [1], [7.0]),
}
METADATA = {"format": "pt"}


def serialize(tensors, metadata=None):
    """The bytes of a safetensors file holding `tensors` {name: (dtype, shape, values)}."""
    items = sorted(tensors.items(),
                   key=lambda kv: (-DTYPE_ORDER.index(kv[1][0]), kv[0].encode("utf-8")))
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    data = b""
    for name, (dtype, shape, values) in items:
        raw = struct.pack("<%d%s" % (len(values), STRUCT_CODE[dtype]), *values)
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def with_checksums(tensors, metadata):
    """`metadata` plus the entries attn's save_safetensors adds: "crc32:<name>" = the CRC-32 of
    each tensor's bytes, and "crc32:__metadata__" = the CRC-32 of every other metadata entry and
    every tensor's name, dtype, shape and data offsets (keys and names in byte order, each field
    followed by a zero byte, "@" between a shape and its offsets)."""
    blob = serialize(tensors, metadata)
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = dict(metadata)
    for name in tensors:
        begin, end = header[name]["data_offsets"]
        out["crc32:" + name] = "%08x" % zlib.crc32(data[begin:end])
    text = b""
    for key in sorted(out, key=lambda k: k.encode("utf-8")):
        text += key.encode("utf-8") + b"\0" + out[key].encode("utf-8") + b"\0"
    for name in sorted(tensors, key=lambda k: k.encode("utf-8")):
        entry = header[name]
        text += name.encode("utf-8") + b"\0" + entry["dtype"].encode() + b"\0"
        for d in entry["shape"]:
            text += str(d).encode() + b"\0"
        text += b"@\0" + b"".join(str(o).encode() + b"\0" for o in entry["data_offsets"])
    out["crc32:__metadata__"] = "%08x" % zlib.crc32(text)
    return {k: out[k] for k in sorted(out, key=lambda k: k.encode("utf-8"))}  # as attn orders them


def check_with_safetensors(blob):
    try:
        from safetensors.numpy import load, save
    except ImportError:
        print("make_golden: safetensors not installed; skipped the cross-check")
        return
    arrays = load(blob)
    assert sorted(arrays) == sorted(TENSORS), sorted(arrays)
    again = save(arrays, metadata=METADATA)
    assert again == blob, "safetensors re-serializes the golden file differently"
    print("make_golden: safetensors reads the file and writes the same bytes")


def main():
    data = pathlib.Path(__file__).resolve().parent / "data"
    blob = serialize(TENSORS, METADATA)
    files = {data / "golden.safetensors": blob,
             data / "checksummed.safetensors": serialize(TENSORS, with_checksums(TENSORS, METADATA))}
    for path, content in files.items():
        if "--check" in sys.argv[1:]:
            if path.read_bytes() != content:
                print("make_golden: %s differs from what this script writes" % path)
                return 1
            print("make_golden: %s is up to date" % path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            print("make_golden: wrote %s (%d bytes)" % (path, len(content)))
    check_with_safetensors(blob)
    return 0


if __name__ == "__main__":
    sys.exit(main())
