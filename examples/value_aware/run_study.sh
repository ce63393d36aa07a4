#!/usr/bin/env bash
# The value-aware study as run for docs/experiments/value_aware.md: trains three char_gpt models
# with identical hyper-parameters and the exponential, degree-2 polynomial and elu+1 kernels (and
# a Linformer with 32 projected rows), then evaluates each with every approximation.
# Usage (from the repository root, after `cmake --preset release` and building char_gpt and
# value_aware): examples/value_aware/run_study.sh [out_dir]   (default runs/value_aware)
# Each training run takes about an hour on one busy core; evaluation about as long per model.
set -euo pipefail
out=${1:-runs/value_aware}
bin=build/release/examples
mkdir -p "$out"
for a in standard poly2 linear linformer32; do
  [ -f "$out/$a/checkpoint.safetensors" ] && continue
  nice -n 10 $bin/char_gpt/char_gpt --attention $a --layers 4 --heads 4 --embd 128 \
    --block 256 --batch 8 --steps 2500 --warmup 100 --lr 2e-3 --min-lr 2e-4 \
    --eval-every 250 --eval-batches 8 --seed 1 --threads 1 --sample-tokens 300 \
    --out "$out/$a" > "$out/$a.log" 2>&1
done
for a in standard poly2 linear linformer32; do
  nice -n 10 $bin/value_aware/value_aware eval "$out/$a/checkpoint.safetensors" \
    --windows 64 --threads 1 --out "$out/eval_$a.csv" | tee "$out/eval_$a.log"
done
$bin/value_aware/value_aware plot "$out/eval_standard.csv" "$out/eval_poly2.csv" \
  "$out/eval_linear.csv" --out "$out/ovo_curve.svg"
