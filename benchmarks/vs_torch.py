#!/usr/bin/python3
"""attn against PyTorch at its fastest on this machine, as ratios measured in one run.

    benchmarks/vs_torch.py attention --build build/release [--lengths 1024,4096] [--reps 5]
    benchmarks/vs_torch.py train --build build/release [--configs A,B] [--dropout 0.1]
    benchmarks/vs_torch.py generate --build build/release [--configs A,B]
    benchmarks/vs_torch.py train --avx2 --build build/release-avx2    # AVX2 code paths only
    benchmarks/vs_torch.py train --rounds 3    # on a machine whose speed drifts (see below)
    benchmarks/vs_torch.py attention --lengths 4096 --reps 3 --pairs 5    # ratios pair by pair
    benchmarks/vs_torch.py attention --score alibi --kv-heads 2    # ALiBi, grouped-query heads
    benchmarks/vs_torch.py generate --pairs 3    # generation's figures drift most
    benchmarks/vs_torch.py table --csv FILE    # the pairs tables again, from a --csv file

PyTorch runs in a fresh process for every combination of its intra-op threads (torch
.set_num_threads: 1, 2) and OpenBLAS's threads (OPENBLAS_NUM_THREADS: --openblas-threads, default
1, 2; OpenBLAS reads it when it loads) and, with --allocators, the malloc it runs with (glibc's,
or jemalloc or tcmalloc preloaded), each under benchmarks/quiet_run.py (it waits for a quiet machine and repeats a run
that others disturbed). Each figure of PyTorch's is the best over the four combinations, and the
table says which gave it; attn runs once with --threads (default 2). OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE are unset for every process (some machines preset them for older OpenBLAS builds,
and they slow its kernels). --csv FILE also writes every measurement, one row each, atomically.

--rounds N repeats the whole comparison N times, PyTorch first in odd rounds and attn first in
even ones, and takes each side's best over the rounds. On a virtual machine whose speed drifts
by more than the gap being measured (one of the project's Zen 3 guests ran the same binary 1.7x
slower from one minute to the next, with nothing else running in it), a single round compares
two moments of the machine rather than two libraries; alternating rounds give both sides a
chance at the machine's fast moments (no guarantee: on that guest three rounds of ten minutes
each still caught one side slow in all three). The per-round figures are printed, so the drift
shows.

--pairs N (attention, train and generate) then measures the ratio out of reach of drift over minutes: N
pairs of one attn run and one run of each PyTorch combination that was best above, back to back
(attn first in odd pairs, PyTorch first in even ones; attention with one timed run per figure),
and prints each figure's ratio per pair as median (min-max) against every way PyTorch computed it
(written out, nn.MultiheadAttention, SDPA on torch 2.x, FlexAttention's compiled forward on 2.5
and later), with the fused forward's share of
the pair's best SGEMM. A pair compares the two libraries within a minute or so, not two moments
of the machine minutes apart. For attention it also prints what the algorithm leaves room for:
attn's forward+backward FLOPs (3.5 times the forward's where the backward recomputes the scores
and makes four more products of the same size, 3 times where the weights are small enough to be
kept) at the pair's best SGEMM rate, as a share of attn's measured time, and the ratios attn
would show at that rate. `table --csv FILE` prints the pairs
tables again from the --csv file of such a run.

--avx2 measures both sides' AVX2 code paths on an AVX-512 machine, what a Zen 3 (AVX2, no
AVX-512) runs: attn from a build without AVX-512 (the release-avx2 preset, -march=znver3; the
script checks the build's flags), OpenBLAS with the kernels it picks on a Zen 3
(OPENBLAS_CORETYPE=Zen, its Haswell kernels) and ATen with ATEN_CPU_CAPABILITY=avx2, for every
process. The instructions are a Zen 3's; the caches, clocks and the rest of the core are still the
machine's own, so such a table stands in for a Zen 3 until one is measured, not for one.

The PyTorch scripts (torch_attention.py, torch_train_step.py, torch_generate.py) run under
--python: Debian's /usr/bin/python3 with python3-torch (1.13) by default, or PyPI's current torch
in build/oracle-venv (benchmarks/peers/setup.sh; there they use F.scaled_dot_product_attention,
torch_attention.py adds its rows, and train --torch-compile compiles the model;
benchmarks/peers/compare.sh runs the whole comparison for both). attn does not depend on them.

attention --score alibi|rotary and --kv-heads N (grouped-query attention) set both sides' score
and key/value heads (bench_attention and torch_attention.py say how each side computes them);
nn.MultiheadAttention then drops out, the other ways stay.
"""
import argparse
import csv
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
AVX2 = False  # --avx2: AVX2 code paths on both sides
DEBIAN_PYTHON = "/usr/bin/python3"  # Debian's python3-torch lives in the system interpreter
PYTHON = DEBIAN_PYTHON  # --python
# The allocators commonly preloaded to speed PyTorch up on the CPU (Debian's libjemalloc2 and
# libtcmalloc-minimal4); glibc's is the default.
ALLOCATORS = {"glibc": None,
              "jemalloc": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
              "tcmalloc": "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"}
# PyTorch's settings besides its thread count, by label: (OpenBLAS threads, allocator). Set by
# --openblas-threads and --allocators; the label is what the tables print after "t<threads>/".
VARIANTS = {"b1": (1, "glibc"), "b2": (2, "glibc")}


def variant_label(openblas_threads, allocator):
    return f"b{openblas_threads}" + ("" if allocator == "glibc" else f"+{allocator[:2]}")


def environment(openblas_threads=None, allocator="glibc"):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS",
                        "OMP_NUM_THREADS", "LD_PRELOAD")}
    if openblas_threads is not None:
        env["OPENBLAS_NUM_THREADS"] = str(openblas_threads)
    if ALLOCATORS[allocator]:
        env["LD_PRELOAD"] = ALLOCATORS[allocator]
    if AVX2:
        env["OPENBLAS_CORETYPE"] = "Zen"
        env["ATEN_CPU_CAPABILITY"] = "avx2"
    return env


def build_has_avx512(build):
    """Whether the attn build's compiler flags enable AVX-512 (from its CMakeCache.txt)."""
    cache = os.path.join(build, "CMakeCache.txt")
    if not os.path.exists(cache):
        sys.exit(f"vs_torch: {cache} not found (configure the build first)")
    values = {}
    with open(cache) as f:
        for line in f:
            m = re.match(r"(CMAKE_CXX_COMPILER|CMAKE_CXX_FLAGS|CMAKE_BUILD_TYPE):\w+=(.*)", line)
            if m:
                values[m.group(1)] = m.group(2).strip()
    flags = values.get("CMAKE_CXX_FLAGS", "").split()
    build_type = values.get("CMAKE_BUILD_TYPE", "").upper()
    with open(cache) as f:
        for line in f:
            m = re.match(rf"CMAKE_CXX_FLAGS_{build_type}:\w+=(.*)", line) if build_type else None
            if m:
                flags += m.group(1).split()
    macros = subprocess.run([values.get("CMAKE_CXX_COMPILER", "c++"), *flags, "-dM", "-E", "-x",
                             "c++", os.devnull], stdout=subprocess.PIPE, text=True, check=True)
    return "__AVX512F__" in macros.stdout


def check_build(build):
    if AVX2 and build_has_avx512(build):
        sys.exit(f"vs_torch: --avx2 needs an attn build without AVX-512; {build} has it "
                 "(cmake --preset release-avx2 && cmake --build --preset release-avx2)")


OTHERS = 0.1  # cores the rest of the machine may use during a run (--others)


def quiet(cmd, env):
    """stdout of cmd run under quiet_run.py; its verdict line goes to our stderr."""
    proc = subprocess.run([PYTHON, os.path.join(HERE, "quiet_run.py"), "--others", str(OTHERS),
                           "--", *cmd], env=env, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"vs_torch: {' '.join(cmd)} failed (exit {proc.returncode})")
    return proc.stdout


def torch_run(script, args, combo):
    """[json objects] of one PyTorch run with combo = (torch threads, VARIANTS label)."""
    tt, label = combo
    ob, allocator = VARIANTS[label]
    print(f"vs_torch: {script}, torch threads {tt}, OpenBLAS threads {ob}, {allocator} malloc",
          file=sys.stderr)
    out = quiet([PYTHON, os.path.join(HERE, script), "--threads", str(tt), "--json", *args],
                environment(ob, allocator))
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def torch_runs(script, args):
    """{(torch threads, OpenBLAS threads): [json objects]} for every combination."""
    return {c: torch_run(script, args, c) for c in itertools.product((1, 2), VARIANTS)}


def rounds(a, torch_fn, attn_fn):
    """Runs torch_fn() (PyTorch's combinations) and attn_fn() a.rounds times, PyTorch first in
    odd rounds, attn first in even ones. Returns ({(torch threads, OpenBLAS threads, round):
    [json objects]}, [attn_fn() per round])."""
    runs, ours = {}, []
    for k in range(1, a.rounds + 1):
        if a.rounds > 1:
            print(f"vs_torch: round {k} of {a.rounds}", file=sys.stderr)
        if k % 2 == 0:
            ours.append(attn_fn())
        for c, r in torch_fn().items():
            runs[(*c, k)] = r
        if k % 2 == 1:
            ours.append(attn_fn())
    return runs, ours


def pairs(a, combos, torch_fn, attn_fn):
    """--pairs N: N pairs of one attn run (attn_fn()) and one run of each PyTorch combination in
    combos (torch_fn(combo)), attn first in odd pairs, PyTorch first in even ones. Returns
    [(attn_fn(), {combo: torch_fn(combo)})] per pair."""
    out = []
    for k in range(1, a.pairs + 1):
        print(f"vs_torch: pair {k} of {a.pairs}", file=sys.stderr)
        if k % 2 == 1:
            ours = attn_fn()
            theirs = {c: torch_fn(c) for c in sorted(combos)}
        else:
            theirs = {c: torch_fn(c) for c in sorted(combos)}
            ours = attn_fn()
        out.append((ours, theirs))
    return out


def spread(values, unit="x", digits=2):
    """"median (min-max)" of a list: ratios by default, unit " %" and digits 0 for shares."""
    v = sorted(values)
    mid = v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
    return f"{mid:.{digits}f}{unit} ({v[0]:.{digits}f}-{v[-1]:.{digits}f})"


def combo_columns(runs, key):
    """The table's PyTorch columns: each combination's best figure over the rounds (higher is
    better), in combo_header's order."""
    out = {}
    for c, r in runs.items():
        out[c[:2]] = max(out.get(c[:2], r[0][key]), r[0][key])
    return "  ".join(f"{out[c]:>{len(combo_name(c))}.0f}" for c in sorted(out))


def combo_header():
    """The names of combo_columns' columns (t1/b1  t1/b2 ...)."""
    return "  ".join(combo_name(c) for c in sorted(itertools.product((1, 2), VARIANTS)))


def variants_line():
    """What the t/b... labels of the tables vary, for their headings."""
    allocators = sorted({al for _, al in VARIANTS.values()})
    return ("OpenBLAS threads" + (" x allocator (+je jemalloc, +tc tcmalloc)"
                                  if allocators != ["glibc"] else "") + " (t/b)")


def torch_line(runs):
    """Which PyTorch ran, for the tables' heading."""
    versions = sorted({r[0].get("torch", "?") for r in runs.values() if r})
    return f"PyTorch {', '.join(versions)} ({PYTHON})"


def peer_line(runs):
    """torch_line and the attention the model scripts used (manual or sdpa), under a table."""
    return (torch_line(runs) + ", attention "
            + ", ".join(sorted({r[0].get("attention", "manual") for r in runs.values()})))


def train_steps(a, cfg):
    """Timed training steps of configuration cfg: --steps, else 10 for A and 5 for B."""
    return str(a.steps) if a.steps else "10" if cfg == "A" else "5"


def round_best(runs, n, key):
    """PyTorch's best figure (higher is better) of each round, over its combinations."""
    return [max(r[0][key] for c, r in runs.items() if c[2] == k) for k in range(1, n + 1)]


def print_rounds(label, attn_values, torch_values):
    """One line with each round's figures, when there was more than one round."""
    if len(attn_values) > 1:
        print(f"  {label} per round: attn " + ", ".join(f"{v:.1f}" for v in attn_values)
              + "; PyTorch's best " + ", ".join(f"{v:.1f}" for v in torch_values))


def best(runs, select, key, lower_is_better=True):
    """(value, (torch threads, OpenBLAS threads[, round])) of the best run for one figure."""
    vals = [(select(r)[key], combo) for combo, r in runs.items() if select(r) is not None]
    return (min if lower_is_better else max)(vals, key=lambda x: x[0])


def combo_name(c):
    return f"t{c[0]}/{c[1]}"


def bench(build, name, args):
    path = os.path.join(build, "benchmarks", f"bench_{name}")
    if not os.access(path, os.X_OK):
        sys.exit(f"vs_torch: {path} not found (cmake --build {build} --target bench_{name})")
    print(f"vs_torch: bench_{name} {' '.join(args)}", file=sys.stderr)
    return quiet([path, *args], environment())


def write_csv(path, rows):
    if not path:
        return
    fields = sorted({k for r in rows for k in r})
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".vs_torch.", suffix=".csv")
    with os.fdopen(fd, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, path)


def cpu_line():
    model, flags = "unknown CPU", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "unknown CPU":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    simd = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    paths = ("; AVX2 code paths only (attn without AVX-512, OpenBLAS Zen kernels, ATen avx2)"
             if AVX2 else "")
    return f"{model}, {os.cpu_count()} cores, {simd}{paths}"


def parse_bench_attention(out):
    """(attn::gemm's SGEMM GFLOP/s, {(T, mask): figures}) from bench_attention's output."""
    sgemm = float(re.search(r"SGEMM \(attn::gemm, n = 2048\): ([\d.]+)", out).group(1))
    ours = {}
    for line in out.splitlines():
        parts = [p.split() for p in line.split("|")]
        if len(parts) == 6 and parts[0] and parts[0][0].isdigit():
            ours[(int(parts[0][0]), parts[0][1])] = {
                "fused_fwd_ms": float(parts[1][0]), "fused_gflops": float(parts[1][1]),
                "fused_fb_ms": float(parts[2][0])}
    return sgemm, ours


# The ways torch_attention.py computes attention, each with a forward figure ("<way>_fwd_ms") and
# all but FlexAttention (forward only on the CPU) a forward+backward one ("<way>_fb_ms"): the
# written-out formula always, nn.MultiheadAttention for the plain score with as many key/value
# heads as query heads, F.scaled_dot_product_attention on torch >= 2.0, FlexAttention on >= 2.5.
WAY_NAMES = {"manual": "manual", "mha": "nn.MHA", "sdpa": "SDPA", "flex": "Flex"}


def attention_keys(runs):
    """The figures every PyTorch run of torch_attention.py gave for every case, in WAY_NAMES'
    order, each way's forward before its forward+backward."""
    cases = [x for r in runs.values() for x in r if "T" in x]
    return tuple(f"{w}_{f}_ms" for w in WAY_NAMES for f in ("fwd", "fb")
                 if cases and all(f"{w}_{f}_ms" in x for x in cases))


def attention_args(a, reps):
    """The arguments bench_attention and torch_attention.py share."""
    return ["--lengths", a.lengths, "--reps", str(reps), "--score", a.score,
            "--kv-heads", str(a.kv_heads)]


def attention_setting(rows):
    """'score S, N key/value heads' of an attention run's rows (older --csv files: the plain score
    and 8)."""
    r = next((r for r in rows if r.get("what") == "attention"), {})
    return (f"score {r.get('score') or 'scaled_dot'}, {r.get('kv_heads') or 8} key/value heads of 8")


def case(r, T, mask):
    """The json object of one (T, mask) case in a torch_attention.py run, or None."""
    return next((x for x in r if x.get("T") == T and x.get("mask") == mask), None)


def attention_pairs(a, runs, rows):
    """--pairs: the attention ratios pair by pair (see the module's docstring)."""
    lengths = [int(t) for t in a.lengths.split(",")]
    cases = list(itertools.product(lengths, ("none", "causal")))
    keys = attention_keys(runs)
    # Every combination that gave PyTorch's best for some figure above.
    combos = {best(runs, lambda r, T=T, m=m: case(r, T, m), k)[1][:2]
              for T, m in cases for k in keys}
    got = pairs(a, combos,
                lambda c: torch_run("torch_attention.py", attention_args(a, 1), c),
                lambda: parse_bench_attention(bench(a.build, "attention", [
                    "--threads", str(a.threads), *attention_args(a, 1)])))
    setting = {"score": a.score, "kv_heads": a.kv_heads}
    for k, ((sgemm, ours), theirs) in enumerate(got, start=1):
        for T, mask in cases:
            rows.append({"what": "attention", "who": "attn", "threads": a.threads, "T": T,
                         "mask": mask, "pair": k, "sgemm_gflops": sgemm, **setting,
                         **ours[(T, mask)]})
            for c, r in theirs.items():
                x = case(r, T, mask)
                rows.append({"what": "attention", "who": "torch", "combo": combo_name(c), "T": T,
                             "mask": mask, "pair": k, "sgemm_gflops": r[0]["sgemm_gflops"],
                             **setting, **{key: x[key] for key in keys}})
    print_attention_pairs(rows)


def fb_flop_factor(T):
    """attn's forward+backward FLOPs over the forward's in bench_attention (B 1, H 8): the forward
    is two products (4 T² Dh H FLOPs, half when causal, as that benchmark counts them); backward
    makes dP, dV, dK and dQ, four more of the same size, and recomputes the scores (a fifth) when
    the weights B·H·T² exceed attn_saved_weights_limit (2^22), which it then does not keep. The
    one-pass backward plan, which B·H = 8 takes, makes no others."""
    return 3.5 if 8 * T * T > 1 << 22 else 3.0


def print_attention_pairs(rows):
    """The --pairs tables of the attention comparison, from its measurement rows (those of one
    run, or of its --csv file)."""
    rows = [r for r in rows if r.get("what") == "attention" and r.get("pair") not in (None, "")]
    if not rows:
        return
    n = max(r["pair"] for r in rows)
    combos = sorted({r["combo"] for r in rows if r["who"] == "torch"})
    torch_rows = [r for r in rows if r["who"] == "torch"]

    def measured(key):  # a --csv file stores a missing figure as an empty field
        return all(r.get(key) not in (None, "") for r in torch_rows)

    # The ways every PyTorch row measured, and those of them with a forward+backward figure.
    ways = [w for w in WAY_NAMES if measured(f"{w}_fwd_ms")]
    fb_ways = [w for w in ways if measured(f"{w}_fb_ms")]
    # One 20-wide column per way, as the rows below; "f+b: " and "fwd: " take the place of the
    # first column's leading blanks.
    fb_head = " ".join(f"{WAY_NAMES[w] + ' ÷ attn':>20s}" for w in fb_ways)
    head = " ".join(f"{WAY_NAMES[w] + ' ÷ attn':>20s}" for w in ways)
    print(f"\nIn {n} pairs ({attention_setting(rows)}; one timed run per side and figure, after a "
          f"warm-up; PyTorch {', '.join(combos)}, its best per figure and pair): ratios per pair, "
          "median (min-max)")
    print(f"     T mask    | f+b: {fb_head[5:]} | fwd: {head[5:]} | attn fwd, % of the pair's best "
          "SGEMM")
    cases = sorted({(r["T"], r["mask"]) for r in rows}, key=lambda c: (c[0], c[1] != "none"))
    room = []
    for T, mask in cases:
        ratio = {**{f"{w}_fb_ms": [] for w in fb_ways}, **{f"{w}_fwd_ms": [] for w in ways}}
        share, fb_share, ceiling = [], [], {f"{w}_fb_ms": [] for w in fb_ways}
        for k in range(1, n + 1):
            here = [r for r in rows if r["T"] == T and r["mask"] == mask and r["pair"] == k]
            o = next(r for r in here if r["who"] == "attn")
            theirs = [r for r in here if r["who"] == "torch"]
            for key in ratio:
                attn_ms = o["fused_fb_ms" if key.endswith("fb_ms") else "fused_fwd_ms"]
                ratio[key].append(min(r[key] for r in theirs) / attn_ms)
            top = max(r["sgemm_gflops"] for r in here)
            share.append(100 * o["fused_gflops"] / top)
            fb_at_sgemm_ms = fb_flop_factor(T) * o["fused_fwd_ms"] * o["fused_gflops"] / top
            fb_share.append(100 * fb_at_sgemm_ms / o["fused_fb_ms"])
            for key in ceiling:
                ceiling[key].append(min(r[key] for r in theirs) / fb_at_sgemm_ms)
        fb = " ".join(f"{spread(ratio[f'{w}_fb_ms']):>20s}" for w in fb_ways)
        fwd = " ".join(f"{spread(ratio[f'{w}_fwd_ms']):>20s}" for w in ways)
        print(f"{T:6d} {mask:8s}| {fb} | {fwd} | {spread(share, ' %', 0)}")
        room.append((T, mask, fb_share, ceiling))
    print("\nThe same pairs at the SGEMM rate: attn's f+b FLOPs (3 or 3.5 times the forward's) at "
          "the pair's best SGEMM rate, as a share of attn's f+b time, and the ratios attn would "
          "show there")
    print(f"     T mask    | attn f+b, % of best SGEMM | f+b at that rate: {fb_head.strip()}")
    for T, mask, fb_share, ceiling in room:
        at_rate = " ".join(f"{spread(ceiling[f'{w}_fb_ms']):>20s}" for w in fb_ways)
        print(f"{T:6d} {mask:8s}| {spread(fb_share, ' %', 0):>25s} | {at_rate}")


def attention(a):
    lengths = [int(t) for t in a.lengths.split(",")]
    runs, outs = rounds(
        a, lambda: torch_runs("torch_attention.py", attention_args(a, a.reps)),
        lambda: parse_bench_attention(bench(a.build, "attention", [
            "--threads", str(a.threads), *attention_args(a, a.reps)])))
    # attn's best over the rounds, figure by figure.
    attn_sgemm = max(sgemm for sgemm, _ in outs)
    ours = {}
    for key in outs[0][1]:
        each = [o[key] for _, o in outs]
        fastest = min(each, key=lambda x: x["fused_fwd_ms"])
        ours[key] = {"fused_fwd_ms": fastest["fused_fwd_ms"],
                     "fused_gflops": fastest["fused_gflops"],
                     "fused_fb_ms": min(x["fused_fb_ms"] for x in each)}
    sgemm, sgemm_combo = best(runs, lambda r: r[0], "sgemm_gflops", lower_is_better=False)
    best_sgemm = max(sgemm, attn_sgemm)
    setting = {"score": a.score, "kv_heads": a.kv_heads}
    rows = [{"what": "sgemm", "who": "attn", "threads": a.threads, "gflops": s, "round": k + 1}
            for k, (s, _) in enumerate(outs)]
    rows += [{"what": "sgemm", "who": "torch", "combo": combo_name(c), "round": c[2],
              "gflops": r[0]["sgemm_gflops"]} for c, r in runs.items()]
    print(f"\n{cpu_line()}; attn {a.threads} threads; {torch_line(runs)}, best of torch threads x "
          f"{variants_line()}")
    print(f"SGEMM n = 2048: attn::gemm {attn_sgemm:.1f} GFLOP/s, PyTorch {sgemm:.1f} "
          f"({combo_name(sgemm_combo)})")
    print(f"attention, {attention_setting([{'what': 'attention', **setting}])}")
    keys = attention_keys(runs)
    ways = [k[:-len("_fwd_ms")] for k in keys if k.endswith("_fwd_ms")]
    fb_ways = [k[:-len("_fb_ms")] for k in keys if k.endswith("_fb_ms")]
    print("     T mask    | attn fwd   f+b | "
          + " | ".join(f"{WAY_NAMES[w] + ' fwd':>10s} (t/b) " + (
              "   f+b (t/b)  " if w in fb_ways else "") for w in ways)
          + " | f+b: " + " ".join(f"{WAY_NAMES[w]:>6s}" for w in fb_ways)
          + " | fwd: " + " ".join(f"{WAY_NAMES[w]:>6s}" for w in ways)
          + " | attn % best SGEMM: fwd  f+b")
    for T, mask in itertools.product(lengths, ("none", "causal")):
        o = ours[(T, mask)]

        def select(r, T=T, mask=mask):
            return case(r, T, mask)

        f = {k: best(runs, select, k) for k in keys}
        theirs = " | ".join(
            " ".join(f"{f[k][0]:8.1f} ({combo_name(f[k][1])})"
                     for k in (f"{w}_fwd_ms", f"{w}_fb_ms") if k in f) for w in ways)
        fb = " ".join(f"{f[w + '_fb_ms'][0] / o['fused_fb_ms']:6.2f}x" for w in fb_ways)
        fwd = " ".join(f"{f[w + '_fwd_ms'][0] / o['fused_fwd_ms']:6.2f}x" for w in ways)
        # The forward's rate, and the forward+backward's FLOPs at the best SGEMM rate as a share
        # of its measured time (as the pairs' second table).
        fb_at_sgemm_ms = fb_flop_factor(T) * o["fused_fwd_ms"] * o["fused_gflops"] / best_sgemm
        print(f"{T:6d} {mask:8s}| {o['fused_fwd_ms']:8.1f} {o['fused_fb_ms']:5.1f} | {theirs} | "
              f"     {fb} |      {fwd} | {100 * o['fused_gflops'] / best_sgemm:21.0f} % "
              f"{100 * fb_at_sgemm_ms / o['fused_fb_ms']:3.0f} %")
        rows += [{"what": "attention", "who": "attn", "threads": a.threads, "T": T, "mask": mask,
                  "round": k + 1, **setting, **o[(T, mask)]} for k, (_, o) in enumerate(outs)]
        for c, r in runs.items():
            x = select(r)
            rows.append({"what": "attention", "who": "torch", "combo": combo_name(c), "T": T,
                         "mask": mask, "round": c[2], **setting, **{k: x[k] for k in keys}})
    print_rounds("SGEMM GFLOP/s", [s for s, _ in outs],
                 round_best(runs, a.rounds, "sgemm_gflops"))
    if a.pairs:
        attention_pairs(a, runs, rows)
    write_csv(a.csv, rows)


def train(a):
    rows = []
    print(f"\n{cpu_line()}; attn {a.threads} threads; PyTorch ({PYTHON}) best of torch threads x "
          f"{variants_line()}")
    table = []
    drop = ["--dropout", str(a.dropout)]
    torch_extra = ["--compile"] if a.torch_compile else []
    for cfg in a.configs.split(","):
        steps = train_steps(a, cfg)
        runs, outs = rounds(
            a, lambda: torch_runs("torch_train_step.py",
                                  ["--config", cfg, "--steps", steps] + drop + torch_extra),
            lambda: bench(a.build, "train_step", ["--config", cfg, "--threads", str(a.threads),
                                                  "--steps", steps] + drop))
        toks = [float(re.search(r"tokens/s (\d+)", out).group(1)) for out in outs]
        rss = max(float(re.search(r"peak RSS ([\d.]+) GiB", out).group(1)) for out in outs)
        tb, tc = best(runs, lambda r: r[0], "tokens_per_s", lower_is_better=False)
        trss = runs[tc][0]["peak_rss_gib"]
        table.append((cfg, toks, rss, tb, tc, trss, runs))
        rows += [{"what": "train", "who": "attn", "config": cfg, "dropout": a.dropout,
                  "threads": a.threads, "round": k + 1, "tokens_per_s": tok, "peak_rss_gib": rss}
                 for k, tok in enumerate(toks)]
        rows += [{"what": "train", "who": "torch", "config": cfg, "dropout": a.dropout,
                  "combo": combo_name(c), "round": c[2], "tokens_per_s": r[0]["tokens_per_s"],
                  "peak_rss_gib": r[0]["peak_rss_gib"], "torch": r[0].get("torch"),
                  "attention": r[0].get("attention", "manual"), "compile": r[0].get("compile")}
                 for c, r in runs.items()]
    print(f"config | attn tokens/s  RSS GiB | PyTorch {combo_header()} | "
          "best (RSS GiB)     | ratio")
    for cfg, toks, rss, tb, tc, trss, runs in table:
        each = combo_columns(runs, "tokens_per_s")
        print(f"{cfg:6s} | {max(toks):13.0f} {rss:8.2f} | {each:>33s} | "
              f"{tb:5.0f} {combo_name(tc)} ({trss:.2f}) | {max(toks) / tb:.2f}x")
        print_rounds("tokens/s", toks, round_best(runs, a.rounds, "tokens_per_s"))
    print(peer_line(table[-1][6]) + (", torch.compile" if a.torch_compile else ""))
    for cfg, _, _, _, tc, _, _ in table if a.pairs else []:
        steps = train_steps(a, cfg)
        got = pairs(a, {tc[:2]},
                    lambda c: torch_run("torch_train_step.py",
                                        ["--config", cfg, "--steps", steps] + drop
                                        + torch_extra, c),
                    lambda: bench(a.build, "train_step", ["--config", cfg, "--threads",
                                                          str(a.threads), "--steps", steps]
                                  + drop))
        for k, (out, theirs) in enumerate(got, start=1):
            tok = float(re.search(r"tokens/s (\d+)", out).group(1))
            ceiling = float(re.search(r"at that SGEMM rate: tokens/s (\d+)", out).group(1))
            (c, r), = theirs.items()
            rows.append({"what": "train", "who": "attn", "config": cfg, "dropout": a.dropout,
                         "threads": a.threads, "pair": k, "tokens_per_s": tok,
                         "at_sgemm_tokens_per_s": ceiling})
            rows.append({"what": "train", "who": "torch", "config": cfg, "dropout": a.dropout,
                         "combo": combo_name(c), "pair": k, "tokens_per_s": r[0]["tokens_per_s"]})
    print_ratio_pairs(rows)
    write_csv(a.csv, rows)


def print_ratio_pairs(rows, what="train"):
    """The --pairs lines of the training (or, with what="generate", generation) comparison, attn's
    tokens/s over PyTorch's per pair, from its measurement rows (those of one run, or of its --csv
    file)."""
    rows = [r for r in rows if r.get("what") == what and r.get("pair") not in (None, "")]
    for cfg in sorted({r["config"] for r in rows}):
        mine = sorted((r for r in rows if r["config"] == cfg), key=lambda r: r["pair"])
        ours = [r["tokens_per_s"] for r in mine if r["who"] == "attn"]
        theirs = [r for r in mine if r["who"] == "torch"]
        ratios = [tok / r["tokens_per_s"] for tok, r in zip(ours, theirs)]
        print(f"{cfg:6s} in {len(ratios)} pairs with PyTorch {theirs[0]['combo']}: attn ÷ PyTorch "
              f"{spread(ratios)} (median, min-max); per pair "
              + ", ".join(f"{x:.2f}" for x in ratios))
        # The most attn could show: the FLOPs its step performs in products, all at the SGEMM
        # rate bench_train_step measured in the same process (CSVs before it lack the column).
        ceiling = [r.get("at_sgemm_tokens_per_s") for r in mine if r["who"] == "attn"]
        if ceiling and all(isinstance(x, (int, float)) for x in ceiling):
            print(f"{'':6s} attn's tokens/s measured ÷ with every product at its SGEMM rate "
                  f"{spread([100 * t / x for t, x in zip(ours, ceiling)], ' %', 0)}; at that rate "
                  f"attn ÷ PyTorch {spread([x / r['tokens_per_s'] for x, r in zip(ceiling, theirs)])}")


def table(a):
    """Prints the --pairs tables again from a --csv file of vs_torch.py attention, train or
    generate."""
    with open(a.csv, newline="") as f:
        rows = [{k: number(v) for k, v in r.items()} for r in csv.DictReader(f)]
    if not any(r.get("pair") not in (None, "") for r in rows):
        sys.exit(f"vs_torch: {a.csv} has no --pairs measurements")
    print_attention_pairs(rows)
    print_ratio_pairs(rows)
    print_ratio_pairs(rows, "generate")


def number(v):
    """A CSV field as int or float where it is one, else the string."""
    for kind in (int, float):
        try:
            return kind(v)
        except ValueError:
            pass
    return v


def generate(a):
    rows = []
    print(f"\n{cpu_line()}; attn {a.threads} threads; PyTorch ({PYTHON}) best of torch threads x "
          f"{variants_line()}; prompt {a.prompt}, {a.tokens} new tokens, KV cache on both sides")
    print(f"config | attn tokens/s | PyTorch {combo_header()} | best  | ratio")
    later = []  # (config, PyTorch's best combination, arguments) for --pairs
    for cfg in a.configs.split(","):
        gen_args = ["--config", cfg, "--prompt", str(a.prompt), "--tokens", str(a.tokens)]
        runs, outs = rounds(
            a, lambda: torch_runs("torch_generate.py", gen_args),
            lambda: bench(a.build, "generate", gen_args + ["--threads", str(a.threads)]))
        toks = [cache_tokens_per_s(out) for out in outs]
        tb, tc = best(runs, lambda r: r[0], "tokens_per_s", lower_is_better=False)
        each = combo_columns(runs, "tokens_per_s")
        print(f"{cfg:6s} | {max(toks):13.0f} | {each:>33s} | {tb:5.0f} {combo_name(tc)} | "
              f"{max(toks) / tb:.2f}x")
        print_rounds("tokens/s", toks, round_best(runs, a.rounds, "tokens_per_s"))
        rows += [{"what": "generate", "who": "attn", "config": cfg, "threads": a.threads,
                  "round": k + 1, "tokens_per_s": tok} for k, tok in enumerate(toks)]
        rows += [{"what": "generate", "who": "torch", "config": cfg, "combo": combo_name(c),
                  "round": c[2], "tokens_per_s": r[0]["tokens_per_s"], "torch": r[0].get("torch"),
                  "attention": r[0].get("attention", "manual")} for c, r in runs.items()]
        last_runs = runs
        if a.pairs:
            later.append((cfg, tc, gen_args))
    print(peer_line(last_runs))
    for cfg, tc, gen_args in later:
        got = pairs(a, {tc[:2]}, lambda c: torch_run("torch_generate.py", gen_args, c),
                    lambda: bench(a.build, "generate", gen_args + ["--threads", str(a.threads)]))
        for k, (out, theirs) in enumerate(got, start=1):
            (c, r), = theirs.items()
            rows.append({"what": "generate", "who": "attn", "config": cfg, "threads": a.threads,
                         "pair": k, "tokens_per_s": cache_tokens_per_s(out)})
            rows.append({"what": "generate", "who": "torch", "config": cfg,
                         "combo": combo_name(c), "pair": k, "tokens_per_s": r[0]["tokens_per_s"]})
    print_ratio_pairs(rows, "generate")
    write_csv(a.csv, rows)


def cache_tokens_per_s(out):
    """Tokens/s of bench_generate's cached generation, from its output."""
    return float(re.search(r"^\s+cache\s+([\d.]+) tokens/s", out, re.M).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    for name in ("attention", "train", "generate"):
        p = sub.add_parser(name)
        p.add_argument("--build", default="build/release", help="attn build folder")
        p.add_argument("--threads", type=int, default=2, help="attn's threads (default 2)")
        p.add_argument("--csv", help="also write every measurement here")
        p.add_argument("--others", type=float, default=0.1,
                       help="cores others may use during a run (default 0.1; a large value "
                            "turns the quiet check off, for trying the script out)")
        p.add_argument("--avx2", action="store_true",
                       help="AVX2 code paths on both sides (see above)")
        p.add_argument("--python", default=DEBIAN_PYTHON,
                       help="the interpreter whose torch runs the PyTorch side (default Debian's "
                            "/usr/bin/python3 with python3-torch; build/oracle-venv/bin/python for "
                            "PyPI's current torch)")
        p.add_argument("--openblas-threads", default="1,2",
                       help="OPENBLAS_NUM_THREADS values to try (default 1,2; 1 alone for a torch "
                            "that does not use OpenBLAS, as PyPI's, which uses MKL)")
        p.add_argument("--allocators", default="glibc",
                       help="malloc implementations to try, comma-separated: glibc, jemalloc, "
                            "tcmalloc (preloaded; Debian's libjemalloc2, libtcmalloc-minimal4)")
        p.add_argument("--rounds", type=int, default=1,
                       help="repeat the comparison, alternating which side goes first, and take "
                            "each side's best (default 1; see above)")
        p.add_argument("--pairs", type=int, default=0,
                       help="then compare attn and PyTorch's best combinations in N pairs of "
                            "runs back to back, ratio per pair (default 0; see above)")
        if name == "attention":
            p.add_argument("--lengths", default="1024,4096")
            p.add_argument("--reps", type=int, default=5)
            p.add_argument("--score", choices=("scaled_dot", "alibi", "rotary"),
                           default="scaled_dot",
                           help="the score on both sides (bench_attention --score)")
            p.add_argument("--kv-heads", type=int, default=8,
                           help="key/value heads of the 8 (grouped-query attention; divides 8)")
        else:
            p.add_argument("--configs", default="A,B")
        if name == "train":
            p.add_argument("--dropout", type=float, default=0.0,
                           help="train with this dropout on both sides (default 0, as the "
                                "configurations)")
            p.add_argument("--steps", type=int, default=0,
                           help="timed training steps of each side (default 10 for A, 5 for B)")
            p.add_argument("--torch-compile", action="store_true",
                           help="PyTorch's model through torch.compile (torch >= 2.0)")
        if name == "generate":
            p.add_argument("--prompt", type=int, default=16)
            p.add_argument("--tokens", type=int, default=256)
    p = sub.add_parser("table", help="print the --pairs tables of a --csv file again")
    p.add_argument("--csv", required=True,
                   help="a --csv file of attention, train or generate --pairs")
    a = ap.parse_args()
    if a.what == "table":
        return table(a)
    if a.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {a.rounds}")
    if a.what == "attention" and (a.kv_heads < 1 or 8 % a.kv_heads):
        ap.error(f"--kv-heads must divide the 8 heads, got {a.kv_heads}")
    if getattr(a, "pairs", 0) < 0:
        ap.error(f"--pairs must be 0 or more, got {a.pairs}")
    if not 0.0 <= getattr(a, "dropout", 0.0) <= 0.95:
        ap.error(f"--dropout must be in [0, 0.95], got {a.dropout}")
    global OTHERS, AVX2, PYTHON, VARIANTS
    OTHERS = a.others
    AVX2 = a.avx2
    PYTHON = a.python
    allocators = a.allocators.split(",")
    for al in allocators:
        if al not in ALLOCATORS:
            ap.error(f"--allocators: {al!r} is not one of {', '.join(ALLOCATORS)}")
        if ALLOCATORS[al] and not os.path.exists(ALLOCATORS[al]):
            ap.error(f"--allocators {al}: {ALLOCATORS[al]} not found (apt install "
                     f"{'libjemalloc2' if al == 'jemalloc' else 'libtcmalloc-minimal4'})")
    try:
        openblas = [int(t) for t in a.openblas_threads.split(",")]
    except ValueError:
        ap.error(f"--openblas-threads: {a.openblas_threads!r} is not a list of integers")
    VARIANTS = {variant_label(ob, al): (ob, al) for ob in openblas for al in allocators}
    check_build(a.build)
    {"attention": attention, "train": train, "generate": generate}[a.what](a)


if __name__ == "__main__":
    main()
