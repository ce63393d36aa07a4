#!/usr/bin/env python3
"""Summarises the value-aware study over its seeds.

Reads what run_study.sh wrote (RUNS/eval_<kernel>-s<seed>.csv from `value_aware eval`,
RUNS/weights_<kernel>-s<seed>.csv from `value_aware weights`) and writes into DEST:

  eval.csv      every evaluation row, with kernel and seed columns
  summary.csv   per kernel and method: perplexity and its ratio to the model's exact
                perplexity, mean and sample standard deviation over the seeds
  weights.csv   per kernel and layer: the concentration statistics, mean and standard deviation
                over the seeds
  ovo.svg       the OVO-r validation loss per kernel, mean ± sd over the seeds (gnuplot)

and prints every table docs/experiments/value_aware.md quotes from them, as Markdown.
Standard library only.

  examples/value_aware/summarise.py [RUNS] [DEST]   (runs/value_aware, docs/experiments/value_aware)
"""

import csv
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
from studies import mean_sd, replace_file, write_csv  # noqa: E402

NAME = re.compile(r"^(eval|weights)_([a-z0-9-]+)-s(\d+)\.csv$")
LAYERS = re.compile(r"^layers_([a-z0-9-]+)-s(\d+)-L(\d+)\.csv$")
LAYER_SETS = {"0": "layer 0 only", "123": "layers 1-3 only"}
KERNELS = ("standard", "poly2", "linear", "linear-scaled")  # the order of the tables
LABEL = {"standard": "exp", "poly2": "poly2", "linear": "elu+1", "linear-scaled": "elu+1, scaled"}




def read(runs: Path):
    evals, weights, layers = {}, {}, {}
    for f in sorted(runs.iterdir()):
        m, ml = NAME.match(f.name), LAYERS.match(f.name)
        if not m and not ml:
            continue
        with open(f, newline="") as fh:
            rows = list(csv.DictReader(fh))
        if ml:
            layers[(ml[1], int(ml[2]), ml[3])] = rows
        else:
            (evals if m[1] == "eval" else weights)[(m[2], int(m[3]))] = rows
    return evals, weights, layers




def summarise_evals(evals):
    """{(kernel, method): {"r": r, "ppl": [...], "ratio": [...], "loss": [...], "keys": [...]}}"""
    out = {}
    for (kernel, _seed), rows in sorted(evals.items()):
        exact = next(float(r["perplexity"]) for r in rows if r["method"] == "exact")
        for r in rows:
            e = out.setdefault((kernel, r["method"]), {"r": int(r["r"]), "ppl": [], "ratio": [],
                                                       "loss": [], "keys": [], "error": []})
            e["error"].append(float(r["relative_error"]))
            e["ppl"].append(float(r["perplexity"]))
            e["ratio"].append(float(r["perplexity"]) / exact)
            e["loss"].append(float(r["loss"]))
            e["keys"].append(float(r["mean_keys"]))
    return out


def plot(dest: Path, summary, kernels):
    colors = {"standard": "#1f77b4", "poly2": "#d62728", "linear": "#2ca02c"}
    with tempfile.TemporaryDirectory() as tmp:
        plots = []
        for k in kernels:
            rows = sorted((e["r"], *mean_sd(e["loss"])) for (kk, m), e in summary.items()
                          if kk == k and m.startswith("OVO-"))
            exact = mean_sd(summary[(k, "exact")]["loss"])[0]
            with open(Path(tmp) / f"{k}.dat", "w") as f:
                for r, mean, sd in rows:
                    f.write(f"{r} {mean} {sd} {exact}\n")
            c = colors.get(k, "#9467bd")
            plots.append(f"'{tmp}/{k}.dat' using 1:2:3 with yerrorlines lw 2 lc rgb '{c}' "
                         f"title '{LABEL.get(k, k)}: OVO-r'")
            plots.append(f"'{tmp}/{k}.dat' using 1:4 with lines dt 2 lc rgb '{c}' "
                         f"title '{LABEL.get(k, k)}: exact'")
        script = f"""set terminal svg size 720,440 font "sans,12" background rgb "white" noenhanced
set output "{tmp}/ovo.svg"
set logscale x 2
set key top right
set grid
set title "validation loss with the r largest weights kept (OVO-r), mean ± sd over seeds"
set xlabel "r (keys kept per query)"
set ylabel "loss (nats per character)"
plot {", ".join(plots)}
"""
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
        replace_file(dest / "ovo.svg", (Path(tmp) / "ovo.svg").read_bytes())


def main():
    runs = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/value_aware")
    dest = Path(sys.argv[2] if len(sys.argv) > 2 else "docs/experiments/value_aware")
    evals, weights, layers = read(runs)
    if not evals:
        sys.exit(f"summarise.py: no eval_<kernel>-s<seed>.csv in {runs}")
    dest.mkdir(parents=True, exist_ok=True)
    kernels = [k for k in KERNELS if any(kk == k for kk, _ in evals)]
    kernels += sorted({k for k, _ in evals} - set(kernels))
    seeds = {k: sorted(s for kk, s in evals if kk == k) for k in kernels}

    rows = []
    for (kernel, seed), ev in sorted(evals.items()):
        for r in ev:
            rows.append([kernel, seed, r["method"], r["r"], r["mean_keys"], r["loss"],
                         r["perplexity"], r["relative_error"], r["seconds"]])
    write_csv(dest / "eval.csv", ["kernel", "seed", "method", "r", "mean_keys", "loss",
                                  "perplexity", "relative_error", "seconds"], rows)

    summary = summarise_evals(evals)
    rows = []
    for (kernel, method), e in summary.items():
        ppl, ratio = mean_sd(e["ppl"]), mean_sd(e["ratio"])
        loss, error = mean_sd(e["loss"]), mean_sd(e["error"])
        rows.append([kernel, method, e["r"], len(e["ppl"]), f"{mean_sd(e['keys'])[0]:.2f}",
                     f"{loss[0]:.4f}", f"{loss[1]:.4f}", f"{ppl[0]:.4f}", f"{ppl[1]:.4f}",
                     f"{ratio[0]:.4f}", f"{ratio[1]:.4f}", f"{error[0]:.4e}", f"{error[1]:.4e}"])
    write_csv(dest / "summary.csv", ["kernel", "method", "r", "seeds", "mean_keys", "loss_mean",
                                     "loss_sd", "perplexity_mean", "perplexity_sd",
                                     "ratio_to_exact_mean", "ratio_to_exact_sd",
                                     "relative_error_mean", "relative_error_sd"], rows)

    stats = ["top1", "tail_8", "tail_dh1", "effective_keys", "q_norm", "k_norm"]
    scale_cols = []
    if weights:
        first = next(iter(weights.values()))
        scale_cols = [c for c in first[0] if c.startswith("tail_dh1_scale_")]
    rows, by_kernel = [], {}
    for kernel in kernels:
        per_layer = {}
        for (k, seed), ws in weights.items():
            if k != kernel:
                continue
            for r in ws:
                per_layer.setdefault(int(r["layer"]), []).append(r)
        for layer, rs in sorted(per_layer.items()):
            row = [kernel, layer, len(rs)]
            for c in stats + scale_cols:
                row += [f"{v:.5f}" for v in mean_sd(float(r[c]) for r in rs)]
            rows.append(row)
        # The whole model: mean over layers per seed, then mean ± sd over seeds.
        seeds_w = [ws for (k, _), ws in weights.items() if k == kernel]
        if seeds_w:
            by_kernel[kernel] = {c: mean_sd(statistics.fmean(float(r[c]) for r in ws)
                                            for ws in seeds_w) for c in stats + scale_cols}
    header = ["kernel", "layer", "seeds"]
    for c in stats + scale_cols:
        header += [f"{c}_mean", f"{c}_sd"]
    write_csv(dest / "weights.csv", header, rows)

    # Ratio to exact with only some layers approximated, per kernel, layer set and method.
    by_layers = {}
    for (kernel, _seed, which), rs in layers.items():
        exact = next(float(r["perplexity"]) for r in rs if r["method"] == "exact")
        for r in rs:
            by_layers.setdefault((kernel, which, r["method"]), []).append(
                float(r["perplexity"]) / exact)
    layer_methods = ("OVO-1", "OVO-33", "OVA-1")
    rows = []
    for (kernel, which, method), ratios in sorted(by_layers.items()):
        if method in layer_methods:
            m, sd = mean_sd(ratios)
            rows.append([kernel, LAYER_SETS.get(which, which), method, len(ratios), f"{m:.4f}",
                         f"{sd:.4f}"])
    if rows:
        write_csv(dest / "layers.csv", ["kernel", "approximated", "method", "seeds",
                                        "ratio_to_exact_mean", "ratio_to_exact_sd"], rows)
    plot(dest, summary, kernels)

    def cell(kernel, method, what="ppl", digits=3):
        e = summary.get((kernel, method))
        if not e:
            return "—"
        mean, sd = mean_sd(e[what])
        return f"{mean:.{digits}f} ± {sd:.{digits}f}"

    dh1 = {k: next(m for (kk, m) in summary if kk == k and m.startswith("OVO-")
                   and summary[(kk, m)]["r"] == 33) for k in kernels if (k, "OVO-33") in summary}
    print("Perplexity, mean ± sd over seeds", {k: seeds[k] for k in kernels})
    print("| kernel | exact | OVO-1 | OVO-(d_h+1) | OVA-1 | OVA-(d_h+1) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for k in kernels:
        print(f"| {LABEL.get(k, k)} | {cell(k, 'exact')} | {cell(k, 'OVO-1')} | "
              f"{cell(k, dh1.get(k, 'OVO-33'))} | {cell(k, 'OVA-1')} | {cell(k, 'OVA-(d+1)')} |")
    print()
    print("Ratio to exact, mean ± sd over seeds")
    print("| kernel | OVO-1 | OVO-(d_h+1) | OVA-1 | OVA-(d_h+1) |")
    print("| --- | --- | --- | --- | --- |")
    for k in kernels:
        print(f"| {LABEL.get(k, k)} | {cell(k, 'OVO-1', 'ratio', 2)} | "
              f"{cell(k, dh1.get(k, 'OVO-33'), 'ratio', 2)} | {cell(k, 'OVA-1', 'ratio', 2)} | "
              f"{cell(k, 'OVA-(d+1)', 'ratio', 2)} |")
    if "poly2" in kernels and "linear" in kernels:
        print()
        for method in ("OVO-1", "OVO-33"):
            p = summary.get(("poly2", method), {}).get("ratio", [])
            e = summary.get(("linear", method), {}).get("ratio", [])
            pairs = list(zip(seeds["poly2"], p, e))
            worse = sum(ei > pi for _, pi, ei in pairs)
            print(f"{method}: elu+1 hurt more than poly2 in {worse} of {len(pairs)} seeds: "
                  + ", ".join(f"seed {s}: poly2 {pi:.2f}, elu+1 {ei:.2f}" for s, pi, ei in pairs))
    if by_kernel:
        print()
        print("Attention weights (scored queries, mean over layers; mean ± sd over seeds)")
        print("| kernel | largest weight | outside top 8 | outside top d_h+1 | effective keys | "
              + " | ".join("outside d_h+1, q,k ×" + c.rsplit("_", 1)[1] for c in scale_cols)
              + " |")
        print("| --- " * (5 + len(scale_cols)) + "|")
        for k, st in by_kernel.items():
            cells = [f"{st[c][0]:.3f} ± {st[c][1]:.3f}" for c in stats[:3]]
            cells.append(f"{st['effective_keys'][0]:.1f} ± {st['effective_keys'][1]:.1f}")
            cells += [f"{st[c][0]:.3f} ± {st[c][1]:.3f}" for c in scale_cols]
            print(f"| {LABEL.get(k, k)} | " + " | ".join(cells) + " |")

    if by_layers:
        print()
        print("Ratio to exact perplexity with only some layers approximated (mean ± sd over seeds)")
        print("| kernel | approximated | " + " | ".join(layer_methods) + " |")
        print("| --- | --- |" + " --- |" * len(layer_methods))
        for k in kernels:
            for which, label in LAYER_SETS.items():
                cells = []
                for method in layer_methods:
                    r = by_layers.get((k, which, method))
                    cells.append(f"{mean_sd(r)[0]:.2f} ± {mean_sd(r)[1]:.2f}" if r else "—")
                if any(c != "—" for c in cells):
                    print(f"| {LABEL.get(k, k)} | {label} | " + " | ".join(cells) + " |")

    with open(dest / "weights.csv", newline="") as fh:
        weights_rows = list(csv.DictReader(fh))
    print_more_tables(summary, kernels, weights_rows)


def print_more_tables(summary, kernels, weights_rows):
    """The rest of the tables value_aware.md quotes: relative errors, the OVO-r curve, OVA-r
    against OVO-r and window-r, the practical schemes, and the weights per layer."""

    def mean(kernel, method, what):
        e = summary.get((kernel, method))
        return mean_sd(e[what])[0] if e else None

    def fmt(v, digits):
        return "—" if v is None else f"{v:.{digits}f}"

    def ppl(kernel, method):
        e = summary.get((kernel, method))
        if not e:
            return "—"
        m, sd = mean_sd(e["ppl"])
        digits = 3 if m < 10 else 2 if m < 100 else 1 if m < 1000 else 0
        return f"{m:.{digits}f} ± {sd:.{digits}f}"

    labels = " | ".join(LABEL.get(k, k) for k in kernels)
    print()
    print("Relative output error (mean over seeds)")
    print("| kernel | OVO-1 | OVO-33 | OVA-1 | OVA-33 |")
    print("| --- | --- | --- | --- | --- |")
    for k in kernels:
        cells = [mean(k, m, "error") for m in ("OVO-1", "OVO-33", "OVA-1", "OVA-(d+1)")]
        print(f"| {LABEL.get(k, k)} | " + " | ".join(
            "—" if v is None else f"{v:.2g}" if v >= 1e-3 else f"{v:.1e}" for v in cells) + " |")

    print()
    print("OVO-r loss (nats per character, mean over seeds); mean keys of the first kernel")
    print(f"| r | mean keys | {labels} |")
    print("| --- | --- |" + " --- |" * len(kernels))
    rs = sorted({e["r"] for (k, m), e in summary.items() if m.startswith("OVO-")})
    print("| exact | " + fmt(mean(kernels[0], "exact", "keys"), 1) + " | "
          + " | ".join(fmt(mean(k, "exact", "loss"), 4) for k in kernels) + " |")
    for r in rs:
        print(f"| {r} | {fmt(mean(kernels[0], f'OVO-{r}', 'keys'), 1)} | "
              + " | ".join(fmt(mean(k, f"OVO-{r}", "loss"), 4) for k in kernels) + " |")

    print()
    print("Perplexity of OVO-r, the OVA-r heuristic and window-r")
    print("| kernel | r | OVO-r | OVA-r (heuristic) | window-r |")
    print("| --- | --- | --- | --- | --- |")
    for k in kernels:
        for r in (2, 4, 8):
            print(f"| {LABEL.get(k, k)} | {r} | {ppl(k, f'OVO-{r}')} | "
                  f"{ppl(k, f'OVA-{r} (heuristic)')} | {ppl(k, f'window-{r}')} |")

    print()
    print("Practical schemes: perplexity; keys = mean keys per scored query (first kernel)")
    print(f"| scheme | keys | {labels} |")
    print("| --- | --- |" + " --- |" * len(kernels))
    families = ("window-", "LSH ", "RF ")
    schemes = ["exact"] + sorted(
        {m for (_, m) in summary if m.startswith(families)},
        key=lambda m: (next(i for i, f in enumerate(families) if m.startswith(f)),
                       [int(n) for n in re.findall(r"\d+", m)]))
    for m in schemes:
        keys = mean(kernels[0], m, "keys")
        print(f"| {m} | {'all' if keys == 0 else fmt(keys, 1)} | "
              + " | ".join(ppl(k, m) for k in kernels) + " |")

    if weights_rows:
        print()
        print("Weights per layer (mean over seeds): largest, outside top d_h+1, effective keys, "
              "|q|, |k|, outside top d_h+1 with q and k scaled")
        scale_cols = [c for c in weights_rows[0] if c.startswith("tail_dh1_scale_")
                      and c.endswith("_mean")]
        print("| kernel, layer | largest weight | outside top 33 | effective keys | ‖q‖ | ‖k‖ | "
              + " / ".join("c = " + c.split("_")[3] for c in scale_cols) + " |")
        print("| --- " * 7 + "|")
        for w in weights_rows:
            print(f"| {LABEL.get(w['kernel'], w['kernel'])}, {w['layer']} | "
                  f"{float(w['top1_mean']):.3f} | {float(w['tail_dh1_mean']):.3f} | "
                  f"{float(w['effective_keys_mean']):.1f} | {float(w['q_norm_mean']):.1f} | "
                  f"{float(w['k_norm_mean']):.1f} | "
                  + " / ".join(f"{float(w[c]):.3f}" for c in scale_cols) + " |")


if __name__ == "__main__":
    main()
