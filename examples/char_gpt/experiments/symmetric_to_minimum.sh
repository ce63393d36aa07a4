#!/usr/bin/env bash
# Standard against symmetric (tied W_Q = W_K) attention on tiny Shakespeare in the regime of the
# report ("Simplified Attention: Kernels are all you need!"): each model trains until its
# validation loss has passed its minimum, and the two are compared at their minima, over several
# seeds. Section "Trained past the validation minimum" of docs/experiments/symmetric_attention.md.
#
#   examples/char_gpt/experiments/symmetric_to_minimum.sh             # 3 seeds x 2, 2 at a time
#   LAYERS=2 EMBD=96 MAX_STEPS=400 CHUNK=100 PATIENCE=100 SEEDS=1 OUT=/tmp/s DEST=/tmp/d ...
#   examples/char_gpt/experiments/symmetric_to_minimum.sh keep        # OUT's state into KEEP
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
# A study of several hours survives the loss of its machine: `keep` copies into KEEP (default
# studies/<name of OUT>, to be committed) each run's log, its output and, for a run not done, its
# checkpoint (xz-compressed: weights and AdamW's moments, so it resumes where it was kept), with
# the study's settings; a later start restores from KEEP whatever OUT lacks (never replacing a
# file of OUT) and refuses settings other than those the study began with. One start at a time
# per OUT (a lock). A BIN named runs/bin/char_gpt-COMMIT that is missing is built from that commit
# (a git worktree under runs/src-COMMIT), so the study's command works on a new machine.
# Variables: BIN, OUT (runs/symmetric_to_minimum), KEEP, DEST (docs/experiments/symmetric_attention/
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
KEEP=${KEEP:-studies/${OUT##*/}}
VARIANTS=(standard symmetric)
die() { echo "symmetric_to_minimum.sh: $*" >&2; exit 1; }
(($# == 0)) || [[ $* == keep ]] || die "unknown arguments '$*' (none, or keep)"
copy() { cp "$1" "$2.tmp" && mv "$2.tmp" "$2"; }  # an atomic copy
# The settings a study keeps (SEEDS may grow; the runs of a seed do not depend on the others).
settings() {
  printf 'LAYERS=%s HEADS=%s EMBD=%s BLOCK=%s DROPOUT=%s DATA_FRACTION=%s DATA_CHUNKS=%s MAX_STEPS=%s CHUNK=%s PATIENCE=%s THREADS=%s\n' \
    "$LAYERS" "$HEADS" "$EMBD" "$BLOCK" "$DROPOUT" "$DATA_FRACTION" "$DATA_CHUNKS" "$MAX_STEPS" \
    "$CHUNK" "$PATIENCE" "$THREADS"
}

# ---- keep: the study's state into KEEP, for a commit (the runs may go on meanwhile)
if [[ ${1:-} == keep ]]; then
  [[ -f $OUT/settings.txt ]] || die "$OUT holds no study to keep"
  mkdir -p "$KEEP"
  copy "$OUT/settings.txt" "$KEEP/settings.txt"
  [[ -f $OUT/binaries.txt ]] && copy "$OUT/binaries.txt" "$KEEP/binaries.txt"
  for dir in "$OUT"/*-s*/; do
    dir=${dir%/} && name=${dir##*/} && mkdir -p "$KEEP/$name"
    # The checkpoint first, the log after: a log may run ahead of its checkpoint (a resume cuts
    # it back), never behind.
    if [[ -f $dir/done ]]; then
      rm -f "$KEEP/$name/checkpoint.safetensors.xz"
    elif [[ -f $dir/checkpoint.safetensors ]]; then
      xz -6 -T1 -c "$dir/checkpoint.safetensors" >"$KEEP/$name/checkpoint.safetensors.xz.tmp" &&
        mv "$KEEP/$name/checkpoint.safetensors.xz.tmp" "$KEEP/$name/checkpoint.safetensors.xz"
    fi
    [[ -f $dir/log.csv ]] && copy "$dir/log.csv" "$KEEP/$name/log.csv"
    [[ -f $dir.txt ]] && copy "$dir.txt" "$KEEP/$name.txt"
    [[ -f $dir/done ]] && touch "$KEEP/$name/done"
    echo "kept $name at step $(awk -F, 'NR > 1 { s = $1 } END { print s + 0 }' "$dir/log.csv")$([[ -f $dir/done ]] && echo ", done")"
  done
  echo "kept in $KEEP: $(du -sh "$KEEP" | cut -f1)"
  exit 0
fi

mkdir -p "$OUT"
exec 9>>"$OUT/lock"
flock -n 9 || die "$OUT is in use by another symmetric_to_minimum.sh (its lock is $OUT/lock)"

# ---- what a lost machine took: restored from KEEP, never over a file OUT has
if [[ -f $KEEP/settings.txt && ! -f $OUT/settings.txt ]]; then
  copy "$KEEP/settings.txt" "$OUT/settings.txt"
  [[ -f $KEEP/binaries.txt ]] && copy "$KEEP/binaries.txt" "$OUT/binaries.txt"
fi
[[ -f $OUT/settings.txt ]] || settings >"$OUT/settings.txt"
[[ $(<"$OUT/settings.txt") == "$(settings)" ]] ||
  die "$OUT is a study of $(<"$OUT/settings.txt"), not $(settings): give those, or another OUT"
for kept in "$KEEP"/*-s*/; do
  [[ -d $kept ]] || continue
  kept=${kept%/} && dir=$OUT/${kept##*/}
  [[ -e $dir ]] && continue
  mkdir -p "$dir.tmp"
  [[ -f $kept/checkpoint.safetensors.xz ]] &&
    xz -dc "$kept/checkpoint.safetensors.xz" >"$dir.tmp/checkpoint.safetensors"
  cp "$kept/log.csv" "$dir.tmp/log.csv"
  [[ -f $kept/done ]] && touch "$dir.tmp/done"
  [[ -f $kept.txt && ! -e $dir.txt ]] && copy "$kept.txt" "$dir.txt"
  mv "$dir.tmp" "$dir"
  echo "== restored $dir from $kept"
done

if [[ ! -x "$BIN" && ${BIN##*/} =~ ^char_gpt-([0-9a-f]{7,40})$ ]]; then
  # A kept binary a new machine lacks (runs/bin/char_gpt-COMMIT): that commit, built here.
  commit=${BASH_REMATCH[1]} src=runs/src-${BASH_REMATCH[1]}
  [[ -d $src ]] || git worktree add --detach "$src" "$commit" >/dev/null
  (cd "$src" && cmake --preset release >/dev/null && cmake --build --preset release --target char_gpt >/dev/null)
  mkdir -p "$(dirname "$BIN")"
  cp "$src/build/release/examples/char_gpt/char_gpt" "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
elif [[ ! -x "$BIN" ]]; then
  cmake --preset release >/dev/null
  cmake --build --preset release --target char_gpt
fi
# Which binary ran which part of the study: a line per binary (time, path, SHA-256, CPU).
sum=$(sha256sum "$BIN" | cut -d' ' -f1)
if [[ ! -f $OUT/binaries.txt || $(tail -n1 "$OUT/binaries.txt" | cut -d' ' -f3) != "$sum" ]]; then
  cpu=$(awk -F': ' '/^cpu family/ { f = $2 } /^model\t/ { m = $2 } END { printf "family %s model %s", f, m }' /proc/cpuinfo)
  printf '%s %s %s %s\n' "$(date -u +%FT%TZ)" "$BIN" "$sum" "$cpu" >>"$OUT/binaries.txt"
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

source examples/common/jobs.sh
for seed in $SEEDS; do
  for variant in "${VARIANTS[@]}"; do job_start run "$variant" "$seed"; done
done
jobs_wait symmetric_to_minimum.sh "see $OUT/*.txt" || exit 1

TITLE="standard vs symmetric, trained past the validation minimum: mean ± sd over seeds" \
  bash examples/char_gpt/experiments/summarise_runs.sh "$OUT" "$DEST" "${VARIANTS[@]}"
python3 examples/char_gpt/experiments/minima.py "$OUT" "$DEST" --variants "${VARIANTS[@]}" \
  --patience "$PATIENCE"
