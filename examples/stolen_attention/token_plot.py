#!/usr/bin/env python3
"""Draws max_weight_per_token.svg from an analysis's tokens.csv (stolen_attention writes both).

For each model, one panel: every token is one x position, ranked by the largest weight it received
as a hull vertex (largest first; tokens never a vertex come last); at that x the coloured line is
that weight and the grey point the largest weight the same token received as an interior key. So a
token's two values are read off one vertical line, the per-token pairing of the thesis's figure.
Standard library only; the plot needs gnuplot.

  examples/stolen_attention/token_plot.py TOKENS_CSV OUT_SVG
  examples/stolen_attention/token_plot.py docs/experiments/stolen_attention/tokens.csv \
      docs/experiments/stolen_attention/max_weight_per_token.svg
"""

import csv
import math
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
from studies import replace_file  # noqa: E402

COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")


def read_tokens(path: Path):
    """{model: [(vertex, interior), ...]} in file order; NaN where a token never was that."""
    models = {}
    with open(path, newline="") as f:
        rows = csv.DictReader(f)
        need = {"model", "max_weight_vertex", "max_weight_interior"}
        if rows.fieldnames is None or not need <= set(rows.fieldnames):
            sys.exit(f"token_plot.py: {path} lacks the columns {sorted(need)}")
        for r in rows:
            models.setdefault(r["model"], []).append(
                (float(r["max_weight_vertex"]), float(r["max_weight_interior"])))
    if not models:
        sys.exit(f"token_plot.py: {path} has no tokens")
    return models


def ranked(pairs):
    """The pairs ranked by the vertex weight, largest first, tokens never a vertex last."""
    return sorted(pairs, key=lambda p: (math.isnan(p[0]), -p[0] if not math.isnan(p[0]) else 0))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    models = read_tokens(src)
    cols = min(3, len(models))
    rows = math.ceil(len(models) / cols)
    with tempfile.TemporaryDirectory() as tmp:
        script = [f'set terminal svg size {330 * cols},{300 * rows} font "sans,11" '
                  'background rgb "white" noenhanced',
                  f'set output "{tmp}/plot.svg"',
                  f'set multiplot layout {rows},{cols} title "largest weight per token: as a hull '
                  'vertex (line) and, for the same token, as an interior key (grey)"',
                  "set yrange [0:1.02]", "set grid", "set key top right",
                  'set xlabel "token, by its largest weight as a vertex"',
                  'set ylabel "largest attention weight"']
        for i, (name, pairs) in enumerate(models.items()):
            data = Path(tmp) / f"m{i}.dat"
            with open(data, "w") as f:
                for rank, (v, w) in enumerate(ranked(pairs), start=1):
                    f.write(f"{rank} {'NaN' if math.isnan(v) else v} "
                            f"{'NaN' if math.isnan(w) else w}\n")
            script += [f'set title "{name}"',
                       f'plot "{data}" using 1:2 with lines lw 2 lc rgb "{COLOURS[i % len(COLOURS)]}" '
                       'title "vertex", '
                       f'"{data}" using 1:3 with points pt 7 ps 0.5 lc rgb "#777777" title "interior"']
        script.append("unset multiplot")
        subprocess.run(["gnuplot"], input="\n".join(script) + "\n", text=True, check=True)
        replace_file(out, (Path(tmp) / "plot.svg").read_bytes())
    print(f"wrote {out} ({len(models)} models)")


if __name__ == "__main__":
    main()
