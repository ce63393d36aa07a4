#!/usr/bin/env bash
# tests/dist/char_gpt.sh CHAR_GPT DATA WORK MPIRUN...: char_gpt data-parallel under MPIRUN (an
# mpirun on loopback, from tests/tests.cmake), end to end:
#   1. 2 ranks × 1 thread write bit for bit the checkpoint (and logged losses) of one process running
#      the same 2 shards per step, 20 steps; a 1-shard run differs (so the comparison can fail);
#      with 4 shards, one process of 2 threads, 2 ranks and 4 ranks write the same checkpoint;
#   2. a 2-rank run stopped at step 10 and resumed in one process ends bit for bit as (1);
#   3. a rank killed (SIGKILL) mid-run ends the job within 20 s; the last checkpoint loads;
#   4. a rank stopped (SIGSTOP) makes rank 0 give up after ATTN_DIST_TIMEOUT = 3 s, naming the
#      timeout; the job ends within 20 s; the last checkpoint loads and resumes;
#   5. Ctrl-C reaching rank 1 only: every rank stops after the same step, saved, exit 130;
#   6. a bad option: one error line (rank 0's), exit 2, no MPI_Abort;
#   7. errors after the command line, before training: one that only rank 0 meets (the run's
#      files, which rank 0 alone owns) and one that every rank meets (an empty --data): one error
#      line each, exit 1 from every rank, no MPI_Abort.
# Does not start anything but char_gpt (directly and through MPIRUN), all inside WORK.
set -euo pipefail
char_gpt=$1 data=$2 work=$3
shift 3
mpirun=("$@")
rm -rf "$work"
mkdir -p "$work"
cd "$work"

fail() {
  echo "char_gpt.sh: FAILED: $*"
  exit 1
}
small=(--data "$data" --layers 1 --heads 2 --embd 32 --block 16 --batch 8 --warmup 2
  --eval-batches 2 --threads 1 --sample-tokens 0 --dropout 0.1)
losses() { cut -d, -f1-5 "$1"; } # step, train and validation loss, lr, gradient norm
# Two checkpoints hold the same run: the same tensors byte for byte and the same header once the
# clock fields train.elapsed_s and train.cpu_s, the header's checksum (which covers them) and the
# header's padding are taken out.
header_len() { od -An -t u8 -N 8 "$1" | tr -d ' '; }
header_of() {
  head -c $((8 + $(header_len "$1"))) "$1" | tail -c +9 |
    LC_ALL=C sed -E 's/"train\.(elapsed|cpu)_s":"[^"]*",?//g; s/"crc32:__metadata__":"[^"]*",?//; s/ +$//'
}
same_checkpoint() {
  cmp -s <(tail -c +$((9 + $(header_len "$1"))) "$1") <(tail -c +$((9 + $(header_len "$2"))) "$2") &&
    [[ "$(header_of "$1")" == "$(header_of "$2")" ]]
}

echo "== 1. 2 ranks vs one process with 2 shards"
"$char_gpt" "${small[@]}" --steps 20 --eval-every 5 --shards 2 --out one >one.txt 2>&1
"${mpirun[@]}" -np 2 "$char_gpt" "${small[@]}" --steps 20 --eval-every 5 --out two >two.txt 2>&1
same_checkpoint one/checkpoint.safetensors two/checkpoint.safetensors || fail "the 2-rank checkpoint differs"
[[ "$(losses one/log.csv)" == "$(losses two/log.csv)" ]] || fail "the logged losses differ"
(($(grep -c "^char_gpt:" two.txt) == 1)) || fail "the header was printed by more than rank 0"
grep -q "data parallel: 2 ranks, 2 shards per step" two.txt || fail "no data-parallel line"
"$char_gpt" "${small[@]}" --steps 20 --eval-every 5 --shards 1 --out single >/dev/null 2>&1
! same_checkpoint single/checkpoint.safetensors two/checkpoint.safetensors ||
  fail "1 shard gave the bits of 2 shards: the comparison above proves nothing"

echo "== 1b. 4 shards: one process with 2 threads, 2 ranks of 2 shards, 4 ranks"
# (wide enough for attn's parallel loops to use the second thread)
four=(--data "$data" --layers 2 --heads 4 --embd 64 --block 64 --batch 8 --warmup 2
  --eval-batches 1 --sample-tokens 0 --dropout 0.1 --steps 4 --eval-every 2 --shards 4)
"$char_gpt" "${four[@]}" --threads 2 --out four1 >/dev/null 2>&1
"${mpirun[@]}" -np 2 "$char_gpt" "${four[@]}" --threads 1 --out four2 >/dev/null 2>&1
"${mpirun[@]}" -np 4 "$char_gpt" "${four[@]}" --threads 1 --out four4 >/dev/null 2>&1
same_checkpoint four1/checkpoint.safetensors four2/checkpoint.safetensors || fail "2 ranks x 2 shards differ"
same_checkpoint four1/checkpoint.safetensors four4/checkpoint.safetensors || fail "4 ranks differ"

echo "== 2. 2 ranks stopped at step 10, resumed in one process"
"${mpirun[@]}" -np 2 "$char_gpt" "${small[@]}" --steps 20 --eval-every 5 --stop-at 10 \
  --out resumed >/dev/null 2>&1
"$char_gpt" --data "$data" --resume resumed/checkpoint.safetensors --out resumed --threads 1 \
  --sample-tokens 0 >/dev/null 2>&1
same_checkpoint resumed/checkpoint.safetensors two/checkpoint.safetensors || fail "the resumed run differs"
[[ "$(losses resumed/log.csv)" == "$(losses two/log.csv)" ]] || fail "the resumed losses differ"

# The pid of rank $2 of the mpirun whose pid is $1: the child of it (4th field of /proc/PID/stat)
# whose environment holds OMPI_COMM_WORLD_RANK=$2.
rank_pid() {
  local d
  for d in /proc/[0-9]*; do
    [[ $(cut -d' ' -f4 "$d/stat" 2>/dev/null) == "$1" ]] || continue
    if tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      echo "${d#/proc/}"
      return 0
    fi
  done
  return 1
}

# signal_rank OUT SIGNAL: starts a long 2-rank run in OUT/, waits for its first checkpoint,
# sends SIGNAL to rank 1 alone and waits (at most 20 s) for the job to end; its exit status is
# left in `status`, its output in OUT.txt.
signal_rank() {
  local out=$1 signal=$2 job pid start
  "${mpirun[@]}" -np 2 "$char_gpt" "${small[@]}" --steps 100000000 --eval-every 50 \
    --out "$out" >"$out.txt" 2>&1 &
  job=$!
  for _ in $(seq 600); do
    [[ -f $out/checkpoint.safetensors ]] && break
    sleep 0.1
  done
  [[ -f $out/checkpoint.safetensors ]] || fail "$out: no checkpoint after 60 s"
  pid=$(rank_pid "$job" 1) || fail "$out: rank 1 not found among mpirun's children"
  start=$(date +%s)
  kill -s "$signal" "$pid"
  for _ in $(seq 200); do
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$job" 2>/dev/null; then
    kill -s KILL "$pid" "$job" 2>/dev/null || true
    fail "$out: the job still runs 20 s after rank 1 got SIG$signal"
  fi
  status=0
  wait "$job" || status=$?
  echo "$out: the job ended with status $status, $(($(date +%s) - start)) s after rank 1 got SIG$signal"
}

# fail_rank OUT SIGNAL: a rank that dies or hangs ends the job, non-zero; the last checkpoint loads.
fail_rank() {
  signal_rank "$1" "$2"
  ((status != 0)) || fail "$1: the job ended with status 0"
  "$char_gpt" sample "$1/checkpoint.safetensors" --tokens 5 >/dev/null 2>&1 ||
    fail "$1: the last checkpoint does not load"
}

echo "== 3. a killed rank"
fail_rank killed KILL

echo "== 4. a stopped rank (ATTN_DIST_TIMEOUT=3)"
ATTN_DIST_TIMEOUT=3 fail_rank stopped STOP
grep -q "rank 0 of 2 waited [0-9.e+]* s in MPI_I" stopped.txt ||
  fail "rank 0 did not report the timeout: $(tail -5 stopped.txt)"
# The checkpoint of the failed job resumes (in one process, for two more steps).
saved_step() { grep -ao '"train\.step":"[0-9]*"' "$1" | head -1 | tr -dc 0-9; }
step=$(saved_step stopped/checkpoint.safetensors)
[[ -n $step ]] || fail "stopped/checkpoint.safetensors has no train.step"
"$char_gpt" --data "$data" --resume stopped/checkpoint.safetensors --out stopped --threads 1 \
  --sample-tokens 0 --stop-at $((step + 2)) >resume.txt 2>&1 || fail "resume: $(tail -3 resume.txt)"
(($(saved_step stopped/checkpoint.safetensors) == step + 2)) || fail "resume did not save step $((step + 2))"
echo "== 5. Ctrl-C (SIGINT) reaching rank 1 only"
signal_rank interrupted INT
((status == 130)) || fail "interrupted: exit status $status, not 130: $(tail -5 interrupted.txt)"
step=$(saved_step interrupted/checkpoint.safetensors)
last_logged=$(tail -1 interrupted/log.csv | cut -d, -f1)
[[ -n $step && $step == "$last_logged" ]] ||
  fail "interrupted: the checkpoint holds step '$step', the log ends at '$last_logged'"
grep -q "stopped at step $step of" interrupted.txt || fail "interrupted: rank 0 did not say where"
echo "interrupted: exit 130 at step $step, saved and logged"

echo "== 6. a bad option under mpirun: rank 0's one line, exit 2, no MPI_Abort"
set +e
"${mpirun[@]}" -np 2 "$char_gpt" --layers 0 --data "$data" >bad_option.txt 2>&1
status=$?
set -e
((status == 2)) || fail "bad option: exit status $status, not 2: $(cat bad_option.txt)"
(($(grep -c "^error: --layers: 0 is outside" bad_option.txt) == 1)) ||
  fail "bad option: not exactly one error line: $(cat bad_option.txt)"
! grep -q "MPI_ABORT" bad_option.txt || fail "bad option: the job was aborted: $(cat bad_option.txt)"
echo "bad option: one line, exit 2"

echo "== 7. errors before training: one error line, exit 1, no MPI_Abort"
: >empty.txt
check_one_error() { # NAME REGEX: the output NAME.txt of a job that failed before training
  local status=$1 name=$2 regex=$3
  ((status == 1)) || fail "$name: exit status $status, not 1: $(cat "$name.txt")"
  (($(grep -c "^error: " "$name.txt") == 1)) && grep -Eq "^error: .*$regex" "$name.txt" ||
    fail "$name: not exactly one error line matching /$regex/: $(cat "$name.txt")"
  ! grep -q "MPI_ABORT" "$name.txt" || fail "$name: the job was aborted: $(cat "$name.txt")"
}
set +e
"${mpirun[@]}" -np 2 "$char_gpt" "${small[@]}" --steps 20 --out two >in_the_way.txt 2>&1
check_one_error $? in_the_way "an earlier run's files are in the way \(two/checkpoint"
"${mpirun[@]}" -np 2 "$char_gpt" "${small[@]:2}" --data empty.txt --steps 20 --out e >empty.txt.out 2>&1
status=$?
mv empty.txt.out empty_data.txt
check_one_error $status empty_data "empty.txt is empty"
set -e
echo "errors before training: one line each, exit 1"

echo "char_gpt.sh: passed"
