#!/usr/bin/env python3
"""A seeded subset of the birth-place problem set's people, for pretraining at the full schedule.

Draws a share of the finetuning people (data/birth_places_train.tsv) and the same share of the
dev people (data/birth_dev.tsv), without replacement, and writes into OUT:

  wiki.txt   the wiki.txt lines of the chosen people (their biographies: the pretraining corpus),
             in wiki.txt's order
  train.tsv  the chosen finetuning people's question/answer pairs, in the TSV's order
  dev.tsv    the chosen dev people's pairs (held out: never finetuned on)
  SUBSET.md  what was drawn, how, and the counts

A person's wiki lines are those that begin with their name followed by a full stop. Lines of
people in neither TSV are left out. A subset's corpus lacks characters of the full one (even the
questions' "?"), so the runs on it give the program the full corpus's vocabulary
(`--vocabulary-corpus data/wiki.txt`). Files are written atomically; an existing OUT is replaced
only with --force.

  examples/birthplace/make_subset.py --fraction 0.1 --seed 1 --out data/birthplace_subsets/f10-s1
"""

import argparse
import hashlib
import os
import random
import sys
from pathlib import Path


def read_lines(path: Path):
    with open(path, encoding="utf-8", newline="\n") as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def person(question: str) -> str:
    prefix, suffix = "Where was ", " born?"
    if not (question.startswith(prefix) and question.endswith(suffix)):
        sys.exit(f"make_subset.py: unexpected question {question!r}")
    return question[len(prefix):-len(suffix)]


def write_atomically(path: Path, text: str):
    tmp = path.with_name(path.name + f".tmp.{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fraction", type=float, required=True,
                    help="share of the finetuning and of the dev people to keep, in (0, 1]")
    ap.add_argument("--seed", type=int, default=1, help="seed of the draw")
    ap.add_argument("--out", type=Path, required=True, help="directory to write")
    ap.add_argument("--wiki", type=Path, default=Path("data/wiki.txt"))
    ap.add_argument("--train", type=Path, default=Path("data/birth_places_train.tsv"))
    ap.add_argument("--dev", type=Path, default=Path("data/birth_dev.tsv"))
    ap.add_argument("--force", action="store_true", help="replace OUT's files if they exist")
    a = ap.parse_args()
    if not 0 < a.fraction <= 1:
        sys.exit(f"make_subset.py: --fraction must be in (0, 1], got {a.fraction}")
    if a.out.exists() and any(a.out.iterdir()) and not a.force:
        sys.exit(f"make_subset.py: {a.out} exists and is not empty (use --force to replace it)")

    wiki = read_lines(a.wiki)
    rng = random.Random(a.seed)
    chosen = {}
    for name, path in (("train", a.train), ("dev", a.dev)):
        pairs = [line.split("\t") for line in read_lines(path)]
        if any(len(p) != 2 for p in pairs):
            sys.exit(f"make_subset.py: {path}: every line must be question<TAB>answer")
        keep = sorted(rng.sample(range(len(pairs)), max(1, round(a.fraction * len(pairs)))))
        chosen[name] = [pairs[i] for i in keep]

    people = {person(q) for part in chosen.values() for q, _ in part}
    corpus = [line for line in wiki
              if any(line.startswith(p + ".") for p in people if line[:len(p)] == p)]
    without_line = sorted(p for p in people if not any(l.startswith(p + ".") for l in corpus))

    a.out.mkdir(parents=True, exist_ok=True)
    files = {"wiki.txt": "".join(line + "\n" for line in corpus)}
    for name in ("train", "dev"):
        files[f"{name}.tsv"] = "".join(f"{q}\t{ans}\n" for q, ans in chosen[name])
    sums = {f: hashlib.sha256(t.encode("utf-8")).hexdigest()[:16] for f, t in files.items()}
    for f, text in files.items():
        write_atomically(a.out / f, text)
    london = {name: sum(ans == "London" for _, ans in chosen[name]) for name in chosen}
    readme = f"""# Birth-place subset: fraction {a.fraction}, seed {a.seed}

Made by `examples/birthplace/make_subset.py --fraction {a.fraction} --seed {a.seed}` from
{a.wiki} ({len(wiki)} lines), {a.train} and {a.dev}.

| file | contents | sha256 (first 16 hex digits) |
| --- | --- | --- |
| wiki.txt | {len(corpus)} lines, {len(files['wiki.txt'].encode('utf-8'))} bytes | {sums['wiki.txt']} |
| train.tsv | {len(chosen['train'])} pairs ("London" {london['train']}) | {sums['train.tsv']} |
| dev.tsv | {len(chosen['dev'])} pairs ("London" {london['dev']}: the London baseline) | {sums['dev.tsv']} |

People chosen: {len(people)}; without a wiki line (their facts are not in the corpus, as
for some of the full set's people): {len(without_line)}.
"""
    write_atomically(a.out / "SUBSET.md", readme)
    print(readme)


if __name__ == "__main__":
    main()
