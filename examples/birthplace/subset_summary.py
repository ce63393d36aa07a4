#!/usr/bin/env python3
"""Summary of the birth-place subset study (subset_study.sh) over its seeds.

    examples/birthplace/subset_summary.py RUNS DEST [LOGS]

Reads RUNS/results.tsv and RUNS/london.tsv as subset_study.sh writes them and writes, atomically,
into DEST:

  summary.csv   one row per subset size and model (the London baseline a model too): the seeds,
                the right answers per seed, mean and sample standard deviation of the accuracy
                (the deviation left empty for one seed),
                the answers pooled over the seeds, London pooled over the same seeds, and Fisher's
                combination of the per-seed p-values against each run's own chance level
  accuracy.svg  accuracy against subset size, mean and standard deviation over the seeds (gnuplot;
                skipped with a message when gnuplot is missing)
  pretrain_loss.csv
                per pretrained run (a LOGS/NAME.pretrain.params.log.csv that the trainer writes;
                LOGS defaults to RUNS), the pretraining loss at every 50th epoch and at the last
                one: the mean of the last 20 steps up to that epoch. Runs whose log is not in LOGS
                keep the rows DEST already has, so the file collects runs from several run
                directories (and keeps those whose logs are gone); an unfinished run gives the
                epochs it has reached.

and prints the table. Fisher's combination (-2 sum ln p, chi-squared with 2k degrees of freedom) is
conservative here: each p is a shuffle test's "this many or more", which is never below the exact
p. A model with a per-seed p of 1 (no right answer) adds nothing to the combined evidence.
Standard library only.
"""

import csv
import math
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
from studies import mean_sd, replace_file, write_csv  # noqa: E402

ORDER = ["london", "vanilla", "synthesizer", "euclidean", "nopretrain"]


def parse_name(name: str):
    """'vanilla-f0.1-s2.ft' -> ('vanilla', '0.1', 2)."""
    stem = name.split(".ft")[0]
    variant, fraction, seed = stem.rsplit("-", 2)
    if not (fraction.startswith("f") and seed.startswith("s")):
        sys.exit(f"subset_summary.py: unexpected run name {name!r}")
    return variant, fraction[1:], int(seed[1:])


def fisher(ps):
    """Fisher's combined p-value of independent p-values (chi-squared, 2k degrees of freedom)."""
    x = -2.0 * sum(math.log(max(p, 1e-300)) for p in ps)
    half, term, total = x / 2.0, 1.0, 0.0
    for i in range(len(ps)):  # survival function of chi-squared with an even number of dof
        if i > 0:
            term *= half / i
        total += term
    return min(1.0, math.exp(-half) * total)


def read_runs(runs: Path):
    results = defaultdict(dict)  # (fraction, variant) -> seed -> (correct, total, p)
    with open(runs / "results.tsv", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            variant, fraction, seed = parse_name(row["name"])
            results[(fraction, variant)][seed] = (int(row["correct"]), int(row["total"]),
                                                  float(row["p"]))
    with open(runs / "london.tsv", newline="") as f:
        for line in f:
            name, correct, total = line.rstrip("\n").split("\t")
            _, fraction, seed = parse_name(name)
            results[(fraction, "london")][seed] = (int(correct), int(total), float("nan"))
    return results


def summarise(results):
    rows = []
    fractions = sorted({f for f, _ in results}, key=float)
    for fraction in fractions:
        london = results.get((fraction, "london"), {})
        for variant in sorted({v for f, v in results if f == fraction},
                              key=lambda v: (ORDER.index(v) if v in ORDER else len(ORDER), v)):
            by_seed = results[(fraction, variant)]
            seeds = sorted(by_seed)
            correct = [by_seed[s][0] for s in seeds]
            total = [by_seed[s][1] for s in seeds]
            acc = [100.0 * c / t for c, t in zip(correct, total)]
            mean, sd = mean_sd(acc)
            london_pooled = sum(london[s][0] for s in seeds if s in london)
            complete = variant != "london" and all(s in london for s in seeds)
            p = "" if variant == "london" else f"{fisher([by_seed[s][2] for s in seeds]):.2g}"
            rows.append({
                "fraction": fraction, "model": variant, "seeds": " ".join(map(str, seeds)),
                "correct_per_seed": " ".join(map(str, correct)),
                "total_per_seed": " ".join(map(str, total)),
                "accuracy_mean_pct": f"{mean:.2f}",
                "accuracy_sd_pct": f"{sd:.2f}" if len(seeds) > 1 else "",
                "correct_pooled": sum(correct), "total_pooled": sum(total),
                "london_pooled": london_pooled if complete else "",
                "ratio_to_london": (f"{sum(correct) / london_pooled:.2f}"
                                    if complete and london_pooled else ""),
                "fisher_p": p,
            })
    return rows


LOSS_STEPS = 20  # the loss at an epoch: the mean over the last LOSS_STEPS steps up to it
LOSS_HEADER = ["run", "epoch", "loss", "steps"]


def loss_points(log: Path):
    """(epoch, loss, steps) at every 50th epoch reached and at the last one, from a trainer log
    (columns step, epoch, loss, ...)."""
    with open(log, newline="") as f:
        rows = [(float(r["epoch"]), float(r["loss"])) for r in csv.DictReader(f)]
    if not rows:
        return []
    last = rows[-1][0]
    marks = [50.0 * k for k in range(1, int(last // 50) + 1)]
    if not marks or marks[-1] != last:
        marks.append(last)
    points = []
    for mark in marks:
        upto = [loss for epoch, loss in rows if epoch <= mark]
        window = upto[-LOSS_STEPS:]
        points.append((f"{mark:g}", f"{sum(window) / len(window):.4f}", len(upto)))
    return points


def pretrain_losses(logs: Path, dest: Path):
    """Merges the loss points of the pretraining logs in LOGS into DEST/pretrain_loss.csv; returns
    its rows (run, epoch, loss, steps)."""
    found = {log.name[: -len(".pretrain.params.log.csv")]: log
             for log in logs.glob("*.pretrain.params.log.csv")}
    kept = []
    path = dest / "pretrain_loss.csv"
    if path.is_file():
        with open(path, newline="") as f:
            kept = [[r[k] for k in LOSS_HEADER] for r in csv.DictReader(f)
                    if r["run"] not in found]
    rows = kept + [[run, *point] for run, log in sorted(found.items()) for point in loss_points(log)]
    rows.sort(key=lambda r: (r[0], float(r[1])))
    if found:
        write_csv(path, LOSS_HEADER, rows)
    return rows


def plot(dest: Path, rows):
    series = defaultdict(list)
    for r in rows:
        series[r["model"]].append((float(r["fraction"]) * 100, float(r["accuracy_mean_pct"]),
                                   float(r["accuracy_sd_pct"] or 0)))
    with tempfile.TemporaryDirectory() as tmp:
        plots = []
        models = [m for m in ORDER if m in series] + sorted(m for m in series if m not in ORDER)
        for model in models:
            data = Path(tmp) / f"{model}.dat"
            data.write_text("".join(f"{x} {m} {s}\n" for x, m, s in series[model]))
            plots.append(f'"{data}" using 1:2:3 with yerrorlines lw 2 pt 7 title "{model}"')
        script = f"""set terminal svg size 720,440 font "sans,12" background rgb "white" noenhanced
set output "{tmp}/accuracy.svg"
set xlabel "subset of the people (%)"
set ylabel "dev accuracy (%), mean and sd over seeds"
set key top left
set grid
set offsets 1, 1, 1, 0
plot {", ".join(plots)}
"""
        try:
            subprocess.run(["gnuplot"], input=script, text=True, check=True)
        except FileNotFoundError:
            print("subset_summary.py: gnuplot not found, accuracy.svg not written", file=sys.stderr)
            return
        replace_file(dest / "accuracy.svg", (Path(tmp) / "accuracy.svg").read_bytes())


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__.split("\n\n")[1])
    runs, dest = Path(sys.argv[1]), Path(sys.argv[2])
    logs = Path(sys.argv[3]) if len(sys.argv) == 4 else runs
    for name in ("results.tsv", "london.tsv"):
        if not (runs / name).is_file():
            sys.exit(f"subset_summary.py: {runs / name} not found (run subset_study.sh first)")
    dest.mkdir(parents=True, exist_ok=True)
    rows = summarise(read_runs(runs))
    header = list(rows[0])
    write_csv(dest / "summary.csv", header, [[r[k] for k in header] for r in rows])
    plot(dest, rows)
    print("| subset | model | seeds | right per seed | accuracy % (mean ± sd) | pooled | London "
          "pooled | × London | Fisher p |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {float(r['fraction']) * 100:g} % | {r['model']} | {r['seeds']} | "
              f"{r['correct_per_seed']} of {r['total_per_seed'].split()[0]} | "
              f"{r['accuracy_mean_pct']} ± {r['accuracy_sd_pct'] or '—'} | "
              f"{r['correct_pooled']}/{r['total_pooled']} | {r['london_pooled']} | "
              f"{r['ratio_to_london']} | {r['fisher_p']} |")
    losses = defaultdict(dict)
    for run, epoch, loss, _ in pretrain_losses(logs, dest):
        losses[run][float(epoch)] = loss
    if losses:
        print("\npretraining loss (mean of the last 20 steps) at epoch 100 / 300 / 500 / 650, "
              "and the last epoch reached")
        for run, by_epoch in sorted(losses.items()):
            at = " / ".join(by_epoch.get(e, "—") for e in (100.0, 300.0, 500.0, 650.0))
            print(f"{run}: {at} (epoch {max(by_epoch):g}: {by_epoch[max(by_epoch)]})")


if __name__ == "__main__":
    main()
