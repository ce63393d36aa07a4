#!/usr/bin/env python3
"""Summarises the head sweep of the stolen-attention experiment over its seeds.

Reads the models train_models.sh wrote (RUNS/<score>_dh<d_h>-s<seed>/, `done` marker, char_gpt's
log.csv), runs the stolen_attention analysis on every finished checkpoint (skipped when
RUNS/analysis/summary.csv already covers them), and writes into DEST:

  sweep_runs.csv     one row per model: final and best validation loss, and per context L the
                     share of keys that are hull vertices and the queries an interior key won
  sweep_summary.csv  per score and d_h: mean and sample standard deviation over the seeds
  sweep_gap.csv      per comparison and d_h: the first score's final validation loss minus the
                     second's, paired by seed (same initial weights and data order), with its
                     mean and standard deviation (dot - euclid, dot - euclid_scaled,
                     euclid_scaled - euclid)
  sweep_val_loss.svg, sweep_vertex_proportion.svg (gnuplot)

and prints the tables as Markdown. Standard library only; the plots need gnuplot.

  examples/stolen_attention/summarise.py [RUNS] [DEST]
      (defaults runs/stolen_attention and docs/experiments/stolen_attention; the analysis binary
       is build/release/examples/stolen_attention/stolen_attention unless ANALYSE=path is set)
"""

import csv
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
from studies import mean_sd, replace_file, write_csv  # noqa: E402

RUN_NAME = re.compile(r"^(dot|euclid|euclid_scaled)_dh(\d+)-s(\d+)$")
# The scores in the order of the tables, with their plot labels and colours.
SCORES = {"dot": ("scaled dot product", "#1f77b4"),
          "euclid": ("negative squared Euclidean", "#d62728"),
          "euclid_scaled": ("negative squared Euclidean / sqrt(d_h)", "#2ca02c")}
# The paired differences reported (first minus second; positive: the second is lower).
COMPARISONS = (("dot", "euclid"), ("dot", "euclid_scaled"), ("euclid_scaled", "euclid"))
SEQUENCES = 128  # held-out windows per model in the analysis
CONTEXTS = (8, 16, 32, 64, 128)




def finished_runs(runs: Path):
    found = []
    for d in sorted(runs.iterdir()):
        m = RUN_NAME.match(d.name)
        if not m or not d.is_dir():
            continue
        if not (d / "done").exists():
            print(f"unfinished, left out: {d}", file=sys.stderr)
            continue
        with open(d / "log.csv", newline="") as f:
            val = [float(r["val_loss"]) for r in csv.DictReader(f)]
        found.append({"name": d.name, "score": m[1], "d_h": int(m[2]), "seed": int(m[3]),
                      "final_val": val[-1], "best_val": min(val),
                      "checkpoint": d / "checkpoint.safetensors"})
    return found


def analysis_rows(runs: Path, models):
    """The analysis summary (per model and context), computed once for the models given."""
    out = runs / "analysis"
    summary = out / "summary.csv"
    wanted = {m["name"] for m in models}
    if summary.exists():
        with open(summary, newline="") as f:
            rows = list(csv.DictReader(f))
        if wanted <= {r["model"] for r in rows}:
            return rows
    binary = os.environ.get("ANALYSE", "build/release/examples/stolen_attention/stolen_attention")
    if not os.access(binary, os.X_OK):
        sys.exit(f"summarise.py: the analysis binary {binary} is missing (cmake --build --preset "
                 "release --target stolen_attention, or set ANALYSE)")
    # Its own analysis, missing or over fewer models than have finished: replaced.
    args = [binary, "--sequences", str(SEQUENCES), "--threads", "1", "--out", str(out),
            "--overwrite"]
    args += [f"{m['name']}={m['checkpoint']}" for m in models]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    with open(summary, newline="") as f:
        return list(csv.DictReader(f))




def fmt(x, digits=4):
    return "nan" if math.isnan(x) else f"{x:.{digits}f}"


def plot(dest: Path, summary):
    """Two SVGs: final validation loss and the vertex share at L = 128 against d_h."""
    with tempfile.TemporaryDirectory() as tmp:
        present = [score for score in SCORES if any(s["score"] == score for s in summary)]
        for score in present:
            with open(Path(tmp) / f"{score}.dat", "w") as f:
                for s in summary:
                    if s["score"] == score:
                        f.write(f"{s['d_h']} {s['val_mean']} {s['val_sd']} "
                                f"{s['vertex'][128][0]} {s['vertex'][128][1]}\n")

        def lines(columns):
            return ", ".join(f'"{tmp}/{score}.dat" using {columns} with yerrorlines lw 2 '
                             f'lc rgb "{SCORES[score][1]}" title "{SCORES[score][0]}"'
                             for score in present)

        common = f"""set terminal svg size 720,440 font "sans,12" background rgb "white" noenhanced
set logscale x 2
set xrange [1.5:90]
set xtics (2, 4, 8, 16, 32, 64)
set xlabel "head dimension d_h (d_model 64 = 64 / d_h heads)"
set key top right
set grid
"""
        script = common + f"""set output "{tmp}/val.svg"
set title "final validation loss, mean ± sd over seeds"
set ylabel "validation loss (nats per character)"
plot {lines("1:2:3")}
set output "{tmp}/vertex.svg"
set title "share of the 128 keys a query sees that are hull vertices, mean ± sd over seeds"
set ylabel "vertex share at context 128"
set yrange [0:1.05]
set key bottom right
plot {lines("1:4:5")}
"""
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
        for src, name in (("val.svg", "sweep_val_loss.svg"),
                          ("vertex.svg", "sweep_vertex_proportion.svg")):
            replace_file(dest / name, (Path(tmp) / src).read_bytes())


def main():
    runs = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/stolen_attention")
    dest = Path(sys.argv[2] if len(sys.argv) > 2 else "docs/experiments/stolen_attention")
    models = finished_runs(runs)
    if not models:
        sys.exit(f"summarise.py: no finished models in {runs}")
    dest.mkdir(parents=True, exist_ok=True)
    by_model = {}
    for r in analysis_rows(runs, models):
        by_model.setdefault(r["model"], {})[int(r["context"])] = r
    for m in models:
        a = by_model[m["name"]]
        m["vertex"] = {L: float(a[L]["mean_vertex_proportion"]) for L in CONTEXTS}
        m["wins"] = {L: int(a[L]["interior_wins"]) / int(a[L]["queries"]) for L in CONTEXTS}
        m["top_weight"] = float(a[128]["mean_max_weight_vertex"])  # the largest weight, L = 128
        m["norm_var"] = float(a[128]["mean_norm_variance"])

    header = ["score", "d_h", "seed", "final_val_loss", "best_val_loss"]
    header += [f"vertex_share_L{L}" for L in CONTEXTS] + [f"interior_wins_L{L}" for L in CONTEXTS]
    write_csv(dest / "sweep_runs.csv", header,
              [[m["score"], m["d_h"], m["seed"], fmt(m["final_val"]), fmt(m["best_val"])]
               + [fmt(m["vertex"][L]) for L in CONTEXTS] + [fmt(m["wins"][L]) for L in CONTEXTS]
               for m in sorted(models, key=lambda m: (m["score"], -m["d_h"], m["seed"]))])

    summary = []
    for score in SCORES:
        for dh in sorted({m["d_h"] for m in models}, reverse=True):
            group = [m for m in models if m["score"] == score and m["d_h"] == dh]
            if not group:
                continue
            s = {"score": score, "d_h": dh, "runs": len(group)}
            s["val_mean"], s["val_sd"] = mean_sd(m["final_val"] for m in group)
            s["vertex"] = {L: mean_sd(m["vertex"][L] for m in group) for L in CONTEXTS}
            s["wins"] = {L: mean_sd(m["wins"][L] for m in group) for L in CONTEXTS}
            s["top_weight"] = mean_sd(m["top_weight"] for m in group)
            s["norm_var"] = mean_sd(m["norm_var"] for m in group)
            summary.append(s)
    header = ["score", "d_h", "runs", "final_val_mean", "final_val_sd"]
    for L in CONTEXTS:
        header += [f"vertex_share_L{L}_mean", f"vertex_share_L{L}_sd"]
    header += ["interior_wins_L128_mean", "interior_wins_L128_sd", "top_weight_L128_mean",
               "top_weight_L128_sd", "key_norm_variance_L128_mean", "key_norm_variance_L128_sd"]
    rows = []
    for s in summary:
        row = [s["score"], s["d_h"], s["runs"], fmt(s["val_mean"]), fmt(s["val_sd"])]
        for L in CONTEXTS:
            row += [fmt(s["vertex"][L][0]), fmt(s["vertex"][L][1])]
        rows.append(row + [fmt(s["wins"][128][0]), fmt(s["wins"][128][1]),
                           fmt(s["top_weight"][0]), fmt(s["top_weight"][1]),
                           fmt(s["norm_var"][0]), fmt(s["norm_var"][1])])
    write_csv(dest / "sweep_summary.csv", header, rows)

    gaps = []
    for first, second in COMPARISONS:
        for dh in sorted({m["d_h"] for m in models}, reverse=True):
            pairs = {}
            for m in models:
                if m["d_h"] == dh:
                    pairs.setdefault(m["seed"], {})[m["score"]] = m["final_val"]
            per_seed = [(seed, p[first] - p[second]) for seed, p in sorted(pairs.items())
                        if first in p and second in p]
            if per_seed:
                mean, sd = mean_sd(g for _, g in per_seed)
                gaps.append([f"{first}-{second}", dh, len(per_seed), fmt(mean), fmt(sd),
                             sum(g > 0 for _, g in per_seed),
                             " ".join(f"{seed}:{g:+.4f}" for seed, g in per_seed)])
    write_csv(dest / "sweep_gap.csv",
              ["comparison", "d_h", "seeds", "gap_mean", "gap_sd", "seeds_second_lower",
               "per_seed"], gaps)
    plot(dest, summary)

    print("| score | d_h | heads | seeds | final val loss | vertex share, L = 32 | L = 128 |"
          " interior wins, L = 128 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in summary:
        v32, v128, w = s["vertex"][32], s["vertex"][128], s["wins"][128]
        print(f"| {s['score']} | {s['d_h']} | {64 // s['d_h']} | {s['runs']} | "
              f"{s['val_mean']:.4f} ± {s['val_sd']:.4f} | {v32[0]:.3f} ± {v32[1]:.3f} | "
              f"{v128[0]:.3f} ± {v128[1]:.3f} | {w[0]:.4f} ± {w[1]:.4f} |")
    print()
    print("| comparison | d_h | first − second (mean ± sd) | seeds with the second lower |"
          " per seed |")
    print("| --- | --- | --- | --- | --- |")
    for comparison, dh, n, mean, sd, lower, per_seed in gaps:
        print(f"| {comparison} | {dh} | {mean} ± {sd} | {lower} of {n} | {per_seed} |")

if __name__ == "__main__":
    main()
