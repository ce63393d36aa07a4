#!/usr/bin/env python3
"""The learning rate of every step of `birthplace pretrain` and `finetune` against the problem
set's trainer, written out here from its description (not from attn's code).

The course's trainer (minGPT of 2020) runs step k at the rate it set after step k - 1 from the
tokens seen so far: every target position of every row, PAD included, and its datasets' targets
are block - 1 = 127 characters a row (each example is padded to the block and split into input
[:-1] and target [1:]). Step 0 runs at the full rate the optimizer was built with. The rate for
t tokens: lr * t / warmup during the warmup, then lr * max(0.1, (1 + cos(pi * progress)) / 2)
with progress = (t - warmup) / (final - warmup), final = 200 * documents * block (scaled to the
run's epochs as birthplace documents). A checkpoint written before attn counted block - 1 (no
train.tokens_per_example in its metadata) resumes counting the whole block, as it was trained.

    birthplace_schedule.py BIRTHPLACE DATA_DIR
"""
import csv
import json
import math
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

BLOCK = 128


def course_rates(lr, warmup, final, rows):
    """rates(per_row): the rate of each step of batches of `rows` rows, per_row tokens a row."""
    def rate(tokens):
        if tokens < warmup:
            return lr * tokens / max(1, warmup)
        progress = (tokens - warmup) / max(1, final - warmup)
        return lr * max(0.1, 0.5 * (1.0 + math.cos(math.pi * progress)))

    def rates(per_row):
        out, tokens = [lr], 0
        for n in rows[:-1]:
            tokens += n * per_row
            out.append(rate(tokens))
        return out

    return rates


def logged_rates(log):
    with open(log, newline="") as f:
        return [float(r["lr"]) for r in csv.DictReader(f)]


def check(what, got, want):
    # The log prints 9 significant digits; counting 128 tokens a row instead of 127 moves a rate
    # by about 1e-2 of itself.
    if len(got) != len(want) or any(abs(g - w) > 1e-8 * w for g, w in zip(got, want)):
        sys.exit(f"birthplace_schedule: {what}: logged rates {got}\n  the course's {want}")
    print(f"ok: {what}: {len(got)} steps at the course's rates")


def strip_metadata(path, keys):
    """Rewrite a safetensors file without the metadata entries `keys` (and its metadata CRC)."""
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    for k in list(keys) + ["crc32:__metadata__"]:
        header["__metadata__"].pop(k, None)
    text = json.dumps(header, separators=(",", ":")).encode()
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + data[8 + n:])


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    program, data = str(Path(sys.argv[1]).resolve()), Path(sys.argv[2]).resolve()
    work = Path(tempfile.mkdtemp(prefix="attn_birthplace_schedule."))
    try:
        wiki_lines = [l for l in (data / "wiki.txt").read_text(encoding="utf-8").split("\n") if l]
        # Six documents and one with '?', which the questions need: 7 rows, batches of 4 and 3.
        docs = wiki_lines[:6] + [next(l for l in wiki_lines if "?" in l)]
        (work / "wiki.txt").write_text("\n".join(docs) + "\n", encoding="utf-8")
        pairs = (data / "birth_places_train.tsv").read_text(encoding="utf-8").split("\n")[:7]
        (work / "train.tsv").write_text("\n".join(pairs) + "\n", encoding="utf-8")

        def run(*args):
            r = subprocess.run([program, *args], cwd=work, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"birthplace_schedule: birthplace {' '.join(args)}: exit {r.returncode}\n"
                         f"{r.stderr}")

        tiny = ["--layers", "1", "--heads", "1", "--embd", "8", "--block", str(BLOCK), "--batch",
                "4", "--threads", "1", "--pretrain-corpus", "wiki.txt", "--warmup-tokens", "1000"]
        rows = [4, 3] * 3  # two steps an epoch over 7 documents or pairs

        # Pretraining: 13 of the problem set's 650 epochs, so final = 200 · 7 · 128 · 13 / 650;
        # cut at step 3 and resumed to step 6, past the warmup (889 tokens after two steps).
        run("pretrain", *tiny, "--epochs", "13", "--stop-at", "3", "--writing-params", "p.params")
        shutil.copy(work / "p.params", work / "old.params")
        run("pretrain", "--resume", "p.params", "--stop-at", "6", "--threads", "1",
            "--pretrain-corpus", "wiki.txt")
        pretrain = course_rates(6e-3, 1000, 200 * 7 * BLOCK * 13 // 650, rows)
        check("pretrain, resumed at step 3", logged_rates(work / "p.params.log.csv"),
              pretrain(BLOCK - 1))

        # A checkpoint from before the count (no train.tokens_per_example) resumes as it ran.
        strip_metadata(work / "old.params", ["train.tokens_per_example"])
        shutil.copy(work / "p.params.log.csv", work / "old.params.log.csv")
        run("pretrain", "--resume", "old.params", "--stop-at", "6", "--threads", "1",
            "--pretrain-corpus", "wiki.txt")
        check("pretrain, an older checkpoint's steps 4-6",
              logged_rates(work / "old.params.log.csv")[3:], pretrain(BLOCK)[3:])

        # Finetuning without pretraining: 3 of its 75 epochs at 6e-4 (final scaled the same way).
        run("finetune", *tiny, "--finetune-corpus", "train.tsv", "--epochs", "3",
            "--writing-params", "f.params")
        check("finetune", logged_rates(work / "f.params.log.csv"),
              course_rates(6e-4, 1000, 200 * 7 * BLOCK * 3 // 75, rows)(BLOCK - 1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
