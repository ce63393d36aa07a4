#!/usr/bin/env bash
# The runs behind docs/experiments/precision.md: char_gpt at the demo's settings (scripts/demo:
# 4 layers, width 128, context 64, 600 steps), three seeds each of
#   float32   every matrix product in float (the default)
#   bf16      --precision bf16: the products from bf16-rounded operands with float sums
#             (MatmulPrecision::bf16, attn/core/gemm.hpp)
# then summarised by examples/char_gpt/experiments/summarise_runs.sh (per run and per variant
# CSVs, mean and sample standard deviation over the seeds, and an SVG of the validation curves).
# Needs a CPU with AVX512_BF16 (elsewhere bf16 falls back to float32 and the comparison would be
# empty: refused).
#
#   examples/char_gpt/experiments/precision.sh                   # 6 runs, 2 at a time
#   STEPS=20 SEEDS="1 2" OUT=/tmp/p DEST=/tmp/d examples/char_gpt/experiments/precision.sh
#
# Each run writes OUT/<variant>-s<seed>/ and a `done` marker; finished runs are skipped and an
# interrupted one resumes from its checkpoint when the script is run again. Results go to DEST
# (default docs/experiments/precision/), replacing the summary files there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."

BIN=${BIN:-build/release/examples/char_gpt/char_gpt}
OUT=${OUT:-runs/precision}
DEST=${DEST:-docs/experiments/precision}
THREADS=${THREADS:-1}
JOBS=${JOBS:-2}
SEEDS=${SEEDS:-"1 2 3"}
STEPS=${STEPS:-600}  # char_gpt's default, the demo's budget
VARIANTS=(float32 bf16)

grep -qw avx512_bf16 /proc/cpuinfo || {
  echo "precision.sh: this CPU has no AVX512_BF16, so --precision bf16 would run float32" >&2
  exit 1
}
if [[ ! -x "$BIN" ]]; then
  cmake --preset release >/dev/null
  cmake --build --preset release --target char_gpt
fi

# run <variant> <seed>: one training run at the demo's settings with --precision <variant>.
run() {
  local variant=$1 seed=$2 dir="$OUT/$1-s$2"
  if [[ -f "$dir/done" ]]; then
    echo "== $variant seed $seed: done already ($dir)"
    return
  fi
  if [[ -f "$dir/checkpoint.safetensors" ]]; then
    echo "== $variant seed $seed: resuming"
    "$BIN" --resume "$dir/checkpoint.safetensors" --threads "$THREADS" >"$dir.txt" 2>&1
  else
    echo "== $variant seed $seed"
    "$BIN" --precision "$variant" --seed "$seed" --threads "$THREADS" --steps "$STEPS" \
      --sample-tokens 0 --out "$dir" --overwrite >"$dir.txt" 2>&1
  fi
  touch "$dir/done"
}

mkdir -p "$OUT"
source examples/common/jobs.sh
for seed in $SEEDS; do
  for variant in "${VARIANTS[@]}"; do job_start run "$variant" "$seed"; done
done
jobs_wait precision.sh "see $OUT/*.txt" || exit 1

TITLE=${TITLE:-"char_gpt at the demo budget: float32 and bf16 products"} \
  bash examples/char_gpt/experiments/summarise_runs.sh "$OUT" "$DEST" "${VARIANTS[@]}"
