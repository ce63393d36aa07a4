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
#   examples/birthplace/full_recipe.sh keep            # copy the study's state into KEEP (commit it)
#
# Two starts share a study: each variant, and the control, is run by the first start that takes its
# lock (OUT/lock.VARIANT, OUT/lock.control), and a start skips what another one holds. So on two
# cores `THREADS=1` started twice pretrains vanilla and the synthesizer side by side (a thread per
# start loses nothing at barriers, where one start on two threads does); each part's result is the
# same bits on any number of threads and starts.
#
# A lost machine takes runs/ with it. So that it costs minutes and not the hours of pretraining
# done, `keep` copies what the study cannot recompute quickly into KEEP (studies/birthplace_full,
# committed): results.csv, the London baseline, the evaluations and predictions, the pretraining
# logs, binaries.txt, and each unfinished pretraining checkpoint (xz, about 36 MB). A start on a
# machine whose OUT lacks any of them restores it from KEEP (never replacing a file of OUT).
#
# Every part of a study runs the code of one commit, the first line of binaries.txt. A machine
# without the study's binary (a new one) builds that commit (a git worktree under runs/src-COMMIT,
# preset release) and appends a line to binaries.txt naming the binary, its SHA-256, the CPU and the
# pretraining steps reached: the same code, compiled for the new CPU, continues the run from its
# checkpoint (its bits may differ from the old binary's from then on: -march=native and OpenBLAS's
# kernels follow the CPU).
#
# Where the kernel groups processes by session (sched_autogroup_enabled = 1, the default of many
# distributions), setsid starts a new group that gets as much CPU as all the others together, nice
# or not: the study then halves the speed of everything else. So the script, when it leads its own
# session, lowers its group's priority to nice 19 (examples/common/session_priority.sh): it takes
# only what the other programs leave.
#
# Variables: RECIPE (attn: attn's defaults; course: the problem set's code where attn chooses
# otherwise, --init mingpt --decay-rule mingpt --order sequential, in every pretraining and
# finetuning run; a study keeps the recipe it began with, in OUT/recipe.txt), OUT
# (runs/birthplace_full, runs/birthplace_course for RECIPE=course), KEEP (studies/birthplace_full,
# studies/birthplace_course), VARIANTS (the variants a start runs: a new study's are "vanilla
# synthesizer" unless given, kept in OUT/variants.txt; a later start runs them all, or those of
# them it names), SEED (1), THREADS (2),
# MICRO (--micro-batch, 32), READOUTS (pretraining epochs to finetune and evaluate, "100 200 400
# 650"; the last must be EPOCHS), EPOCHS (650), FINETUNE and FINETUNE_SCRATCH (finetuning epochs
# after and without pretraining, 10 and 75), BIN (the program to use for a new study). A quick
# check of the script itself: OUT=/tmp/q EPOCHS=1 READOUTS=1 FINETUNE=0.125 FINETUNE_SCRATCH=0.125.
#
# On one machine every part of a study runs one binary: the first start copies BIN (built from the
# checked-out tree with `cmake --build --preset release --target birthplace` when BIN is not given)
# to runs/bin/birthplace-<commit> and records its path and SHA-256 in OUT/binary.txt; later starts
# use that file and refuse to go on if it has changed. Results go to OUT/results.csv, one row per
# evaluated model: variant,pretrain_epochs,seed,correct,total,london,chance,p (pretrain_epochs 0
# for the control, which runs after the variants in a study that has vanilla). Summarise with
# examples/birthplace/full_summary.py OUT... DEST.
#
# A variant that needs other code than a study's binary is a study of its own, with its own OUT
# and KEEP: the RECIPE=course synthesizer (whose w2 --init mingpt draws as the problem set's code
# only since the commit after the vanilla study's) is
#   RECIPE=course VARIANTS=synthesizer OUT=runs/birthplace_course_synthesizer \
#     KEEP=studies/birthplace_course_synthesizer examples/birthplace/full_recipe.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

RECIPE=${RECIPE:-attn}
case $RECIPE in
  attn) RECIPE_OPTIONS=() && OUT=${OUT:-runs/birthplace_full} && KEEP=${KEEP:-studies/birthplace_full} ;;
  course) RECIPE_OPTIONS=(--init mingpt --decay-rule mingpt --order sequential) &&
    OUT=${OUT:-runs/birthplace_course} && KEEP=${KEEP:-studies/birthplace_course} ;;
  *) echo "full_recipe.sh: RECIPE must be attn or course, not '$RECIPE'" >&2 && exit 1 ;;
esac
SEED=${SEED:-1}
THREADS=${THREADS:-2}
MICRO=${MICRO:-32}
EPOCHS=${EPOCHS:-650}
READOUTS=${READOUTS:-"100 200 400 650"}
FINETUNE=${FINETUNE:-10}
FINETUNE_SCRATCH=${FINETUNE_SCRATCH:-75}
die() { echo "full_recipe.sh: $*" >&2; exit 1; }
(($# == 0)) || [[ $* == keep ]] || die "unknown arguments '$*' (none, or keep)"

for e in $READOUTS; do
  [[ $e =~ ^[1-9][0-9]*$ && $e -le $EPOCHS ]] || die "READOUTS: '$e' is not an epoch in 1..$EPOCHS"
done
[[ ${READOUTS##* } == "$EPOCHS" ]] || die "READOUTS must end at EPOCHS ($EPOCHS), not ${READOUTS##* }"
for v in ${VARIANTS:-}; do
  [[ $v =~ ^(vanilla|synthesizer|euclidean)$ ]] || die "VARIANTS: unknown variant '$v'"
done
# The study's variants (OUT/variants.txt, or KEEP's copy before a restore; a new study's: VARIANTS,
# or both) and this start's: all of them, or those VARIANTS names.
STUDY_VARIANTS=$(cat "$OUT/variants.txt" 2>/dev/null || cat "$KEEP/variants.txt" 2>/dev/null ||
  echo "${VARIANTS:-vanilla synthesizer}")
VARIANTS=${VARIANTS:-$STUDY_VARIANTS}
for v in $VARIANTS; do
  [[ " $STUDY_VARIANTS " == *" $v "* ]] ||
    die "$OUT is a study of '$STUDY_VARIANTS', not of $v: leave VARIANTS out, or give another OUT and KEEP"
done
has_control() { [[ " $STUDY_VARIANTS " == *" vanilla "* ]]; }

meta() {  # meta FILE KEY: one metadata value of a checkpoint (from the safetensors JSON header)
  python3 -c 'import json,struct,sys
f=open(sys.argv[1],"rb"); n=struct.unpack("<Q",f.read(8))[0]
print(json.loads(f.read(n))["__metadata__"][sys.argv[2]])' "$1" "$2"
}
copy() { cp "$1" "$2.tmp" && mv "$2.tmp" "$2"; }  # an atomic copy
finished() { [[ -f $OUT/results.csv ]] && grep -q "^$1,$EPOCHS,$SEED," "$OUT/results.csv"; }

# ---- keep: the study's state into KEEP, for a commit (the study may go on running meanwhile)
if [[ ${1:-} == keep ]]; then
  [[ -f $OUT/results.csv ]] || die "$OUT holds no study to keep"
  mkdir -p "$KEEP"
  # The checkpoints first, their logs after: a log may run ahead of its checkpoint (a resume cuts
  # it back), never behind.
  for v in $VARIANTS; do
    pre=$OUT/$v-s$SEED.pretrain.params
    if finished "$v" || [[ ! -f $pre ]]; then
      rm -f "$KEEP/${pre##*/}.xz"
    else
      xz -6 -T1 -c "$pre" >"$KEEP/${pre##*/}.xz.tmp" && mv "$KEEP/${pre##*/}.xz.tmp" "$KEEP/${pre##*/}.xz"
      echo "kept ${pre##*/} at step $(meta "$pre" train.step)"
    fi
  done
  for f in "$OUT"/results.csv "$OUT"/variants.txt "$OUT"/london.txt "$OUT"/binaries.txt "$OUT"/*.log.csv \
           "$OUT"/*.evaluate.txt "$OUT"/*.predictions "$OUT"/*.params.txt; do
    [[ -f $f ]] && copy "$f" "$KEEP/${f##*/}"
  done
  echo "kept in $KEEP: $(du -sh "$KEEP" | cut -f1)"
  exit 0
fi

mkdir -p "$OUT" runs/bin
source examples/common/session_priority.sh
session_priority 19

# The setup below (recipe, restore, binary, London baseline) is one start's at a time; a second
# start waits for it (seconds, or a build on a new machine). The parts are locked one by one later.
exec 9>>"$OUT/lock"
flock -n 9 || { echo "== $OUT is being set up by another full_recipe.sh: waiting for it"; flock 9; }

# A study keeps its recipe (a study from before RECIPE existed is attn's).
[[ -f $OUT/recipe.txt || ! -f $OUT/binary.txt ]] || echo attn >"$OUT/recipe.txt"
[[ -f $OUT/recipe.txt ]] || echo "$RECIPE" >"$OUT/recipe.txt"
[[ $(<"$OUT/recipe.txt") == "$RECIPE" ]] ||
  die "$OUT is a study of RECIPE=$(<"$OUT/recipe.txt"), not $RECIPE: give that RECIPE, or another OUT"
[[ -f $OUT/variants.txt ]] || echo "$STUDY_VARIANTS" >"$OUT/variants.txt"

# ---- what a lost machine took: restored from KEEP, never over a file OUT has
if [[ -d $KEEP ]]; then
  for f in "$KEEP"/*; do
    name=${f##*/} && [[ $name != README.md ]] || continue
    if [[ $name == *.xz ]]; then
      [[ -e $OUT/${name%.xz} ]] || { xz -dc "$f" >"$OUT/${name%.xz}.tmp" && mv "$OUT/${name%.xz}.tmp" "$OUT/${name%.xz}" &&
        echo "== restored $OUT/${name%.xz} from $f"; }
    elif [[ ! -e $OUT/$name ]]; then
      copy "$f" "$OUT/$name"
    fi
  done
fi

steps_reached() {  # variant=step of each pretraining checkpoint in OUT
  local v pre out=""
  for v in $VARIANTS; do
    pre=$OUT/$v-s$SEED.pretrain.params
    [[ -f $pre ]] && out+="$v=$(meta "$pre" train.step),"
  done
  out=${out%,}
  echo "${out:-none}"
}

# ---- the binary of the study
if [[ ! -f $OUT/binary.txt ]]; then
  if [[ -s $OUT/binaries.txt ]]; then  # a study begun on another machine: its commit, built here
    read -r _ commit _ <"$OUT/binaries.txt"
    src=runs/src-$commit
    [[ -d $src ]] || git worktree add --detach "$src" "$commit" >/dev/null
    (cd "$src" && cmake --preset release >/dev/null && cmake --build --preset release --target birthplace >/dev/null)
    BIN=$src/build/release/examples/birthplace/birthplace
  elif [[ -z ${BIN:-} ]]; then
    [[ -z $(git status --porcelain -- include examples src CMakeLists.txt cmake) ]] ||
      die "the tree has uncommitted changes: commit them, or give BIN"
    cmake --preset release >/dev/null
    cmake --build --preset release --target birthplace >/dev/null
    BIN=build/release/examples/birthplace/birthplace
  fi
  if [[ -z ${commit:-} ]]; then  # a BIN given from a changed tree is not its commit's
    commit=$(git rev-parse --short=7 HEAD)
    [[ -z $(git status --porcelain -- include examples src CMakeLists.txt cmake) ]] || commit+=-changed
  fi
  [[ -x $BIN ]] || die "BIN=$BIN is not an executable"
  kept=runs/bin/birthplace-$commit
  [[ -e $kept ]] && ! cmp -s "$BIN" "$kept" && kept=$kept-$(sha256sum "$BIN" | cut -c1-8)
  [[ -e $kept ]] || { cp "$BIN" "$kept.tmp" && mv "$kept.tmp" "$kept"; }
  sum=$(sha256sum "$kept" | cut -d' ' -f1)
  cpu=$(awk -F': ' '/^cpu family/ { f = $2 } /^model\t/ { m = $2 } /^model name/ { n = $2 }
                    END { printf "family %s model %s %s", f, m, n }' /proc/cpuinfo)
  printf '%s %s %s %s %s %s\n' "$(date -u +%FT%TZ)" "$commit" "$kept" "$sum" "$(steps_reached)" "$cpu" \
    >>"$OUT/binaries.txt"
  printf '%s %s\n' "$kept" "$sum" >"$OUT/binary.txt.tmp"
  mv "$OUT/binary.txt.tmp" "$OUT/binary.txt"
fi
read -r BIN sum <"$OUT/binary.txt"
[[ $(sha256sum "$BIN" | cut -d' ' -f1) == "$sum" ]] || die "$BIN differs from the one recorded in $OUT/binary.txt"
echo "== $(date -u +%FT%TZ) full_recipe.sh: $BIN, recipe $RECIPE, variants $VARIANTS, seed $SEED, $THREADS threads"

# ---- the London baseline (once)
if [[ ! -f $OUT/london.txt ]]; then
  "$BIN" london --eval-corpus data/birth_dev.tsv --outputs-path "$OUT/london.dev.predictions" \
    >"$OUT/london.txt.tmp"
  mv "$OUT/london.txt.tmp" "$OUT/london.txt"
fi
LONDON=$(awk '/^Correct:/ { print $2 }' "$OUT/london.txt")

[[ -f $OUT/results.csv ]] || echo "variant,pretrain_epochs,seed,correct,total,london,chance,p" >"$OUT/results.csv"
flock -u 9  # setup done; results.csv gets whole lines, appended (one write each)

# take PART: this start's lock on one part of the study (a variant or the control), on fd 8, held
# until release; false when another start holds it.
take() {
  exec 8>>"$OUT/lock.$1"
  flock -n 8 && return
  exec 8>&-
  echo "== $(date -u +%FT%TZ) $1: run by another full_recipe.sh (its lock is $OUT/lock.$1), skipped"
  return 1
}
release() { exec 8>&-; }

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
    "$BIN" finetune "$@" "${RECIPE_OPTIONS[@]}" --seed "$SEED" --epochs "$epochs" \
      --micro-batch "$MICRO" --threads "$THREADS" --writing-params "$ft" --overwrite >"$ft.txt" 2>&1
  fi
  touch "$ft.done"
}

steps_per_epoch=$(( ($(grep -c '' data/wiki.txt) + 127) / 128 ))
for variant in $VARIANTS; do
  finished "$variant" && continue
  take "$variant" || continue
  pre=$OUT/$variant-s$SEED.pretrain.params
  for e in $READOUTS; do
    grep -q "^$variant,$e,$SEED," "$OUT/results.csv" && continue
    snap=$OUT/$variant-s$SEED.pretrain.ep$e.params
    if [[ ! -f $snap ]]; then
      stop=$((steps_per_epoch * e))
      echo "== $(date -u +%FT%TZ) $variant: pretraining to epoch $e (step $stop)"
      if [[ ! -f $pre ]]; then  # --overwrite: at most the log of a run cut short before its first save
        "$BIN" pretrain --variant "$variant" "${RECIPE_OPTIONS[@]}" --seed "$SEED" --epochs "$EPOCHS" \
          --micro-batch "$MICRO" --threads "$THREADS" --stop-at "$stop" --writing-params "$pre" \
          --overwrite >"$pre.txt" 2>&1
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
  release
done
# The control last (no pretraining, the problem set's 75 finetuning epochs, under an hour): the row
# every pretrained model is compared with. It ran first until a study needed more sessions than a
# machine lasts; the pretraining, which takes hours, now starts at once.
if has_control && ! grep -q "^vanilla,0,$SEED," "$OUT/results.csv" && take control; then
  ft=$OUT/nopretrain-s$SEED.finetune.params
  finetune "$ft" "$FINETUNE_SCRATCH"
  evaluate vanilla 0 "$ft"
  release
fi

left=""
for v in $VARIANTS; do finished "$v" || left+=" $v"; done
if has_control && ! grep -q "^vanilla,0,$SEED," "$OUT/results.csv"; then left+=" control"; fi
if [[ -n $left ]]; then
  echo "== $(date -u +%FT%TZ) full_recipe.sh: this start is done; another is running:$left"
else
  echo "== $(date -u +%FT%TZ) full_recipe.sh: done"
  cat "$OUT/results.csv"
fi
