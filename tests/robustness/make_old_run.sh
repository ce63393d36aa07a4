#!/usr/bin/env bash
# tests/robustness/make_old_run.sh: writes tests/robustness/old_run/, a char_gpt run made by a
# char_gpt from before its settings table (commit 248159d), which robustness.sh resumes with
# today's char_gpt to hold it to its word that such runs continue: checkpoint.safetensors and
# log.csv of a run stopped at step 4 of 8 (--stop-at 4).
# usage: make_old_run.sh OLD_CHAR_GPT DATA_DIR
#   (OLD_CHAR_GPT: git worktree add /tmp/old 248159d, then build its char_gpt target)
set -euo pipefail
old=$(realpath "$1")
data=$(realpath "$2")
dest=$(realpath "$(dirname "${BASH_SOURCE[0]}")")/old_run
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
head -c 20000 "$data/tinyshakespeare.txt" > small.txt
"$old" --data small.txt --layers 1 --heads 1 --embd 8 --block 8 --batch 2 --eval-batches 1 \
  --sample-tokens 0 --threads 1 --steps 8 --eval-every 2 --stop-at 4 --out stopped > /dev/null
mkdir -p "$dest"
cp stopped/checkpoint.safetensors stopped/log.csv "$dest/"
