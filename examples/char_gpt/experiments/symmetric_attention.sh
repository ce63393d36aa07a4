#!/usr/bin/env bash
# The runs behind docs/experiments/symmetric_attention.md: standard vs symmetric (tied W_Q = W_K)
# attention on tiny Shakespeare; transfer of the Shakespeare model to data/wiki.txt against
# training from scratch; and validation loss against the fraction of wiki training data used.
# Does not plot: examples/char_gpt/experiments/plot_symmetric_attention.sh reads the logs.
#
#   examples/char_gpt/experiments/symmetric_attention.sh            # all runs, 2 threads
#   THREADS=1 OUT=runs/sym examples/char_gpt/experiments/symmetric_attention.sh
#
# Each run writes OUT/<name>/ (log.csv, loss.svg, checkpoint.safetensors, sample.txt) and a
# `done` marker; an interrupted run is resumed from its checkpoint when the script is run again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."

BIN=${BIN:-build/release/examples/char_gpt/char_gpt}
OUT=${OUT:-runs/symmetric_attention}
THREADS=${THREADS:-2}
SHAKESPEARE_STEPS=${SHAKESPEARE_STEPS:-2000}
WIKI_STEPS=${WIKI_STEPS:-1000}

if [[ ! -x "$BIN" ]]; then
  cmake --preset release >/dev/null
  cmake --build --preset release --target char_gpt
fi

# One model shape for every run: 4 layers, 6 heads of width 32, context 128. The vocabulary is
# the union of both corpora's characters in every run, so the Shakespeare model can continue on
# wiki.txt and the wiki runs from scratch have the same shape as the transferred one.
model=(--layers 4 --heads 6 --embd 192 --block 128
       --vocab-from data/tinyshakespeare.txt --vocab-from data/wiki.txt)
train=(--batch 32 --lr 1e-3 --min-lr 1e-4 --warmup 100 --dropout 0.1 --eval-every 50
       --eval-batches 16 --seed 1 --threads "$THREADS")

# run <name> <corpus> <attention> <more char_gpt options...>
run() {
  local name=$1 data=$2 attention=$3
  shift 3
  local dir="$OUT/$name"
  if [[ -f "$dir/done" ]]; then
    echo "== $name: done already ($dir)"
    return
  fi
  if [[ -f "$dir/checkpoint.safetensors" ]]; then
    echo "== $name: resuming from $dir/checkpoint.safetensors"
    "$BIN" --resume "$dir/checkpoint.safetensors" --data "$data" --attention "$attention" \
      --threads "$THREADS" --out "$dir"
  else
    echo "== $name: --data $data --attention $attention $*"
    "$BIN" --data "$data" --attention "$attention" "$@" --out "$dir"
  fi
  touch "$dir/done"
}

run shakespeare_standard data/tinyshakespeare.txt standard --steps "$SHAKESPEARE_STEPS" \
  "${model[@]}" "${train[@]}"
run shakespeare_symmetric data/tinyshakespeare.txt symmetric --steps "$SHAKESPEARE_STEPS" \
  "${model[@]}" "${train[@]}"

# Transfer: the same wiki run from random weights and from the Shakespeare model's weights
# (fresh optimizer and schedule in both).
run wiki_scratch data/wiki.txt standard --steps "$WIKI_STEPS" "${model[@]}" "${train[@]}"
run wiki_transfer data/wiki.txt standard --steps "$WIKI_STEPS" \
  --init-from "$OUT/shakespeare_standard/checkpoint.safetensors" "${train[@]}"

# Data size: the first 25/50/75 % of wiki's training split (validation unchanged); 100 % is
# wiki_scratch.
for f in 25 50 75; do
  run "wiki_fraction_$f" data/wiki.txt standard --steps "$WIKI_STEPS" --data-fraction "0.$f" \
    "${model[@]}" "${train[@]}"
done
