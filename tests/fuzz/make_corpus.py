#!/usr/bin/env python3
# Writes the seed corpus of the safetensors fuzzer (tests/fuzz/corpus_safetensors/): a few small
# valid files in the reference layout and a few invalid ones, each one near a validation rule.
# Does not fuzz anything itself; run it again only to change the seeds (they are committed).
import pathlib
import struct
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "io"))
from make_golden import TENSORS, METADATA, serialize, with_checksums  # noqa: E402


def framed(header, buffer=b""):
    header = header.encode("utf-8") if isinstance(header, str) else header
    return struct.pack("<Q", len(header)) + header + buffer


def main():
    out = pathlib.Path(__file__).resolve().parent / "corpus_safetensors"
    out.mkdir(exist_ok=True)
    seeds = {
        # valid
        "valid_golden": serialize(TENSORS, METADATA),
        "valid_empty": serialize({}),
        "valid_metadata_only": serialize({}, {"a": "b", "c": "d"}),
        "valid_scalar_i64": serialize({"s": ("I64", [], [7])}),
        "valid_two_f32": serialize({"w": ("F32", [2, 2], [1, 2, 3, 4]),
                                    "b": ("F32", [2], [0.5, -0.5])}),
        "valid_rank5": serialize({"r": ("U8", [1, 1, 1, 1, 2], [1, 2])}),
        "valid_bf16_unordered": framed(
            '{"b":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]},'
            '"a":{"dtype":"I32","shape":[],"data_offsets":[0,4]}}', bytes(range(8))),
        # a checksum as save_safetensors writes it: zlib.crc32(b"\x00") = 0xd202ef8d
        "valid_checksum": serialize({"a": ("U8", [1], [0])}, {"crc32:a": "d202ef8d"}),
        # both checksums as save_safetensors writes them (the header's covers the metadata)
        "valid_header_checksum": serialize(TENSORS, with_checksums(TENSORS, METADATA)),
        # invalid, each near one rule
        "bad_overlap": framed(
            '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
            '"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}', bytes(12)),
        "bad_gap": framed('{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', bytes(2)),
        "bad_duplicate": framed(
            '{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},'
            '"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}'),
        "bad_overflow": framed(
            '{"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,0]}}'),
        "bad_metadata": framed('{"__metadata__":{"k":1}}'),
        "bad_length": struct.pack("<Q", 1 << 40) + b"{}",
        "bad_truncated": serialize(TENSORS, METADATA)[:300],
        "bad_checksum": serialize({"a": ("U8", [1], [1])}, {"crc32:a": "d202ef8d"}),
        # a metadata value changed after the header's checksum was taken
        "bad_header_checksum": serialize(TENSORS, dict(with_checksums(TENSORS, METADATA),
                                                       **{next(iter(METADATA)): "changed"})),
    }
    for name, blob in seeds.items():
        (out / name).write_bytes(blob)
    print("make_corpus: wrote %d seeds to %s" % (len(seeds), out))


if __name__ == "__main__":
    main()
