# examples/common/session_priority.sh: lets a long study started in its own session (setsid) run
# at the priority it was given, machine-wide (sourced, not run).
#
#   source examples/common/session_priority.sh
#   session_priority        # the session's group takes this script's nice value
#   session_priority 19     # or the one given
#
# Where the kernel groups processes by session (sched_autogroup_enabled = 1, the default of many
# distributions), a nice value only ranks a process against the others of its own session: the
# group of `setsid nice -n 19 study.sh` still gets as much CPU as all the other sessions
# together, so it halves the speed of an interactive build, and of another study whose group was
# lowered. Setting the session's group to the same nice value (/proc/self/autogroup) makes the
# study take only what others leave. Nothing is changed for a script that shares its session
# with the shell that started it (that would lower the shell too), or where the kernel has no
# autogroups.
session_priority() {
  local level=${1:-$(nice)} sid
  sid=$( (ps -o sid= -p $$ 2>/dev/null || true) | tr -d ' ')
  [[ "$sid" == "$$" && -w /proc/self/autogroup ]] || return 0
  echo "$level" > /proc/self/autogroup 2>/dev/null || true
}
