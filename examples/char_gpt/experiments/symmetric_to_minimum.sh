#!/usr/bin/env bash
# Standard against symmetric (tied W_Q = W_K) attention on tiny Shakespeare in the regime of the
# report ("Simplified Attention: Kernels are all you need!"): each model trains until its
# validation loss has passed its minimum, and the two are compared at their minima, over several
# seeds. Section "Trained past the validation minimum" of docs/experiments/symmetric_attention.md.
#
#   examples/char_gpt/experiments/symmetric_to_minimum.sh             # 3 seeds x 2, 2 at a time
#   LAYERS=2 EMBD=96 MAX_STEPS=400 CHUNK=100 PATIENCE=100 SEEDS=1 OUT=/tmp/s DEST=/tmp/d ...
#
# A run trains in chunks of CHUNK steps (--stop-at, then --resume) of one schedule of MAX_STEPS
# steps (warmup, cosine to a tenth); after each chunk it stops once its lowest validation loss
# (evaluated every 50 steps) lies PATIENCE steps or more in the past, or at MAX_STEPS (then the
# minimum may not have been passed: the summary says so). Runs are resumable and skipped when
# done. Then examples/char_gpt/experiments/summarise_runs.sh writes runs.csv, summary.csv,
# curves.csv and validation.svg to DEST, and minima.py adds minima.csv (per run: the lowest
# validation loss and the lowest mean of five evaluations, their steps, the steps trained,
# whether the minimum was passed) and prints the paired differences (symmetric minus standard,
# same seed and data order).
# Variables: BIN, OUT (runs/symmetric_to_minimum), DEST (docs/experiments/symmetric_attention/
# to_minimum), SEEDS ("1 2 3"), LAYERS (4), HEADS (6), EMBD (192), BLOCK (128), DROPOUT (0),
# DATA_FRACTION (0.2: the first fifth of the training split; the validation split is whole),
# DATA_CHUNKS (1: that fraction from the start of the split; N: from the start of each of N equal
# pieces of it, char_gpt --data-chunks, so that it spans all the plays),
# MAX_STEPS (20000), CHUNK (250), PATIENCE (500), JOBS (2), THREADS (1).
# The defaults put the report's ratio of parameters to training characters (about 10: 10.7 M
# parameters, 1 M characters) on the 1.8 M-parameter model of this page, so that it passes its
# minimum within the budget; on the whole split it had not passed it after 2 750 steps.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."

BIN=${BIN:-build/release/examples/char_gpt/char_gpt}
OUT=${OUT:-runs/symmetric_to_minimum}
DEST=${DEST:-docs/experiments/symmetric_attention/to_minimum}
SEEDS=${SEEDS:-"1 2 3"}
LAYERS=${LAYERS:-4} HEADS=${HEADS:-6} EMBD=${EMBD:-192} BLOCK=${BLOCK:-128} DROPOUT=${DROPOUT:-0}
DATA_FRACTION=${DATA_FRACTION:-0.2}
DATA_CHUNKS=${DATA_CHUNKS:-1}
MAX_STEPS=${MAX_STEPS:-20000}
CHUNK=${CHUNK:-250}
PATIENCE=${PATIENCE:-500}
THREADS=${THREADS:-1}
VARIANTS=(standard symmetric)
if [[ ! -x "$BIN" ]]; then
  cmake --preset release >/dev/null
  cmake --build --preset release --target char_gpt
fi

# minimum LOG: "lowest_val step_of_lowest last_step" of a char_gpt log.csv.
minimum() {
  awk -F, 'NR > 1 { if (best == "" || $3 < best) { best = $3; at = $1 } last = $1 }
    END { print best, at, last }' "$1"
}

# run <variant> <seed>
run() {
  local variant=$1 seed=$2 dir="$OUT/$1-s$2"
  [[ -f "$dir/done" ]] && { echo "== ${dir##*/}: done already"; return; }
  local stop=$CHUNK best at last
  if [[ -f "$dir/checkpoint.safetensors" ]]; then
    read -r best at last < <(minimum "$dir/log.csv")
    stop=$((last + CHUNK))
  else
    echo "== ${dir##*/}: --attention $variant --seed $seed"
    "$BIN" --data data/tinyshakespeare.txt --attention "$variant" --layers "$LAYERS" \
      --heads "$HEADS" --embd "$EMBD" --block "$BLOCK" --dropout "$DROPOUT" \
      --data-fraction "$DATA_FRACTION" --data-chunks "$DATA_CHUNKS" --batch 32 \
      --steps "$MAX_STEPS" --lr 1e-3 --min-lr 1e-4 --warmup 100 --eval-every 50 \
      --eval-batches 16 --seed "$seed" --threads "$THREADS" --sample-tokens 0 \
      --stop-at "$stop" --out "$dir" --overwrite >"$dir.txt" 2>&1
    stop=$((stop + CHUNK))
  fi
  while :; do
    read -r best at last < <(minimum "$dir/log.csv")
    if ((last - at >= PATIENCE || last >= MAX_STEPS)); then break; fi
    "$BIN" --resume "$dir/checkpoint.safetensors" --threads "$THREADS" \
      --stop-at "$((stop < MAX_STEPS ? stop : MAX_STEPS))" >>"$dir.txt" 2>&1
    stop=$((stop + CHUNK))
  done
  echo "== ${dir##*/}: lowest validation loss $best at step $at of $last"
  touch "$dir/done"
}

mkdir -p "$OUT"
source examples/common/jobs.sh
for seed in $SEEDS; do
  for variant in "${VARIANTS[@]}"; do job_start run "$variant" "$seed"; done
done
jobs_wait symmetric_to_minimum.sh "see $OUT/*.txt" || exit 1

TITLE="standard vs symmetric, trained past the validation minimum: mean ± sd over seeds" \
  bash examples/char_gpt/experiments/summarise_runs.sh "$OUT" "$DEST" "${VARIANTS[@]}"
python3 examples/char_gpt/experiments/minima.py "$OUT" "$DEST" --variants "${VARIANTS[@]}" \
  --patience "$PATIENCE"
