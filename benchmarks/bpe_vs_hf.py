#!/usr/bin/env python3
"""attn's byte-level BPE against Hugging Face tokenizers, in one run, one thread each.

    build/oracle-venv/bin/python benchmarks/bpe_vs_hf.py --bench build/bpe-release/benchmarks/bench_bpe \
        [--corpus data/tinyshakespeare.txt] [--vocab 1000] [--reps 5]

Runs bench_bpe (attn trains --vocab tokens on the corpus, saves the tokenizer and encodes the
corpus as one text and line by line), then with tokenizers: loads attn's tokenizer.json, encodes
the same text --reps times each way (Tokenizer.encode of the whole text; encode_batch of the
lines, each with its newline; RAYON_NUM_THREADS=1) and prints the medians' MB/s beside attn's;
checks that the ids are attn's, that transformers' GPT2TokenizerFast loads the folder and
gives the same ids, and that BpeTrainer (one thread) trains the same merges, whose time it prints
too. Names the CPU (/proc/cpuinfo). Needs tokenizers and transformers (scripts/oracle-venv).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import tokenizers  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def cpu():
    fields = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            if not line.strip():
                break
            k, _, v = line.partition(":")
            fields[k.strip()] = v.strip()
    return "%s (family %s, model %s), %d cores" % (fields.get("model name"), fields.get("cpu family"),
                                                  fields.get("model"), os.cpu_count())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bench", required=True, help="the bench_bpe program")
    p.add_argument("--corpus", default=os.path.join(ROOT, "data", "tinyshakespeare.txt"))
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    with open(a.corpus, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8")
    print(cpu())
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run([a.bench, a.corpus, "--vocab", str(a.vocab), "--reps", str(a.reps),
                              "--save", d], check=True, capture_output=True, text=True).stdout
        print(out.strip())
        attn_mbs = [float(x) for x in re.findall(r"= ([0-9.]+) MB/s", out)]
        attn_ids = {}
        for name in ("ids.txt", "ids_lines.txt"):
            with open(os.path.join(d, name)) as f:
                attn_ids[name] = [int(line) for line in f]

        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        tok.encode(text[:10000])  # warm up
        lines = [line + "\n" for line in text.split("\n")]  # bench_bpe's lines: cut at '\n' only
        lines[-1] = lines[-1][:-1]
        if not lines[-1]:
            lines.pop()
        hf_mbs = []
        for what, name, encode in [
                ("one text", "ids.txt", lambda: tok.encode(text).ids),
                ("%d lines" % len(lines), "ids_lines.txt",
                 lambda: [i for e in tok.encode_batch(lines) for i in e.ids])]:
            times = []
            for _ in range(a.reps):
                t = time.perf_counter()
                ids = encode()
                times.append(time.perf_counter() - t)
            median = statistics.median(times)
            hf_mbs.append(len(raw) / median / 1e6)
            print("tokenizers %s: %d bytes as %s: %d ids, median of %d %.4f s = %.2f MB/s"
                  % (tokenizers.__version__, len(raw), what, len(ids), a.reps, median, hf_mbs[-1]))
            assert ids == attn_ids[name], "tokenizers' ids differ from attn's (%s)" % what
        attn_ids = attn_ids["ids.txt"]
        fast = transformers.GPT2TokenizerFast.from_pretrained(d)
        assert fast(text)["input_ids"] == attn_ids, "GPT2TokenizerFast's ids differ from attn's"

        trainer = trainers.BpeTrainer(vocab_size=a.vocab, min_frequency=0, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      special_tokens=[])
        hf = Tokenizer(models.BPE())
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        hf.decoder = decoders.ByteLevel()
        t = time.perf_counter()
        hf.train_from_iterator([text], trainer=trainer)
        train_s = time.perf_counter() - t
        with tempfile.TemporaryDirectory() as e:
            hf.model.save(e)
            with open(os.path.join(e, "merges.txt"), "rb") as f1, \
                 open(os.path.join(d, "merges.txt"), "rb") as f2:
                same = f1.read() == f2.read()
        print("tokenizers BpeTrainer: %d tokens in %.3f s (one thread); merges.txt %s attn's"
              % (hf.get_vocab_size(), train_s, "equals" if same else "DIFFERS FROM"))
        print("ids equal (tokenizers, GPT2TokenizerFast of transformers %s)"
              % transformers.__version__)
        for what, x, y in zip(("one text", "lines"), attn_mbs, hf_mbs):
            print("encoding %s: attn %.2f MB/s, tokenizers %.2f MB/s, attn/tokenizers %.1f"
                  % (what, x, y, x / y))
        if not same:
            sys.exit(1)


if __name__ == "__main__":
    main()
