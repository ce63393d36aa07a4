#!/usr/bin/env bash
# examples/birthplace/experiments.sh: the runs behind docs/experiments/birthplace.md, resumable.
# Does not build the program (cmake --preset release && cmake --build --preset release --target
# birthplace) nor pick budgets for you: give them on the command line.
#
#   experiments.sh london
#   experiments.sh nopretrain EPOCHS [MODEL OPTIONS...]          finetune from scratch, evaluate
#   experiments.sh pretrain NAME "E1 E2 ..." [MODEL OPTIONS...]  one pretraining run with the
#       default (650-epoch) schedule, stopped and snapshotted after E1, E2, ... epochs; each
#       snapshot is finetuned (10 epochs, the default) and evaluated on the dev set. Rerunning it
#       continues the same run (--resume) and skips the snapshots already evaluated.
#
# Environment: BIN (the program), OUT (runs/birthplace), THREADS (2), NICE (10), SEED (1),
# MICRO (the --micro-batch of new runs: 0 = whole batches; 32 keeps a run near 1.5 GB).
# Every result is appended to $OUT/results.tsv: name, pretraining epochs, finetuning epochs,
# correct, total, accuracy, wall and CPU seconds of pretraining and finetuning.
set -euo pipefail
BIN=${BIN:-build/release/examples/birthplace/birthplace}
OUT=${OUT:-runs/birthplace}
THREADS=${THREADS:-2}
NICE=${NICE:-10}
SEED=${SEED:-1}
MICRO=${MICRO:-0}
mkdir -p "$OUT"
run() { echo "+ $*" >&2; nice -n "$NICE" "$@"; }
meta() {  # meta FILE KEY: one metadata value of a checkpoint (from the safetensors JSON header)
  python3 -c 'import json,struct,sys
f=open(sys.argv[1],"rb"); n=struct.unpack("<Q",f.read(8))[0]
print(json.loads(f.read(n))["__metadata__"][sys.argv[2]])' "$1" "$2"
}
evaluate() {  # evaluate NAME PRE_EPOCHS FT_EPOCHS PRE_CKPT FT_CKPT
  local name=$1 pe=$2 fe=$3 pre=$4 ft=$5 line
  line=$(run "$BIN" evaluate --reading-params "$ft" --eval-corpus data/birth_dev.tsv \
         --outputs-path "$OUT/$name.dev.predictions" --threads "$THREADS" |
         tee /dev/stderr | grep '^Correct:')  # the whole output (with its time) stays on stderr
  echo "$line"
  local c t
  c=$(echo "$line" | awk '{print $2}'); t=$(echo "$line" | awk '{print $5}' | tr -d :)
  local pw=0 pc=0
  if [ -n "$pre" ]; then pw=$(meta "$pre" train.elapsed_s); pc=$(meta "$pre" train.cpu_s); fi
  printf '%s\t%s\t%s\t%s\t%s\t%.2f%%\t%.0f\t%.0f\t%.0f\t%.0f\n' "$name" "$pe" "$fe" "$c" "$t" \
    "$(echo "100*$c/$t" | bc -l)" "$pw" "$pc" "$(meta "$ft" train.elapsed_s)" \
    "$(meta "$ft" train.cpu_s)" >> "$OUT/results.tsv"
}

case ${1:-} in
  london)
    run "$BIN" london --eval-corpus data/birth_dev.tsv --outputs-path "$OUT/london.dev.predictions"
    ;;
  nopretrain)
    epochs=$2; shift 2
    name=nopretrain.ep$epochs
    ft=$OUT/$name.finetune.params
    if [ ! -f "$ft" ] || [ "$(meta "$ft" train.step)" != "$(( (2000 + 255) / 256 * epochs ))" ]; then
      if [ -f "$ft" ]; then
        run "$BIN" finetune --resume "$ft" --threads "$THREADS"
      else
        run "$BIN" finetune --writing-params "$ft" --epochs "$epochs" --seed "$SEED" \
          --micro-batch "$MICRO" --threads "$THREADS" "$@"
      fi
    fi
    evaluate "$name" 0 "$epochs" "" "$ft"
    ;;
  pretrain)
    name=$2 budgets=$3; shift 3
    pre=$OUT/$name.pretrain.params
    for e in $budgets; do
      snap=$OUT/$name.pretrain.ep$e.params
      if [ ! -f "$snap" ]; then
        if [ -f "$pre" ]; then
          run "$BIN" pretrain --resume "$pre" --stop-at $((23 * e)) --threads "$THREADS"
        else
          run "$BIN" pretrain --writing-params "$pre" --stop-at $((23 * e)) --seed "$SEED" \
            --micro-batch "$MICRO" --threads "$THREADS" "$@"
        fi
        [ "$(meta "$pre" train.step)" = "$((23 * e))" ] || { echo "not at epoch $e" >&2; exit 1; }
        cp "$pre" "$snap"
      fi
      ft=$OUT/$name.ep$e.finetune.params
      if ! grep -q "^$name.ep$e	" "$OUT/results.tsv" 2>/dev/null; then
        if [ -f "$ft" ] && [ "$(meta "$ft" train.step)" != 80 ]; then
          run "$BIN" finetune --resume "$ft" --threads "$THREADS"
        elif [ ! -f "$ft" ]; then
          run "$BIN" finetune --reading-params "$snap" --writing-params "$ft" --seed "$SEED" \
            --micro-batch "$MICRO" --threads "$THREADS"
        fi
        evaluate "$name.ep$e" "$e" 10 "$snap" "$ft"
      fi
    done
    ;;
  *)
    sed -n '2,19p' "$0"
    exit 2
    ;;
esac
