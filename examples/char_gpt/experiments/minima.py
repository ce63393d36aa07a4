#!/usr/bin/env python3
"""The validation minima of char_gpt runs, paired by seed across variants.

  examples/char_gpt/experiments/minima.py RUNS DEST [--variants standard symmetric]
      [--patience 500] [--window 5]

Reads RUNS/<variant>-s<seed>/log.csv (columns step, train_loss, val_loss, ...; one validation
loss per evaluation) of every variant and seed, and writes DEST/minima.csv, one row per run:

  lowest_val_loss, step_of_lowest   the lowest single evaluation and its step
  smoothed_lowest, step_of_smoothed the lowest mean of WINDOW consecutive evaluations and the
                                    step at the window's centre: one evaluation is a sample of
                                    random validation batches, and the lowest of many noisy
                                    samples is biased low; the window's mean is less so (both
                                    empty for a run with fewer than WINDOW evaluations)
  train_loss_at_lowest              the training loss logged at step_of_lowest
  steps_trained, minimum_passed     the last step, and whether it lies PATIENCE or more steps
                                    after step_of_lowest

Then prints, per seed, the second variant minus the first (for both minima) as a Markdown table
with the mean and sample standard deviation over the seeds (the smoothed column over the seeds
whose two runs both have WINDOW evaluations, their number stated). The first variant is the
reference.
"""

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "common"))
from studies import mean_sd, write_csv  # noqa: E402


def read_log(path: Path):
    """(step, train_loss, val_loss) per evaluation of one char_gpt log.csv."""
    with open(path, newline="") as f:
        rows = [(int(r["step"]), float(r["train_loss"]), float(r["val_loss"])) for r in csv.DictReader(f)]
    if not rows:
        sys.exit(f"minima.py: {path} has no evaluations")
    return rows


def minima(rows, window: int, patience: int):
    step, train, val = min(rows, key=lambda r: r[2])
    smoothed, centre = min(
        (sum(r[2] for r in rows[i : i + window]) / window, rows[i + window // 2][0])
        for i in range(len(rows) - window + 1)
    ) if len(rows) >= window else (None, None)
    last = rows[-1][0]
    return {"lowest": val, "step": step, "smoothed": smoothed, "smoothed_step": centre,
            "train": train, "last": last, "passed": int(last - step >= patience)}


def fmt(x, spec=".4f"):
    """A CSV field: empty where the value is undefined (None)."""
    return "" if x is None else format(x, spec)


def cell(m):
    """The smoothed minimum and its step, or a dash for a run with too few evaluations."""
    return "—" if m["smoothed"] is None else f"{m['smoothed']:.4f} ({m['smoothed_step']})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", type=Path)
    ap.add_argument("dest", type=Path)
    ap.add_argument("--variants", nargs="+", default=["standard", "symmetric"])
    ap.add_argument("--patience", type=int, default=500)
    ap.add_argument("--window", type=int, default=5)
    a = ap.parse_args()
    if a.window < 1 or a.patience < 0:
        sys.exit("minima.py: --window must be at least 1 and --patience at least 0")

    found = {}
    for variant in a.variants:
        for log in sorted(a.runs.glob(f"{variant}-s*/log.csv")):
            seed = int(log.parent.name.rsplit("-s", 1)[1])
            found[variant, seed] = minima(read_log(log), a.window, a.patience)
    if not found:
        sys.exit(f"minima.py: no runs of {', '.join(a.variants)} in {a.runs}")

    a.dest.mkdir(parents=True, exist_ok=True)
    write_csv(a.dest / "minima.csv",
              ["variant", "seed", "lowest_val_loss", "step_of_lowest", f"smoothed_lowest_{a.window}",
               "step_of_smoothed", "train_loss_at_lowest", "steps_trained", "minimum_passed"],
              [[v, s, f"{m['lowest']:.4f}", m["step"], fmt(m["smoothed"]), fmt(m["smoothed_step"], "d"),
                f"{m['train']:.4f}", m["last"], m["passed"]] for (v, s), m in sorted(found.items())])

    ref = a.variants[0]
    for other in a.variants[1:]:
        seeds = sorted(s for v, s in found if v == ref and (other, s) in found)
        if not seeds:
            continue
        print(f"\n| seed | {ref}: lowest (step) | {other}: lowest (step) | difference "
              f"| {ref}: mean of {a.window} (step) | {other}: mean of {a.window} (step) | difference |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        raw, smooth = [], []
        for s in seeds:
            r, o = found[ref, s], found[other, s]
            raw.append(o["lowest"] - r["lowest"])
            both = r["smoothed"] is not None and o["smoothed"] is not None
            if both:
                smooth.append(o["smoothed"] - r["smoothed"])
            print(f"| {s} | {r['lowest']:.4f} ({r['step']}) | {o['lowest']:.4f} ({o['step']}) | {raw[-1]:+.4f} "
                  f"| {cell(r)} | {cell(o)} | {f'{smooth[-1]:+.4f}' if both else '—'} |")
        rm, rs = mean_sd(raw)
        if smooth:
            sm, ss = mean_sd(smooth)
            smoothed = f"{sm:+.4f} ± {ss:.4f}" + ("" if len(smooth) == len(raw) else f" ({len(smooth)} seeds)")
        else:
            smoothed = "—"
        print(f"| mean ± sd | | | {rm:+.4f} ± {rs:.4f} | | | {smoothed} |")
    unpassed = [f"{v}-s{s}" for (v, s), m in sorted(found.items()) if not m["passed"]]
    if unpassed:
        print(f"\nnot past the minimum by {a.patience} steps: {', '.join(unpassed)}")


if __name__ == "__main__":
    main()
