#!/usr/bin/env bash
# The birth-place problem set's full recipe on seeded subsets of its people
# (docs/experiments/birthplace.md, "The full schedule on a subset of the people"): for every
# fraction in FRACTIONS and seed in SEEDS, draw the subset (make_subset.py; the seed draws the
# people and initialises the models), then per variant in VARIANTS pretrain with span corruption
# for the problem set's 650 epochs (its schedule, model and optimizer), finetune, and evaluate on
# the subset's held-out dev people; also finetune without pretraining, and the London baseline.
#
#   examples/birthplace/subset_study.sh                       # FRACTIONS=0.1 SEEDS="1 2 3"
#   FRACTIONS="0.05 0.1 0.2" SEEDS=1 VARIANTS=vanilla examples/birthplace/subset_study.sh
#   EPOCHS=2 FINETUNE=1 FINETUNE_SCRATCH=1 FRACTIONS=0.05 SEEDS=1 OUT=/tmp/b ...   # a quick check
#
# Finetuning keeps the problem set's number of steps, not its epochs: 10 epochs of the full set's
# 2000 pairs at batch 256 are 80 steps (75 epochs without pretraining: 600 steps), and a subset
# of 200 pairs (one step per epoch) is finetuned for 80 (600) epochs. Runs are resumable: a
# finished stage is skipped, an interrupted pretraining resumes from its checkpoint. Results are
# appended to OUT/results.tsv (one line per evaluated model). Variables: BIN, OUT
# (runs/birthplace_subsets), FRACTIONS, SEEDS, VARIANTS ("vanilla"; also synthesizer, euclidean),
# NOPRETRAIN (1: also finetune without pretraining), EPOCHS (650), FINETUNE and FINETUNE_SCRATCH
# (10 and 75: finetuning in epochs of the full set), JOBS (2), THREADS (1), MICRO (--micro-batch,
# 32).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

BIN=${BIN:-build/release/examples/birthplace/birthplace}
OUT=${OUT:-runs/birthplace_subsets}
FRACTIONS=${FRACTIONS:-0.1}
SEEDS=${SEEDS:-"1 2 3"}
VARIANTS=${VARIANTS-vanilla}  # VARIANTS="" NOPRETRAIN=1: only the runs without pretraining
NOPRETRAIN=${NOPRETRAIN:-1}
EPOCHS=${EPOCHS:-650}
FINETUNE=${FINETUNE:-10}
FINETUNE_SCRATCH=${FINETUNE_SCRATCH:-75}
JOBS=${JOBS:-2}
THREADS=${THREADS:-1}
MICRO=${MICRO:-32}
if [[ ! -x $BIN ]]; then
  cmake --preset release >/dev/null
  cmake --build --preset release --target birthplace
fi

meta() {  # meta FILE KEY: one metadata value of a checkpoint (from the safetensors JSON header)
  python3 -c 'import json,struct,sys
f=open(sys.argv[1],"rb"); n=struct.unpack("<Q",f.read(8))[0]
print(json.loads(f.read(n))["__metadata__"][sys.argv[2]])' "$1" "$2"
}
lines() { grep -c . "$1"; }
# ft_epochs PAIRS FULL_EPOCHS: epochs over PAIRS pairs with as many steps as FULL_EPOCHS of 2000.
ft_epochs() { echo $(($2 * 8 / (($1 + 255) / 256))); }

# evaluate NAME DIR CHECKPOINT PRETRAIN_EPOCHS: append a line to results.tsv.
evaluate() {
  local name=$1 dir=$2 ft=$3 pe=$4 log
  log=$("$BIN" evaluate --reading-params "$ft" --eval-corpus "$dir/dev.tsv" \
    --outputs-path "$OUT/$name.dev.predictions" --threads "$THREADS")
  echo "$log" >"$OUT/$name.evaluate.txt"
  local correct total chance p
  read -r correct total < <(echo "$log" | awk '/^Correct:/ { print $2, $5 }' | tr -d :)
  read -r chance p < <(echo "$log" | awk '/^By chance/ { for (i = 1; i <= NF; i++) {
      if ($i == "right") c = $(i - 1); if ($i == "p") p = $(i + 2) } print c, p }' | tr -d ';')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%.0f\n' "$name" "${name%%-*}" "$pe" \
    "$(meta "$ft" train.step)" "$correct" "$total" "$chance" "$p" "$(lines "$dir/train.tsv")" \
    "$(meta "$ft" train.cpu_s)" "$( [[ $pe == 0 ]] && echo 0 || meta "$OUT/${name%.*}.pretrain.params" train.cpu_s)" \
    >>"$OUT/results.tsv"
}

# one FRACTION SEED VARIANT: pretrain, finetune, evaluate ("nopretrain": finetune from scratch).
one() {
  local fraction=$1 seed=$2 variant=$3 dir="$OUT/data/f$1-s$2"
  local name="$variant-f$fraction-s$seed"
  grep -q "^$name.ft	" "$OUT/results.tsv" 2>/dev/null && { echo "== $name: done"; return; }
  local pairs common
  pairs=$(lines "$dir/train.tsv")
  common=(--pretrain-corpus "$dir/wiki.txt" --seed "$seed" --threads "$THREADS" --micro-batch "$MICRO")
  if [[ $variant == nopretrain ]]; then
    if [[ ! -f $OUT/$name.ft.done ]]; then
      echo "== $name: finetuning from scratch"
      "$BIN" finetune "${common[@]}" --vocabulary-corpus data/wiki.txt --finetune-corpus "$dir/train.tsv" \
        --epochs "$(ft_epochs "$pairs" "$FINETUNE_SCRATCH")" --writing-params "$OUT/$name.ft.params" --overwrite \
        >"$OUT/$name.ft.txt" 2>&1
      touch "$OUT/$name.ft.done"
    fi
    evaluate "$name.ft" "$dir" "$OUT/$name.ft.params" 0
    return
  fi
  local pre="$OUT/$name.pretrain.params"
  if [[ ! -f $OUT/$name.pretrain.done ]]; then
    if [[ -f $pre ]]; then
      echo "== $name: resuming pretraining"
      "$BIN" pretrain --resume "$pre" --pretrain-corpus "$dir/wiki.txt" --threads "$THREADS" \
        >>"$OUT/$name.pretrain.txt" 2>&1
    else
      echo "== $name: pretraining, $EPOCHS epochs"
      "$BIN" pretrain "${common[@]}" --vocabulary-corpus data/wiki.txt --variant "$variant" \
        --epochs "$EPOCHS" --writing-params "$pre" --overwrite >"$OUT/$name.pretrain.txt" 2>&1
    fi
    touch "$OUT/$name.pretrain.done"
  fi
  if [[ ! -f $OUT/$name.ft.done ]]; then
    echo "== $name: finetuning"
    "$BIN" finetune "${common[@]}" --reading-params "$pre" --finetune-corpus "$dir/train.tsv" \
      --epochs "$(ft_epochs "$pairs" "$FINETUNE")" --writing-params "$OUT/$name.ft.params" --overwrite \
      >"$OUT/$name.ft.txt" 2>&1
    touch "$OUT/$name.ft.done"
  fi
  evaluate "$name.ft" "$dir" "$OUT/$name.ft.params" "$EPOCHS"
}

mkdir -p "$OUT/data"
[[ -f $OUT/results.tsv ]] || printf 'name\tvariant\tpretrain_epochs\tfinetune_steps\tcorrect\ttotal\tchance_mean\tp\ttrain_pairs\tfinetune_cpu_s\tpretrain_cpu_s\n' >"$OUT/results.tsv"
for fraction in $FRACTIONS; do
  for seed in $SEEDS; do
    dir="$OUT/data/f$fraction-s$seed"
    [[ -f $dir/SUBSET.md ]] ||
      python3 examples/birthplace/make_subset.py --fraction "$fraction" --seed "$seed" --out "$dir" >/dev/null
    if ! grep -q "^london-f$fraction-s$seed	" "$OUT/london.tsv" 2>/dev/null; then
      correct=$("$BIN" london --pretrain-corpus "$dir/wiki.txt" --vocabulary-corpus data/wiki.txt \
        --eval-corpus "$dir/dev.tsv" | awk '/^Correct:/ { print $2 }')
      printf 'london-f%s-s%s\t%s\t%s\n' "$fraction" "$seed" "$correct" "$(lines "$dir/dev.tsv")" >>"$OUT/london.tsv"
    fi
  done
done
source examples/common/jobs.sh
for fraction in $FRACTIONS; do
  for seed in $SEEDS; do
    runs=($VARIANTS)
    [[ $NOPRETRAIN == 1 ]] && runs+=(nopretrain)
    for variant in "${runs[@]}"; do job_start one "$fraction" "$seed" "$variant"; done
  done
done
jobs_wait subset_study.sh "see $OUT/*.txt" || exit 1
column -t -s $'\t' "$OUT/results.tsv"
