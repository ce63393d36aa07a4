#!/usr/bin/env bash
# tests/scripts/benchmark_scripts.sh: runs each benchmark script of benchmarks/ once on a tiny size,
# so that a script that no longer runs (an argument it passes that a model lost, a changed output
# it parses) fails the tests. Timings are printed, never asserted.
#
# usage: benchmark_scripts.sh SOURCE_DIR BUILD_DIR
#
# The PyTorch scripts (vs_torch.py and the torch_*.py it runs, quiet_run.py) run under Debian's
# python3-torch: $ATTN_TORCH_PYTHON, else /usr/bin/python3. Without torch there the test is skipped
# (exit 77), unless ATTN_REQUIRE_TORCH=1 (scripts/test sets it after installing python3-torch):
# then it fails. The scripts that need PyPI's transformers or tokenizers (hf_generate.py,
# bpe_vs_hf.py), and vs_torch.py with PyPI's current torch, run where scripts/oracle-venv made
# build/oracle-venv, and are skipped otherwise: the tests never download anything.
set -uo pipefail
src=$1
build=$2
py=${ATTN_TORCH_PYTHON:-/usr/bin/python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/attn_bench_scripts.XXXXXX")
trap 'rm -rf "$work"' EXIT
failed=0

run() {  # run NAME COMMAND...: the command's output is shown only when it fails
  local name=$1
  shift
  local t0=$SECONDS
  if "$@" > "$work/out.txt" 2>&1; then
    echo "ok   $name ($((SECONDS - t0)) s)"
  else
    echo "FAIL $name (exit status $?): $*"
    tail -n 30 "$work/out.txt"
    failed=1
  fi
}

if ! "$py" -c "import torch" > /dev/null 2>&1; then
  if [[ "${ATTN_REQUIRE_TORCH:-0}" == 1 ]]; then
    echo "FAIL: $py cannot import torch (Debian's python3-torch; scripts/install-deps tests)"
    exit 1
  fi
  echo "skipped: $py cannot import torch (install python3-torch, or set ATTN_TORCH_PYTHON)"
  exit 77
fi

# Every process may run whatever the machine does: quiet_run.py never waits (--others 64).
q=(--others 64 --threads 1)
run "quiet_run.py" "$py" "$src/benchmarks/quiet_run.py" --others 64 --tries 1 --wait 1 -- true
run "vs_torch.py attention" "$py" "$src/benchmarks/vs_torch.py" attention --build "$build" \
  "${q[@]}" --lengths 32 --reps 1 --pairs 1 --csv "$work/attention.csv"
run "vs_torch.py attention --score alibi --kv-heads 2" "$py" "$src/benchmarks/vs_torch.py" \
  attention --build "$build" "${q[@]}" --lengths 32 --reps 1 --pairs 1 --score alibi --kv-heads 2
# The demo shape (benchmarks/gpt_configs.hpp): config A took 132 s for train and 115 s for bf16
# autocast (emulated on a CPU without bf16 instructions) with the ci preset's -O0 programs.
run "vs_torch.py train" "$py" "$src/benchmarks/vs_torch.py" train --build "$build" "${q[@]}" \
  --configs demo --steps 1 --pairs 1 --csv "$work/train.csv"
run "torch_train_step.py --autocast bf16" "$py" "$src/benchmarks/torch_train_step.py" \
  --config demo --threads 1 --steps 1 --autocast bf16 --json
run "vs_torch.py generate" "$py" "$src/benchmarks/vs_torch.py" generate --build "$build" \
  "${q[@]}" --configs demo --prompt 4 --tokens 4 --pairs 1 --csv "$work/generate.csv"
# bench_attention's own table of backward plans (no script runs it): a tiny grouped-query case.
run "bench_attention --plans --kv-heads 2" "$build/benchmarks/bench_attention" --plans --kv-heads 2 \
  --lengths 40 --reps 1 --threads 1
for csv in attention train generate; do
  [[ -s "$work/$csv.csv" ]] || { echo "FAIL vs_torch.py $csv: no --csv file written"; failed=1; }
done

venv=$src/build/oracle-venv/bin/python
if [[ -x "$venv" ]]; then
  head -c 20000 "$src/data/tinyshakespeare.txt" > "$work/small.txt"
  run "bpe_vs_hf.py" "$venv" "$src/benchmarks/bpe_vs_hf.py" --bench "$build/benchmarks/bench_bpe" \
    --corpus "$work/small.txt" --vocab 300 --reps 1
  run "hf_generate.py" "$venv" "$src/benchmarks/hf_generate.py" \
    --model "$src/benchmarks/hf_shapes/gpt2-124m" --threads 1 --prompt 4 --tokens 2 --reps 1
  # PyPI's torch: the SDPA and FlexAttention figures (in the pairs tables too), SDPA's grouped
  # query heads, a preloaded allocator, torch.compile.
  run "vs_torch.py attention (PyPI torch)" "$venv" "$src/benchmarks/vs_torch.py" attention \
    --build "$build" "${q[@]}" --python "$venv" --openblas-threads 1 --allocators tcmalloc \
    --lengths 32 --reps 1 --pairs 1 --score rotary --kv-heads 4
  run "torch_train_step.py --compile (PyPI torch)" "$venv" "$src/benchmarks/torch_train_step.py" \
    --config demo --threads 1 --steps 1 --compile --json
else
  echo "skipped: bpe_vs_hf.py, hf_generate.py, vs_torch.py with PyPI's torch (they need" \
    "scripts/oracle-venv, which made no $venv)"
fi
exit $failed
