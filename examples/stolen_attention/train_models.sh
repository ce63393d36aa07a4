#!/usr/bin/env bash
# Trains the models of the stolen-attention experiment with examples/char_gpt: character GPTs on
# tiny Shakespeare with d_model = 64 split into 64 / d_h heads, for every head size d_h in DH and
# every score in SCORES (scaled dot product, `dot_*`; negative squared Euclidean, `euclid_*`; the
# same divided by √d_h like the dot product, `euclid_scaled_*`), once per seed in SEEDS. Within a
# seed every model sees the same data in the same order.
#
#   examples/stolen_attention/train_models.sh                    # 54 models, 2 at a time
#   OUT=runs/sa SEEDS=1 DH="4 64" examples/stolen_attention/train_models.sh
#   STEPS=20 SEEDS="1 2" OUT=/tmp/sa ...                          # a quick check of the script
#
# Each model goes to OUT/<score>_dh<d_h>-s<seed>/ with a `done` marker; finished models are
# skipped and an interrupted one resumes from its checkpoint when the script is run again.
# Variables: BIN (char_gpt binary; built with the release preset if missing), OUT
# (runs/stolen_attention), SEEDS ("1 2 3"), DH ("64 32 16 8 4 2"), SCORES ("dot euclid
# euclid_scaled"), STEPS (1500), JOBS (2 runs at a time), THREADS (1 per run).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

BIN=${BIN:-build/release/examples/char_gpt/char_gpt}
OUT=${OUT:-runs/stolen_attention}
SEEDS=${SEEDS:-"1 2 3"}
DH=${DH:-"64 32 16 8 4 2"}
SCORES=${SCORES:-"dot euclid euclid_scaled"}
STEPS=${STEPS:-1500}
JOBS=${JOBS:-2}
THREADS=${THREADS:-1}
WIDTH=64

if [[ ! -x "$BIN" ]]; then
  cmake --preset release >/dev/null
  cmake --build --preset release --target char_gpt
fi

# train <score> <d_h> <seed>
train() {
  local score=$1 dh=$2 seed=$3
  local dir="$OUT/${score}_dh$dh-s$seed" attention
  case $score in
    dot) attention=standard ;;
    euclid) attention=euclidean ;;
    euclid_scaled) attention=euclidean-scaled ;;
  esac
  if [[ -f "$dir/done" ]]; then
    echo "== ${dir##*/}: done already"
    return
  fi
  if [[ -f "$dir/checkpoint.safetensors" ]]; then
    echo "== ${dir##*/}: resuming"
    "$BIN" --resume "$dir/checkpoint.safetensors" --threads "$THREADS" >"$dir.txt" 2>&1
  else
    echo "== ${dir##*/}: --attention $attention --heads $((WIDTH / dh)) --seed $seed"
    "$BIN" --data data/tinyshakespeare.txt --embd $WIDTH --layers 2 --block 128 --batch 16 \
      --steps "$STEPS" --warmup 100 --lr 2e-3 --min-lr 2e-4 --eval-every 250 --eval-batches 32 \
      --sample-tokens 0 --attention $attention --heads $((WIDTH / dh)) --seed "$seed" \
      --threads "$THREADS" --out "$dir" --overwrite >"$dir.txt" 2>&1
  fi
  touch "$dir/done"
}

for score in $SCORES; do
  [[ $score =~ ^(dot|euclid|euclid_scaled)$ ]] ||
    { echo "train_models.sh: unknown score '$score' (dot, euclid, euclid_scaled)" >&2; exit 2; }
done
for dh in $DH; do
  ((dh > 0 && WIDTH % dh == 0)) || { echo "train_models.sh: d_h $dh does not divide $WIDTH" >&2; exit 2; }
done
mkdir -p "$OUT"
source examples/common/jobs.sh
for seed in $SEEDS; do
  for dh in $DH; do
    for score in $SCORES; do job_start train "$score" "$dh" "$seed"; done
  done
done
jobs_wait train_models.sh "see $OUT/*.txt" || exit 1
