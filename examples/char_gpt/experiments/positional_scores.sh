#!/usr/bin/env bash
# The runs behind the "Position scores at the demo budget" section of
# docs/experiments/positional_scores.md: char_gpt at the demo's settings (scripts/demo: 4 layers,
# width 128, context 64, 600 steps) with four attention variants, three seeds each:
#   standard  scaled dot product, learned absolute positions (the demo)
#   rotary    rotary positions (RoPE) in the score, no position embedding
#   alibi     ALiBi distance bias in the score, no position embedding
#   cosine    cosine score with a learned per-head scale, learned absolute positions
# Then summarises them (examples/char_gpt/experiments/summarise_runs.sh): per run and per variant
# (mean and sample standard deviation over the seeds) CSVs and an SVG of the validation curves.
#
#   examples/char_gpt/experiments/positional_scores.sh                  # 12 runs, 2 at a time
#   JOBS=1 THREADS=2 OUT=runs/pos examples/char_gpt/experiments/positional_scores.sh
#   BIN=build/ci/examples/char_gpt/char_gpt examples/char_gpt/experiments/positional_scores.sh
#   STEPS=20 SEEDS="1 2" OUT=/tmp/p DEST=/tmp/d ...    # a quick check of the scripts
#   VARIANTS="rotary t5bias" ...                       # other variants (learned_biases.sh)
#   VARIANTS="standard nopos" DEST=docs/experiments/positional_scores/no_positions ...
#
# Variants whose score carries the positions (rotary, alibi, t5bias, alibi-learned) train
# without a position embedding (--positions none), the others with the learned one; `nopos` is
# the standard attention without any positions (--attention standard --positions none: under the
# causal mask a model can still infer where it is, from how many tokens it sees).
# Each run writes OUT/<variant>-s<seed>/ and a `done` marker; finished runs are skipped and an
# interrupted one resumes from its checkpoint when the script is run again. Results go to DEST
# (default docs/experiments/positional_scores/), replacing the summary files there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."

BIN=${BIN:-build/release/examples/char_gpt/char_gpt}
OUT=${OUT:-runs/positional_scores}
DEST=${DEST:-docs/experiments/positional_scores}
THREADS=${THREADS:-1}
JOBS=${JOBS:-2}
SEEDS=${SEEDS:-"1 2 3"}
STEPS=${STEPS:-600}  # char_gpt's default, the demo's budget
read -r -a VARIANTS <<<"${VARIANTS:-standard rotary alibi cosine}"

if [[ ! -x "$BIN" ]]; then
  cmake --preset release >/dev/null
  cmake --build --preset release --target char_gpt
fi

# run <variant> <seed>: one training run at the demo's settings (char_gpt's defaults).
run() {
  local variant=$1 seed=$2 dir="$OUT/$1-s$2"
  local positions=learned attention=$variant
  case $variant in
    rotary | alibi | t5bias | alibi-learned) positions=none ;;
    nopos) positions=none attention=standard ;;
  esac
  if [[ -f "$dir/done" ]]; then
    echo "== $variant seed $seed: done already ($dir)"
    return
  fi
  if [[ -f "$dir/checkpoint.safetensors" ]]; then
    echo "== $variant seed $seed: resuming"
    "$BIN" --resume "$dir/checkpoint.safetensors" --threads "$THREADS" >"$dir.txt" 2>&1
  else
    echo "== $variant seed $seed: --attention $attention --positions $positions"
    "$BIN" --attention "$attention" --positions "$positions" --seed "$seed" --threads "$THREADS" \
      --steps "$STEPS" --sample-tokens 0 --out "$dir" --overwrite >"$dir.txt" 2>&1
  fi
  touch "$dir/done"
}

mkdir -p "$OUT"
source examples/common/jobs.sh
for seed in $SEEDS; do
  for variant in "${VARIANTS[@]}"; do job_start run "$variant" "$seed"; done
done
jobs_wait positional_scores.sh "see $OUT/*.txt" || exit 1

bash examples/char_gpt/experiments/summarise_runs.sh "$OUT" "$DEST" "${VARIANTS[@]}"
