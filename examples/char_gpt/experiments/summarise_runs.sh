#!/usr/bin/env bash
# Summarises char_gpt runs named RUNS/<variant>-s<seed>/ (log.csv columns: step, train_loss,
# val_loss, lr, grad_norm, tokens_per_s, elapsed_s) over their seeds. Writes into DEST:
#   runs.csv        one row per run: final and best validation loss, mean tokens/s, seconds
#   summary.csv     one row per variant: mean and sample standard deviation over the seeds
#   curves.csv      validation loss per variant and step: mean and standard deviation
#   curves_by_seed.csv  every run's curve: variant, seed, step, training and validation loss
#   validation.svg  the mean validation curves, each with a band of ± one standard deviation
# and prints summary.csv as a Markdown table. Does not train. A variant needs every run it has
# to have finished (`done`); missing runs are named on stderr and left out.
#
#   examples/char_gpt/experiments/summarise_runs.sh RUNS DEST VARIANT...
# (TITLE=... sets the plot's title)
set -euo pipefail
(($# >= 3)) || { echo "usage: summarise_runs.sh RUNS DEST VARIANT..." >&2; exit 2; }
RUNS=$1 DEST=$2
shift 2
command -v gnuplot >/dev/null || { echo "summarise_runs.sh: gnuplot is needed (apt-get install gnuplot-nox)" >&2; exit 1; }
mkdir -p "$DEST"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "variant,seed,final_val_loss,best_val_loss,mean_tokens_per_s,seconds" >"$tmp/runs.csv"
echo "variant,step,val_loss_mean,val_loss_sd,runs" >"$tmp/curves.csv"
echo "variant,seed,step,train_loss,val_loss" >"$tmp/curves_by_seed.csv"
for variant in "$@"; do
  logs=()
  for dir in "$RUNS/$variant"-s*; do
    [[ -d $dir ]] || continue
    if [[ -f $dir/done && -f $dir/log.csv ]]; then logs+=("$dir/log.csv"); else echo "unfinished: $dir" >&2; fi
  done
  ((${#logs[@]})) || { echo "no finished runs of $variant in $RUNS" >&2; continue; }
  for log in "${logs[@]}"; do
    seed=${log%/log.csv}
    seed=${seed##*-s}
    awk -F, -v v="$variant" -v s="$seed" 'NR > 1 {
        last = $3; if (best == "" || $3 < best) best = $3; tps += $6; n++; sec = $7 }
      END { printf "%s,%s,%.4f,%.4f,%.0f,%.1f\n", v, s, last, best, tps / n, sec }' "$log" >>"$tmp/runs.csv"
    awk -F, -v v="$variant" -v s="$seed" 'NR > 1 { printf "%s,%s,%s,%.4f,%.4f\n", v, s, $1, $2, $3 }' \
      "$log" >>"$tmp/curves_by_seed.csv"
  done
  # Mean and sample standard deviation of the validation loss at each logged step.
  awk -F, -v v="$variant" 'FNR > 1 { sum[$1] += $3; sq[$1] += $3 * $3; n[$1]++ }
    END { for (s in n) { m = sum[s] / n[s]; d = n[s] > 1 ? sqrt((sq[s] - n[s] * m * m) / (n[s] - 1)) : 0;
          printf "%s,%s,%.4f,%.4f,%d\n", v, s, m, (d == d ? d : 0), n[s] } }' "${logs[@]}" |
    sort -t, -k2,2n >>"$tmp/curves.csv"
done

echo "variant,runs,final_val_mean,final_val_sd,best_val_mean,best_val_sd,tokens_per_s_mean" >"$tmp/summary.csv"
for variant in "$@"; do
  awk -F, -v v="$variant" '$1 == v { n++; f += $3; ff += $3 * $3; b += $4; bb += $4 * $4; t += $5 }
    function sd(s, ss) { return n > 1 ? sqrt((ss - s * s / n) / (n - 1)) : 0 }
    END { if (n) printf "%s,%d,%.4f,%.4f,%.4f,%.4f,%.0f\n", v, n, f / n, sd(f, ff), b / n, sd(b, bb), t / n }' \
    "$tmp/runs.csv" >>"$tmp/summary.csv"
done

# The plot: one band and one line per variant.
colors=("#1f77b4" "#d62728" "#2ca02c" "#9467bd" "#ff7f0e" "#8c564b")
plots=()
i=0
for variant in "$@"; do
  grep -q "^$variant," "$tmp/curves.csv" || continue
  grep "^$variant," "$tmp/curves.csv" >"$tmp/$variant.csv"
  c=${colors[i % ${#colors[@]}]}
  plots+=("'$tmp/$variant.csv' using 2:(\$3-\$4):(\$3+\$4) with filledcurves fs transparent solid 0.2 lc rgb '$c' notitle")
  plots+=("'$tmp/$variant.csv' using 2:3 with lines lw 2 lc rgb '$c' title '$variant'")
  i=$((i + 1))
done
joined=$(printf '%s, ' "${plots[@]}")
gnuplot <<EOF
set terminal svg size 720,440 font "sans,12" background rgb "white"
set output "$tmp/validation.svg"
set datafile separator ","
set key top right
set grid
set title "${TITLE:-char_gpt at the demo budget: validation loss, mean ± sd over seeds}"
set xlabel "step"
set ylabel "validation loss (nats per character)"
plot ${joined%, }
EOF

for f in runs.csv summary.csv curves.csv curves_by_seed.csv validation.svg; do
  cp "$tmp/$f" "$DEST/$f.tmp.$$" && mv "$DEST/$f.tmp.$$" "$DEST/$f"
done
echo "| variant | runs | final val loss (mean ± sd) | best val loss (mean ± sd) | tokens/s |"
echo "| --- | --- | --- | --- | --- |"
tail -n +2 "$DEST/summary.csv" | awk -F, '{ printf "| %s | %s | %s ± %s | %s ± %s | %s |\n", $1, $2, $3, $4, $5, $6, $7 }'
