#!/usr/bin/env python3
"""Epoch means of the course recipe's loss curves (course_reference.py) beside attn's run.

    examples/birthplace/reference_summary.py ATTN_LOG DEST REFERENCE.csv ...

Each REFERENCE.csv is a per-step CSV of course_reference.py (step, epoch, loss, lr), named
<label>-s<seed>-e<epochs>.csv: "course" is the course's recipe, "course+decay" the course's with
one of attn's choices switched on, "attn-choices" with all four. ATTN_LOG is attn's pretraining
log (the trainer's <checkpoint>.log.csv: step, epoch, loss, ...). Writes, atomically, into DEST:

  epoch_means.csv   label,seed,epoch,loss: the mean training loss of each epoch (nats per
                    character, PAD ignored), one row per run and epoch; attn's run is "attn"
  epoch_means.svg   the curves (gnuplot; skipped with a message when it is missing)

and prints a markdown table of the epochs both have. Standard library only.
"""

import csv
import math
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
from full_summary import gnuplot  # noqa: E402
from studies import write_csv  # noqa: E402

SHOWN = (1, 5, 10, 15, 20, 25, 30)


def epoch_means(path: Path, whole_epochs_only=True):
    """{epoch: mean loss} of a per-step CSV whose epoch column is fractional (step / steps)."""
    by_epoch = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            e = math.ceil(float(r["epoch"]) - 1e-9)
            by_epoch.setdefault(e, []).append(float(r["loss"]))
    if not by_epoch:
        sys.exit(f"reference_summary.py: {path} has no steps")
    if whole_epochs_only:  # the last epoch only when it is complete
        full = max(len(v) for v in by_epoch.values())
        last = max(by_epoch)
        if len(by_epoch[last]) < full:
            del by_epoch[last]
    return {e: sum(v) / len(v) for e, v in sorted(by_epoch.items())}


def label_of(path: Path):
    parts = path.stem.rsplit("-", 2)
    if len(parts) != 3 or not parts[1].startswith("s") or not parts[2].startswith("e"):
        sys.exit(f"reference_summary.py: {path.name} is not named <label>-s<seed>-e<epochs>.csv")
    return parts[0], int(parts[1][1:])


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__.split("\n\n")[1])
    attn_log, dest = Path(sys.argv[1]), Path(sys.argv[2])
    runs = [("attn", 1, epoch_means(attn_log))]
    for name in sys.argv[3:]:
        label, seed = label_of(Path(name))
        runs.append((label, seed, epoch_means(Path(name))))
    longest = max(max(m) for label, _, m in runs if label != "attn")
    runs[0] = ("attn", 1, {e: l for e, l in runs[0][2].items() if e <= longest})
    dest.mkdir(parents=True, exist_ok=True)
    write_csv(dest / "epoch_means.csv", ["label", "seed", "epoch", "loss"],
              [[label, seed, e, f"{l:.4f}"] for label, seed, m in runs for e, l in m.items()])
    with tempfile.TemporaryDirectory() as tmp:
        plots = []
        for i, (label, seed, m) in enumerate(runs):
            data = Path(tmp) / f"{i}.dat"
            data.write_text("".join(f"{e} {l}\n" for e, l in m.items()))
            width = 3 if label in ("attn", "course") else 1.5
            plots.append(f'"{data}" using 1:2 with lines lw {width} title "{label}, seed {seed}"')
        gnuplot(dest, "epoch_means.svg", tmp, "pretraining epoch",
                "training loss, epoch mean (nats per character)", "top right", plots,
                xrange=f"0:{longest}", yrange="2.4:3.0")
    shown = [e for e in SHOWN if e <= longest]
    print("| run | " + " | ".join(str(e) for e in shown) + " |")
    print("| --- |" + " --- |" * len(shown))
    for label, seed, m in runs:
        print(f"| {label}, seed {seed} | " +
              " | ".join(f"{m[e]:.2f}" if e in m else "" for e in shown) + " |")


if __name__ == "__main__":
    main()
