#!/usr/bin/env bash
# tests/dist/failure.sh HOW SECONDS COMMAND...: runs COMMAND (an mpirun of test_dist --fail HOW,
# where rank 1 stops or dies inside a collective) and passes when the job ends within SECONDS with
# a non-zero status, and, for HOW = stop, when a rank reported the timeout of its collective.
# Does not start anything but COMMAND, and stops it (timeout) if it outlives SECONDS + 10.
set -u
how=$1 seconds=$2
shift 2
start=$(date +%s)
output=$(timeout --kill-after=5 $((seconds + 10)) "$@" 2>&1)
status=$?
elapsed=$(($(date +%s) - start))
printf '%s\n' "$output"
echo "failure.sh: the job ended with status $status after ${elapsed} s"
fail() {
  echo "failure.sh: FAILED: $*"
  exit 1
}
# (timeout says 124, or 137 after its SIGKILL; a rank killed by SIGKILL also makes mpirun say 137)
((status != 124 && elapsed < seconds + 10)) || fail "the job did not end within $((seconds + 10)) s"
((status != 0)) || fail "the job ended with status 0 although rank 1 ${how}ped"
((elapsed <= seconds)) || fail "the job took ${elapsed} s, more than ${seconds} s"
if [[ $how == stop ]]; then
  grep -q "waited [0-9.e+]* s in MPI_I" <<<"$output" ||
    fail "no rank reported the timeout of its collective"
fi
echo "failure.sh: passed"
