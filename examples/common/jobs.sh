# examples/common/jobs.sh: run shell functions in the background, at most JOBS at a time, for the
# experiment scripts (sourced, not run). Every job is waited for; jobs_wait fails if any failed.
#
#   source examples/common/jobs.sh
#   for seed in 1 2 3; do job_start train "$seed"; done
#   jobs_wait "my_script.sh" "see runs/*.txt" || exit 1

_job_pids=()

# A study started with `setsid nice -n N` runs at nice N against the other sessions too.
source "$(dirname "${BASH_SOURCE[0]}")/session_priority.sh"
session_priority

# job_start COMMAND [ARGS...]: start it in the background once fewer than JOBS (default 2) run.
job_start() {
  while (($(jobs -rp | wc -l) >= ${JOBS:-2})); do wait -n || true; done
  "$@" &
  _job_pids+=($!)
}

# jobs_wait WHO WHERE: wait for every job started; on a failure say so on stderr and return 1.
jobs_wait() {
  local pid status=0
  for pid in "${_job_pids[@]}"; do wait "$pid" || status=1; done
  _job_pids=()
  ((status == 0)) || echo "$1: a run failed ($2)" >&2
  return $status
}
