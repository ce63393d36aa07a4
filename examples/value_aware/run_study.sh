#!/usr/bin/env bash
# The value-aware study as run for docs/experiments/value_aware.md: trains char_gpt models with
# identical hyper-parameters and the exponential (`standard`), degree-2 polynomial (`poly2`) and
# elu+1 (`linear`) kernels, once per seed, then evaluates each with every approximation
# (`value_aware eval`), once more with only the first layer and only the other layers approximated
# (`--layers`), measures how concentrated its attention weights are (`value_aware weights`), and
# summarises the seeds (examples/value_aware/summarise.py).
#
#   examples/value_aware/run_study.sh                          # 9 models, 2 at a time
#   KERNELS=linformer32 SEEDS=1 examples/value_aware/run_study.sh   # the Linformer of the doc
#   KERNELS=linear-scaled OUT=runs/va_scaled DEST=docs/experiments/value_aware/linear_scaled ...
#   STEPS=20 WINDOWS=4 SEEDS="1 2" OUT=/tmp/va DEST=/tmp/d ...     # a quick check of the script
#   examples/value_aware/run_study.sh keep                     # finished models' results into KEEP
#
# Each model goes to OUT/<kernel>-s<seed>/ with a `done` marker, its evaluations to
# OUT/eval_<kernel>-s<seed>.csv, OUT/layers_<kernel>-s<seed>-L0.csv and -L123.csv, and
# OUT/weights_<kernel>-s<seed>.csv (the last three for the softmax, poly2 and elu+1 kernels, scaled
# or not); finished work is skipped
# and an interrupted training resumes from its checkpoint when the script is run again.
# A study that spans sessions survives the loss of its machine: `keep` copies into KEEP (default
# studies/<name of OUT>, to be committed) every model whose evaluations are all written (its CSVs,
# the logs and its training log.csv, not its checkpoint: the evaluations are what the summary
# reads), with the study's settings; a later start restores from KEEP what OUT lacks (never over a
# file of OUT) and refuses settings other than those the study began with. A model kept before its
# evaluations were done is trained again (minutes). One start at a time per OUT (a lock).
# Variables: OUT (runs/value_aware), KEEP, DEST (docs/experiments/value_aware), SEEDS ("1 2 3"),
# KERNELS ("standard poly2 linear"; also linear-scaled, elu+1 with a learned scale on q and k per
# head), STEPS (2500), WINDOWS (64 evaluation windows: 8192 scored characters), JOBS (2 at a
# time), THREADS (1 per job), BIN_DIR (a folder holding char_gpt/char_gpt and
# value_aware/value_aware; default the release build's, built when missing). Training is
# deterministic for a seed and thread count.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

OUT=${OUT:-runs/value_aware}
DEST=${DEST:-docs/experiments/value_aware}
SEEDS=${SEEDS:-"1 2 3"}
KERNELS=${KERNELS:-"standard poly2 linear"}
STEPS=${STEPS:-2500}
WINDOWS=${WINDOWS:-64}
JOBS=${JOBS:-2}
THREADS=${THREADS:-1}
KEEP=${KEEP:-studies/${OUT##*/}}
bin=${BIN_DIR:-build/release/examples}
die() { echo "run_study.sh: $*" >&2; exit 1; }
(($# == 0)) || [[ $* == keep ]] || die "unknown arguments '$*' (none, or keep)"
copy() { cp "$1" "$2.tmp" && mv "$2.tmp" "$2"; }  # an atomic copy
# What decides a model's numbers besides its kernel and seed (KERNELS and SEEDS may grow).
settings() { printf 'STEPS=%s WINDOWS=%s THREADS=%s\n' "$STEPS" "$WINDOWS" "$THREADS"; }
# outputs <name> <kernel>: the files of OUT that hold a model's evaluations.
outputs() {
  echo "eval_$1.csv"
  [[ $2 =~ ^(standard|poly2|linear|linear-scaled)$ ]] || return 0
  printf '%s\n' "weights_$1.csv" "layers_$1-L0.csv" "layers_$1-L123.csv"
}

# ---- keep: the finished models' results into KEEP, for a commit (the study may go on meanwhile)
if [[ ${1:-} == keep ]]; then
  [[ -f $OUT/settings.txt ]] || die "$OUT holds no study to keep"
  mkdir -p "$KEEP"
  copy "$OUT/settings.txt" "$KEEP/settings.txt"
  for dir in "$OUT"/*-s*/; do
    dir=${dir%/} && name=${dir##*/} && kernel=${name%-s*}
    [[ -f $dir/done ]] || continue
    mapfile -t files < <(outputs "$name" "$kernel")
    ready=1
    for f in "${files[@]}"; do [[ -f $OUT/$f ]] || ready=0; done
    ((ready)) || { echo "not kept: $name (evaluations not finished)"; continue; }
    mkdir -p "$KEEP/$name"
    for f in "${files[@]}"; do copy "$OUT/$f" "$KEEP/$f"; done
    [[ -f $dir/log.csv ]] && copy "$dir/log.csv" "$KEEP/$name/log.csv"
    [[ -f $dir.log ]] && copy "$dir.log" "$KEEP/$name.log"
    touch "$KEEP/$name/done"
    echo "kept $name"
  done
  echo "kept in $KEEP: $(du -sh "$KEEP" | cut -f1)"
  exit 0
fi

mkdir -p "$OUT"
exec 9>>"$OUT/lock"
flock -n 9 || die "$OUT is in use by another run_study.sh (its lock is $OUT/lock)"
# ---- what a lost machine took: restored from KEEP, never over a file OUT has
[[ -f $KEEP/settings.txt && ! -f $OUT/settings.txt ]] && copy "$KEEP/settings.txt" "$OUT/settings.txt"
[[ -f $OUT/settings.txt ]] || settings >"$OUT/settings.txt"
[[ $(<"$OUT/settings.txt") == "$(settings)" ]] ||
  die "$OUT is a study of $(<"$OUT/settings.txt"), not $(settings): give those, or another OUT"
for kept in "$KEEP"/*-s*/; do
  [[ -f $kept/done ]] || continue
  kept=${kept%/} && name=${kept##*/} && dir=$OUT/$name
  [[ -e $dir ]] && continue
  mkdir -p "$dir.tmp"
  [[ -f $kept/log.csv ]] && cp "$kept/log.csv" "$dir.tmp/log.csv"
  touch "$dir.tmp/done"
  mapfile -t files < <(outputs "$name" "${name%-s*}")
  for f in "${files[@]}"; do [[ -e $OUT/$f ]] || copy "$KEEP/$f" "$OUT/$f"; done
  [[ -f $kept.log && ! -e $dir.log ]] && copy "$kept.log" "$dir.log"
  mv "$dir.tmp" "$dir"
  echo "== restored $name from $KEEP"
done

if [[ -z ${BIN_DIR:-} && (! -x $bin/char_gpt/char_gpt || ! -x $bin/value_aware/value_aware) ]]; then
  cmake --preset release >/dev/null
  cmake --build --preset release --target char_gpt value_aware
fi

# study <kernel> <seed>: train (or resume), then evaluate.
study() {
  local kernel=$1 seed=$2 name="$1-s$2"
  local dir="$OUT/$name"
  if [[ ! -f "$dir/done" ]]; then
    if [[ -f "$dir/checkpoint.safetensors" ]]; then
      echo "== $name: resuming"
      "$bin"/char_gpt/char_gpt --resume "$dir/checkpoint.safetensors" --threads "$THREADS" \
        >"$dir.log" 2>&1
    else
      echo "== $name: training"
      "$bin"/char_gpt/char_gpt --attention "$kernel" --layers 4 --heads 4 --embd 128 \
        --block 256 --batch 8 --steps "$STEPS" --warmup 100 --lr 2e-3 --min-lr 2e-4 \
        --eval-every 250 --eval-batches 8 --seed "$seed" --threads "$THREADS" \
        --sample-tokens 300 --out "$dir" --overwrite >"$dir.log" 2>&1
    fi
    touch "$dir/done"
  fi
  if [[ ! -f "$OUT/eval_$name.csv" ]]; then
    echo "== $name: evaluating"
    "$bin"/value_aware/value_aware eval "$dir/checkpoint.safetensors" --label "$name" \
      --windows "$WINDOWS" --threads "$THREADS" --out "$OUT/eval_$name.csv.part" --overwrite \
      >"$OUT/eval_$name.log" 2>&1
    mv "$OUT/eval_$name.csv.part" "$OUT/eval_$name.csv"
  fi
  [[ $kernel =~ ^(standard|poly2|linear|linear-scaled)$ ]] || return 0
  if [[ ! -f "$OUT/weights_$name.csv" ]]; then
    "$bin"/value_aware/value_aware weights "$dir/checkpoint.safetensors" --label "$name" \
      --windows "$WINDOWS" --threads "$THREADS" --out "$OUT/weights_$name.csv.part" --overwrite \
      >"$OUT/weights_$name.log" 2>&1
    mv "$OUT/weights_$name.csv.part" "$OUT/weights_$name.csv"
  fi
  # Where the approximations hurt: the first layer alone, then the other three alone.
  local layers part
  for layers in 0 1,2,3; do
    part="$OUT/layers_$name-L${layers//,/}.csv"
    [[ -f $part ]] && continue
    "$bin"/value_aware/value_aware eval "$dir/checkpoint.safetensors" --label "$name" \
      --layers "$layers" --windows "$WINDOWS" --threads "$THREADS" --out "$part.part" --overwrite \
      >"${part%.csv}.log" 2>&1
    mv "$part.part" "$part"
  done
}

source examples/common/jobs.sh
for seed in $SEEDS; do
  for kernel in $KERNELS; do job_start study "$kernel" "$seed"; done
done
jobs_wait run_study.sh "see $OUT/*.log" || exit 1

python3 examples/value_aware/summarise.py "$OUT" "$DEST"
