#!/usr/bin/env bash
# The birth-place problem set's full recipe at its full scale (docs/experiments/birthplace.md):
# per variant, pretrain 650 epochs on all of data/wiki.txt; at each readout epoch keep a copy of the
# pretraining checkpoint, finetune the copy 10 epochs on all 2000 pairs and evaluate it on all 500
# dev people; and first the control: finetune 75 epochs without pretraining (vanilla). Starts
# or resumes whatever is unfinished: run it again after an interruption (a lost session, kill,
# reboot) and it continues from the last checkpoint, which the trainer writes atomically after
# every epoch (about a minute on two threads).
#
#   examples/birthplace/full_recipe.sh                 # both variants, seed 1, in the background:
#   (setsid nice -n 19 examples/birthplace/full_recipe.sh >> runs/birthplace_full/log.txt 2>&1 &)
#   kill -STOP -- -PGID / kill -CONT -- -PGID          # pause / continue it (benchmarks)
#
# Where the kernel groups processes by session (sched_autogroup_enabled = 1, the default of many
# distributions), setsid starts a new group that gets as much CPU as all the others together, nice
# or not: the study then halves the speed of everything else. So the script lowers its own group's
# priority (/proc/self/autogroup) to nice 19: it takes only what the other programs leave.
#
# Variables: OUT (runs/birthplace_full), VARIANTS ("vanilla synthesizer"), SEED (1), THREADS (2),
# MICRO (--micro-batch, 32), READOUTS (pretraining epochs to finetune and evaluate, "100 200 400
# 650"; the last must be EPOCHS), EPOCHS (650), FINETUNE and FINETUNE_SCRATCH (finetuning epochs
# after and without pretraining, 10 and 75), BIN (the program to use for a new study). A quick
# check of the script itself: OUT=/tmp/q EPOCHS=1 READOUTS=1 FINETUNE=0.125 FINETUNE_SCRATCH=0.125.
#
# Every part of a study runs one binary: the first start copies BIN (built from the checked-out
# tree with `cmake --build --preset release --target birthplace` when BIN is not given) to
# runs/bin/birthplace-<commit> and records its path and SHA-256 in OUT/binary.txt; later starts use
# that file and refuse to go on if it has changed. Results go to OUT/results.csv, one row per
# evaluated model: variant,pretrain_epochs,seed,correct,total,london,chance,p (pretrain_epochs 0
# for the control). Summarise with examples/birthplace/full_summary.py OUT DEST.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

OUT=${OUT:-runs/birthplace_full}
VARIANTS=${VARIANTS:-"vanilla synthesizer"}
SEED=${SEED:-1}
THREADS=${THREADS:-2}
MICRO=${MICRO:-32}
EPOCHS=${EPOCHS:-650}
READOUTS=${READOUTS:-"100 200 400 650"}
FINETUNE=${FINETUNE:-10}
FINETUNE_SCRATCH=${FINETUNE_SCRATCH:-75}
die() { echo "full_recipe.sh: $*" >&2; exit 1; }

for e in $READOUTS; do
  [[ $e =~ ^[1-9][0-9]*$ && $e -le $EPOCHS ]] || die "READOUTS: '$e' is not an epoch in 1..$EPOCHS"
done
[[ ${READOUTS##* } == "$EPOCHS" ]] || die "READOUTS must end at EPOCHS ($EPOCHS), not ${READOUTS##* }"
for v in $VARIANTS; do
  [[ $v =~ ^(vanilla|synthesizer|euclidean)$ ]] || die "VARIANTS: unknown variant '$v'"
done
mkdir -p "$OUT" runs/bin
if [[ -w /proc/self/autogroup ]]; then echo 19 > /proc/self/autogroup || true; fi

# One study at a time: a second start waits for nothing and says so.
exec 9>>"$OUT/lock"
flock -n 9 || die "$OUT is in use by another full_recipe.sh (its lock is $OUT/lock)"

# ---- the binary of the study
if [[ ! -f $OUT/binary.txt ]]; then
  if [[ -z ${BIN:-} ]]; then
    [[ -z $(git status --porcelain -- include examples src CMakeLists.txt cmake) ]] ||
      die "the tree has uncommitted changes: commit them, or give BIN"
    cmake --preset release >/dev/null
    cmake --build --preset release --target birthplace >/dev/null
    BIN=build/release/examples/birthplace/birthplace
  fi
  [[ -x $BIN ]] || die "BIN=$BIN is not an executable"
  kept=runs/bin/birthplace-$(git rev-parse --short=7 HEAD)
  [[ -e $kept ]] && ! cmp -s "$BIN" "$kept" && kept=$kept-$(sha256sum "$BIN" | cut -c1-8)
  [[ -e $kept ]] || { cp "$BIN" "$kept.tmp" && mv "$kept.tmp" "$kept"; }
  printf '%s %s\n' "$kept" "$(sha256sum "$kept" | cut -d' ' -f1)" >"$OUT/binary.txt.tmp"
  mv "$OUT/binary.txt.tmp" "$OUT/binary.txt"
fi
read -r BIN sum <"$OUT/binary.txt"
[[ $(sha256sum "$BIN" | cut -d' ' -f1) == "$sum" ]] || die "$BIN differs from the one recorded in $OUT/binary.txt"
echo "== $(date -u +%FT%TZ) full_recipe.sh: $BIN, variants $VARIANTS, seed $SEED, $THREADS threads"

meta() {  # meta FILE KEY: one metadata value of a checkpoint (from the safetensors JSON header)
  python3 -c 'import json,struct,sys
f=open(sys.argv[1],"rb"); n=struct.unpack("<Q",f.read(8))[0]
print(json.loads(f.read(n))["__metadata__"][sys.argv[2]])' "$1" "$2"
}
copy() { cp "$1" "$2.tmp" && mv "$2.tmp" "$2"; }  # an atomic copy

# ---- the London baseline (once)
if [[ ! -f $OUT/london.txt ]]; then
  "$BIN" london --eval-corpus data/birth_dev.tsv --outputs-path "$OUT/london.dev.predictions" \
    >"$OUT/london.txt.tmp"
  mv "$OUT/london.txt.tmp" "$OUT/london.txt"
fi
LONDON=$(awk '/^Correct:/ { print $2 }' "$OUT/london.txt")

[[ -f $OUT/results.csv ]] || echo "variant,pretrain_epochs,seed,correct,total,london,chance,p" >"$OUT/results.csv"

# evaluate VARIANT PRETRAIN_EPOCHS CHECKPOINT: one row of results.csv (once per model).
evaluate() {
  local variant=$1 pe=$2 ckpt=$3 name="$1-s$SEED-ep$2"
  grep -q "^$variant,$pe,$SEED," "$OUT/results.csv" && return
  echo "== $(date -u +%FT%TZ) evaluating $name"
  "$BIN" evaluate --reading-params "$ckpt" --eval-corpus data/birth_dev.tsv --threads "$THREADS" \
    --outputs-path "$OUT/$name.dev.predictions" >"$OUT/$name.evaluate.txt"
  local correct total chance p
  read -r correct total < <(awk '/^Correct:/ { sub(":", "", $5); print $2, $5 }' "$OUT/$name.evaluate.txt")
  read -r chance p < <(awk '/^By chance/ { for (i = 1; i <= NF; i++) {
      if ($i == "right") c = $(i - 1); if ($i == "p") p = $(i + 2) } print c, p }' \
      "$OUT/$name.evaluate.txt" | tr -d ';')
  echo "$variant,$pe,$SEED,$correct,$total,$LONDON,$chance,$p" >>"$OUT/results.csv"
  echo "== $name: $correct/$total right (London $LONDON; chance $chance, p = $p)"
}

# finetune CHECKPOINT_OUT EPOCHS [--reading-params PRE]: a finetuning run, resumed if cut short.
finetune() {
  local ft=$1 epochs=$2
  shift 2
  [[ -f $ft.done ]] && return
  if [[ -f $ft ]]; then
    "$BIN" finetune --resume "$ft" --threads "$THREADS" >>"$ft.txt" 2>&1
  else
    "$BIN" finetune "$@" --seed "$SEED" --epochs "$epochs" --micro-batch "$MICRO" \
      --threads "$THREADS" --writing-params "$ft" --overwrite >"$ft.txt" 2>&1
  fi
  touch "$ft.done"
}

# The control first (no pretraining, the problem set's 75 finetuning epochs): an hour, and the
# row every pretrained model is compared with.
ft=$OUT/nopretrain-s$SEED.finetune.params
finetune "$ft" "$FINETUNE_SCRATCH"
evaluate vanilla 0 "$ft"

steps_per_epoch=$(( ($(grep -c '' data/wiki.txt) + 127) / 128 ))
for variant in $VARIANTS; do
  pre=$OUT/$variant-s$SEED.pretrain.params
  for e in $READOUTS; do
    snap=$OUT/$variant-s$SEED.pretrain.ep$e.params
    if [[ ! -f $snap ]]; then
      stop=$((steps_per_epoch * e))
      echo "== $(date -u +%FT%TZ) $variant: pretraining to epoch $e (step $stop)"
      if [[ ! -f $pre ]]; then  # --overwrite: at most the log of a run cut short before its first save
        "$BIN" pretrain --variant "$variant" --seed "$SEED" --epochs "$EPOCHS" --micro-batch "$MICRO" \
          --threads "$THREADS" --stop-at "$stop" --writing-params "$pre" --overwrite >"$pre.txt" 2>&1
      elif [[ $(meta "$pre" train.step) != "$stop" ]]; then
        "$BIN" pretrain --resume "$pre" --stop-at "$stop" --threads "$THREADS" >>"$pre.txt" 2>&1
      fi
      [[ $(meta "$pre" train.step) == "$stop" ]] || die "$pre is not at step $stop (see $pre.txt)"
      copy "$pre" "$snap"
    fi
    ft=$OUT/$variant-s$SEED.ep$e.finetune.params
    finetune "$ft" "$FINETUNE" --reading-params "$snap"
    evaluate "$variant" "$e" "$ft"
  done
done
echo "== $(date -u +%FT%TZ) full_recipe.sh: done"
cat "$OUT/results.csv"
