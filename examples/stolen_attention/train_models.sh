#!/bin/sh
# Trains the five models of the stolen-attention experiment with examples/char_gpt: the same
# corpus, seed, data order and initial weights, d_model = 64 split into 16, 8, 4 or 1 heads
# (d_h = 4, 8, 16, 64), plus negative squared Euclidean attention at d_h = 4.
# Usage: examples/stolen_attention/train_models.sh [BUILD_DIR] [OUT_DIR] [extra char_gpt options]
# (CHAR_GPT=path overrides the char_gpt binary; models that finished are not trained again)
set -eu
build=${1:-build/release}
out=${2:-runs/stolen_attention}
[ $# -ge 2 ] && shift 2 || shift $#
extra="$*"
common="--data data/tinyshakespeare.txt --embd 64 --layers 2 --block 128 --batch 16 --steps 1500
        --warmup 100 --lr 2e-3 --min-lr 2e-4 --seed 1 --eval-every 250 --eval-batches 8
        --threads 1 --sample-tokens 0"
train() {  # name attention heads; a model whose log says it finished is kept
  if grep -q '^training:' "$out/$1/train.log" 2>/dev/null; then echo "== $1: done"; return; fi
  mkdir -p "$out/$1"
  echo "== $1: --attention $2 --heads $3"
  /usr/bin/time -f "$1: %e s wall, %U s user" \
    "${CHAR_GPT:-$build/examples/char_gpt/char_gpt}" $common --attention "$2" --heads "$3" --out "$out/$1" --overwrite $extra \
    > "$out/$1/train.log" 2>&1
  tail -n 4 "$out/$1/train.log"
}
train dot_dh4 standard 16
train dot_dh8 standard 8
train dot_dh16 standard 4
train dot_dh64 standard 1
train euclid_dh4 euclidean 16
