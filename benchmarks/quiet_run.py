#!/usr/bin/python3
"""Run a benchmark command only on a quiet machine, and again if something disturbed it.

    benchmarks/quiet_run.py [--others 0.1] [--tries 3] [--wait 600] -- COMMAND [ARGS...]

Before each try it waits (up to --wait seconds) until the whole machine uses under --others
cores over a 2-second window. During the try it measures what the rest of the machine used: the
machine's busy CPU time (/proc/stat) less the CPU time of the command and its children
(getrusage). A try during which the others used --others cores or more on average is
discarded and the command run again, up to --tries times. The command's output of the accepted
try (or of the last one, marked disturbed) is printed, then one line on stderr:

    quiet_run: others used 0.02 cores during the run (limit 0.10), try 1 of 3, load 0.31

Exit status: the command's own on an accepted try, 75 when every try was disturbed or the
machine never became quiet. Linux only; no dependencies beyond Python 3.
"""
import argparse
import os
import resource
import subprocess
import sys
import time

TICKS = os.sysconf("SC_CLK_TCK")


def busy_seconds():
    """CPU seconds the whole machine has spent busy since boot (all cores)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq) / TICKS


def children_seconds():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def wait_quiet(limit, window, deadline):
    """True once the machine used under `limit` cores over `window` seconds; False at deadline."""
    while True:
        b0 = busy_seconds()
        time.sleep(window)
        if (busy_seconds() - b0) / window < limit:
            return True
        if time.monotonic() > deadline:
            return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--others", type=float, default=0.1,
                    help="cores the rest of the machine may use (default 0.1)")
    ap.add_argument("--tries", type=int, default=3, help="runs before giving up (default 3)")
    ap.add_argument("--wait", type=float, default=600,
                    help="seconds to wait for a quiet machine before each try (default 600)")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("no command given (put it after --)")
    if args.others <= 0 or args.tries < 1:
        ap.error("--others must be positive and --tries at least 1")
    out = b""
    for attempt in range(1, args.tries + 1):
        if not wait_quiet(args.others, 2.0, time.monotonic() + args.wait):
            print(f"quiet_run: the machine did not become quiet within {args.wait:.0f} s",
                  file=sys.stderr)
            return 75
        b0, c0, t0 = busy_seconds(), children_seconds(), time.monotonic()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE)
        wall = max(time.monotonic() - t0, 1e-3)
        others = max(0.0, (busy_seconds() - b0) - (children_seconds() - c0)) / wall
        out = proc.stdout
        verdict = f"others used {others:.2f} cores during the run (limit {args.others:.2f}), " \
                  f"try {attempt} of {args.tries}, load {os.getloadavg()[0]:.2f}"
        if others < args.others:
            sys.stdout.buffer.write(out)
            sys.stdout.flush()
            print(f"quiet_run: {verdict}", file=sys.stderr)
            return proc.returncode
        print(f"quiet_run: disturbed, {verdict}", file=sys.stderr)
    sys.stdout.buffer.write(out)
    sys.stdout.flush()
    print("quiet_run: every try was disturbed; the output above is not a quiet measurement",
          file=sys.stderr)
    return 75


if __name__ == "__main__":
    sys.exit(main())
