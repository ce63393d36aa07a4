#!/usr/bin/env bash
# Plots and tabulates the runs of symmetric_attention.sh: validation loss against steps for
# standard vs symmetric attention and for wiki from scratch vs transferred from Shakespeare, and
# the final validation loss against the fraction of wiki's training data. Writes SVGs (gnuplot),
# the data behind them as CSVs (curves.csv: every evaluation of every run; fraction.csv: the
# points of the fraction plot; runs.csv: the table) and prints a Markdown table of each run
# (final validation loss, best validation loss, mean tokens/s, steps). Does not train; runs that
# are missing are left out and named on stderr, runs without their `done` marker are marked
# unfinished (and left out of the fraction plot).
#
#   examples/char_gpt/experiments/plot_symmetric_attention.sh runs/symmetric_attention docs/experiments/symmetric_attention
set -euo pipefail
RUNS=${1:-runs/symmetric_attention}
DEST=${2:-docs/experiments/symmetric_attention}
mkdir -p "$DEST"
command -v gnuplot >/dev/null || { echo "gnuplot is needed (apt-get install gnuplot-nox)" >&2; exit 1; }

have() { [[ -f "$RUNS/$1/log.csv" ]] || { echo "missing: $RUNS/$1" >&2; return 1; }; }

# curves OUT TITLE NAME LABEL [NAME LABEL ...]: validation loss against step, one line per run.
curves() {
  local out=$1 title=$2
  shift 2
  local plots=()
  while (($#)); do
    if have "$1"; then
      plots+=("'$RUNS/$1/log.csv' using 1:3 with lines lw 2 title '$2'")
    fi
    shift 2
  done
  ((${#plots[@]})) || return 0
  local joined
  joined=$(printf '%s, ' "${plots[@]}")
  gnuplot <<EOF
set terminal svg size 720,440 font "sans,12" background rgb "white"
set output "$out"
set datafile separator ","
set key top right
set grid
set title "$title"
set xlabel "step"
set ylabel "validation loss (nats per character)"
plot ${joined%, }
EOF
  echo "wrote $out" >&2
}

curves "$DEST/shakespeare.svg" "tiny Shakespeare: standard vs symmetric (tied W_Q = W_K)" \
  shakespeare_standard "standard" shakespeare_symmetric "symmetric"
curves "$DEST/transfer.svg" "wiki.txt: from scratch vs from the Shakespeare model" \
  wiki_scratch "from scratch" wiki_transfer "transferred"

runs=(shakespeare_standard shakespeare_symmetric wiki_scratch wiki_transfer wiki_fraction_25
      wiki_fraction_50 wiki_fraction_75)

# curves.csv: every evaluation of every run (the lines of the SVGs), written whole then renamed.
{
  echo "run,step,train_loss,val_loss,tokens_per_s"
  for name in "${runs[@]}"; do
    [[ -f "$RUNS/$name/log.csv" ]] || continue
    awk -F, -v OFS=, -v name="$name" 'NR > 1 { print name, $1, $2, $3, $6 }' "$RUNS/$name/log.csv"
  done
} > "$DEST/curves.csv.tmp" && mv "$DEST/curves.csv.tmp" "$DEST/curves.csv"
echo "wrote $DEST/curves.csv" >&2

# Final validation loss against the fraction of wiki's training split (100 % = wiki_scratch).
fractions=$(mktemp)
trap 'rm -f "$fractions"' EXIT
for f in 25 50 75 100; do
  name=wiki_fraction_$f
  [[ $f == 100 ]] && name=wiki_scratch
  have "$name" || continue
  [[ -f "$RUNS/$name/done" ]] || { echo "unfinished: $RUNS/$name" >&2; continue; }
  echo "$f,$(tail -n 1 "$RUNS/$name/log.csv" | cut -d, -f3)" >> "$fractions"
done
if [[ -s "$fractions" ]]; then
  gnuplot <<EOF
set terminal svg size 720,440 font "sans,12" background rgb "white"
set output "$DEST/fraction.svg"
set datafile separator ","
set grid
set key off
set title "wiki.txt: final validation loss against the training data used"
set xlabel "fraction of the training split (%)"
set ylabel "final validation loss"
set xrange [0:105]
plot "$fractions" using 1:2 with linespoints lw 2 pt 7
EOF
  echo "wrote $DEST/fraction.svg" >&2
  { echo "fraction_percent,final_val_loss"; cat "$fractions"; } > "$DEST/fraction.csv.tmp" &&
    mv "$DEST/fraction.csv.tmp" "$DEST/fraction.csv"
  echo "wrote $DEST/fraction.csv" >&2
fi

# The table: one row per run that exists, printed and kept as runs.csv.
echo "| run | steps | final val loss | best val loss | mean tokens/s |"
echo "| --- | --- | --- | --- | --- |"
echo "run,finished,steps,final_val_loss,best_val_loss,mean_tokens_per_s" > "$DEST/runs.csv.tmp"
for name in "${runs[@]}"; do
  [[ -f "$RUNS/$name/log.csv" ]] || continue
  label=$name finished=1
  [[ -f "$RUNS/$name/done" ]] || label="$name (unfinished)" finished=0
  row=$(awk -F, 'NR > 1 { step = $1; last = $3; if (best == "" || $3 < best) best = $3; tps += $6; n++ }
    END { printf "%d,%.4f,%.4f,%.0f", step, last, best, tps / n }' "$RUNS/$name/log.csv")
  echo "$name,$finished,$row" >> "$DEST/runs.csv.tmp"
  IFS=, read -r steps final best tps <<< "$row"
  echo "| $label | $steps | $final | $best | $tps |"
done
mv "$DEST/runs.csv.tmp" "$DEST/runs.csv"
echo "wrote $DEST/runs.csv" >&2
