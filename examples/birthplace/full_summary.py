#!/usr/bin/env python3
"""Summary of the birth-place study at the problem set's full scale (full_recipe.sh).

    examples/birthplace/full_summary.py RUNS [RUNS...] DEST

Reads RUNS/results.csv and the pretraining logs RUNS/<variant>-s<seed>.pretrain.params.log.csv
that full_recipe.sh and the trainer write (of each study given: a variant that is a study of its
own, the problem set's synthesizer beside its vanilla, joins the others' table and plots), and
writes, atomically, into DEST:

  results.csv        one row per evaluated model, as full_recipe.sh wrote them, sorted:
                     variant,pretrain_epochs,seed,correct,total,london,chance,p
                     (pretrain_epochs 0: the control, finetuned without pretraining)
  pretrain_loss.csv  per pretraining run, the loss every 10 epochs (and at the last epoch
                     reached): the mean of the last 20 steps up to that epoch, as in the issue's
                     reference figures; plus the mean of each of the first five epochs
                     (variant,seed,epoch,loss,kind with kind "mean of 20 steps" or "epoch mean")
  accuracy.svg       right answers of 500 against pretraining epochs, per variant, with London
                     and the control (gnuplot; skipped with a message when it is missing)
  pretrain_loss.svg  the pretraining loss against epochs, per variant, with the reference's points

and prints both tables, the first with each pretrained model against the control of its seed
(one-sided Fisher exact test: how likely as many right or more if pretraining changed nothing).
An unfinished study gives what it has reached. Standard library only.

The reference points: the problem set's own code (the minGPT-based course code, same wiki.txt,
same recipe) logged a pretraining loss of 3.47, 3.15, 2.98, 2.90 and 2.82 in its first five
epochs (epoch means) and about 0.50 at the end of its 650 epochs, in public logs of that code, as
an audit read them.
"""

import csv
import math
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
from studies import replace_file, write_csv  # noqa: E402

REFERENCE = [(1, 3.47), (2, 3.15), (3, 2.98), (4, 2.90), (5, 2.82), (650, 0.50)]
RESULT_HEADER = ["variant", "pretrain_epochs", "seed", "correct", "total", "london", "chance", "p"]
LOSS_HEADER = ["variant", "seed", "epoch", "loss", "kind"]
LOSS_STEPS = 20
EVERY = 10


def read_results(runs: Path):
    with open(runs / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        if list(r) != RESULT_HEADER:
            sys.exit(f"full_summary.py: {runs / 'results.csv'}: columns {list(r)}, "
                     f"expected {RESULT_HEADER}")
    return rows


def fisher_greater(a: int, n_a: int, b: int, n_b: int) -> float:
    """One-sided Fisher exact test: P(at least a of the first n_a right | a + b right in all)."""
    right, total = a + b, n_a + n_b
    return sum(math.comb(right, k) * math.comb(total - right, n_a - k)
               for k in range(a, min(right, n_a) + 1)) / math.comb(total, n_a)


def loss_points(log: Path):
    """(epoch, loss, kind) rows of one trainer log (columns step, epoch, loss, ...)."""
    with open(log, newline="") as f:
        rows = [(float(r["epoch"]), float(r["loss"])) for r in csv.DictReader(f)]
    if not rows:
        return []
    points = []
    for e in range(1, 6):  # the first five epochs, as epoch means (the reference's figures)
        epoch = [loss for x, loss in rows if e - 1 < x <= e]
        if epoch and rows[-1][0] >= e:
            points.append((e, sum(epoch) / len(epoch), "epoch mean"))
    last = rows[-1][0]
    marks = [float(EVERY * k) for k in range(1, int(last // EVERY) + 1)]
    if not marks or marks[-1] != last:
        marks.append(last)
    for mark in marks:
        window = [loss for x, loss in rows if x <= mark][-LOSS_STEPS:]
        points.append((mark, sum(window) / len(window), f"mean of {LOSS_STEPS} steps"))
    return points


def gnuplot(dest: Path, name: str, tmp: str, xlabel: str, ylabel: str, key: str, plots,
            xrange="0:660", yrange="0:*"):
    """Draws `plots` (gnuplot plot clauses) into DEST/NAME, atomically (epochs 0-660 unless
    told)."""
    script = f"""set terminal svg size 720,440 font "sans,12" background rgb "white" noenhanced
set output "{tmp}/{name}"
set xlabel "{xlabel}"
set ylabel "{ylabel}"
set key {key}
set grid
set xrange [{xrange}]
set yrange [{yrange}]
plot {", ".join(plots)}
"""
    try:
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
    except FileNotFoundError:
        print(f"full_summary.py: gnuplot not found, {name} not written", file=sys.stderr)
        return
    replace_file(dest / name, (Path(tmp) / name).read_bytes())


def plot_accuracy(dest: Path, results):
    by_variant = defaultdict(list)
    control, london = [], None
    for r in results:
        london = int(r["london"])
        if int(r["pretrain_epochs"]) == 0:
            control.append(int(r["correct"]))
        else:
            by_variant[r["variant"]].append((int(r["pretrain_epochs"]), int(r["correct"])))
    if not by_variant and not control:
        return
    with tempfile.TemporaryDirectory() as tmp:
        plots = []
        for variant, points in sorted(by_variant.items()):
            data = Path(tmp) / f"{variant}.dat"
            data.write_text("".join(f"{e} {c}\n" for e, c in sorted(points)))
            plots.append(f'"{data}" using 1:2 with linespoints lw 2 pt 7 title "{variant}"')
        if london is not None:
            plots.append(f'{london} with lines dt 2 lw 2 title "London ({london})"')
            plots.append(f'{2 * london} with lines dt 3 lw 1 title "2 x London"')
        for c in control:
            plots.append(f'{c} with lines dt 4 lw 2 title "no pretraining ({c})"')
        gnuplot(dest, "accuracy.svg", tmp, "pretraining epochs (then 10 finetuning epochs)",
                "right answers of 500 dev people", "top left", plots)


def plot_loss(dest: Path, losses):
    with tempfile.TemporaryDirectory() as tmp:
        plots = []
        for (variant, seed), points in sorted(losses.items()):
            data = Path(tmp) / f"{variant}-{seed}.dat"
            data.write_text("".join(f"{e} {l}\n" for e, l, kind in points if kind != "epoch mean"))
            plots.append(f'"{data}" using 1:2 with lines lw 2 title "attn {variant}, seed {seed}"')
        ref = Path(tmp) / "reference.dat"
        ref.write_text("".join(f"{e} {l}\n" for e, l in REFERENCE))
        plots.append(f'"{ref}" using 1:2 with points pt 7 ps 1.2 title "the course code\'s logs"')
        gnuplot(dest, "pretrain_loss.svg", tmp, "pretraining epoch",
                f"loss (nats per character, mean of the last {LOSS_STEPS} steps)", "top right",
                plots)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__.split("\n\n")[1])
    studies, dest = [Path(a) for a in sys.argv[1:-1]], Path(sys.argv[-1])
    results, losses, where = [], {}, {}
    for runs in studies:
        if not (runs / "results.csv").is_file():
            sys.exit(f"full_summary.py: {runs / 'results.csv'} not found "
                     "(run full_recipe.sh first)")
        for r in read_results(runs):
            key = (r["variant"], r["pretrain_epochs"], r["seed"])
            if key in where:
                sys.exit(f"full_summary.py: {'/'.join(key)} is in both {where[key]} and {runs}")
            where[key] = runs
            results.append(r)
        for log in sorted(runs.glob("*-s*.pretrain.params.log.csv")):
            variant, seed = log.name[: -len(".pretrain.params.log.csv")].rsplit("-s", 1)
            if (variant, int(seed)) in losses:
                sys.exit(f"full_summary.py: two pretraining logs of {variant}, seed {seed} ({log})")
            losses[(variant, int(seed))] = loss_points(log)
    results.sort(key=lambda r: (r["variant"], int(r["seed"]), int(r["pretrain_epochs"])))
    dest.mkdir(parents=True, exist_ok=True)
    write_csv(dest / "results.csv", RESULT_HEADER, [[r[k] for k in RESULT_HEADER] for r in results])
    write_csv(dest / "pretrain_loss.csv", LOSS_HEADER,
              [[v, s, f"{e:g}", f"{l:.4f}", k] for (v, s), pts in sorted(losses.items())
               for e, l, k in pts])
    plot_accuracy(dest, results)
    plot_loss(dest, losses)
    controls = {r["seed"]: r for r in results if int(r["pretrain_epochs"]) == 0}
    print("| variant | pretraining epochs | seed | right of 500 | London | chance level | p | "
          "p against the control |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        c = controls.get(r["seed"])
        against = ""
        if c is not None and c is not r:
            p = fisher_greater(int(r["correct"]), int(r["total"]),
                               int(c["correct"]), int(c["total"]))
            against = f"{p:.2g}"
        print(f"| {r['variant']} | {r['pretrain_epochs']} | {r['seed']} | {r['correct']} | "
              f"{r['london']} | {r['chance']} | {r['p']} | {against} |")
    for (variant, seed), points in sorted(losses.items()):
        shown = [f"{e:g}: {l:.2f}" for e, l, k in points
                 if k == "epoch mean" or e in (10, 50, 100, 200, 300, 400, 500, 600, 650)
                 or e == points[-1][0]]
        print(f"\n{variant}, seed {seed}, pretraining loss (epochs 1-5: epoch means; then the "
              f"mean of the last {LOSS_STEPS} steps): " + ", ".join(shown))


if __name__ == "__main__":
    main()
