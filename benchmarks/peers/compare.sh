#!/usr/bin/env bash
# benchmarks/peers/compare.sh: attn against both PyTorch peers (benchmarks/peers/setup.sh) on the
# rows of docs/performance.md's summary table, one vs_torch.py run per row and peer, each figure
# PyTorch's best over its thread counts and allocators (and OpenBLAS threads for Debian's).
#
#   benchmarks/peers/compare.sh OUT_DIR [BUILD_DIR]    # BUILD_DIR default build/release
#
# Writes OUT_DIR/<row>-<peer>.txt (the table) and .csv (every measurement); refuses an OUT_DIR
# that exists. Runs on a quiet machine (vs_torch.py waits for one and repeats a disturbed run);
# about 30 minutes on two cores.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${1:?usage: compare.sh OUT_DIR [BUILD_DIR]}
build=${2:-$root/build/release}
[[ -e "$out" ]] && { echo "compare.sh: $out exists: choose another OUT_DIR" >&2; exit 1; }
mkdir -p "$out"
venv=$root/build/oracle-venv/bin/python
[[ -x "$venv" ]] || { echo "compare.sh: no $venv (run benchmarks/peers/setup.sh)" >&2; exit 1; }
vs=("$venv" "$root/benchmarks/vs_torch.py")
pypi=(--python "$venv" --openblas-threads 1 --allocators glibc,jemalloc,tcmalloc)
debian=(--python /usr/bin/python3 --openblas-threads 1,2 --allocators glibc)
for peer in pypi debian; do
  declare -n args=$peer
  "${vs[@]}" attention --build "$build" "${args[@]}" --lengths 1024,4096 --reps 5 \
    --csv "$out/attention-$peer.csv" | tee "$out/attention-$peer.txt"
  "${vs[@]}" train --build "$build" "${args[@]}" --configs A,B --csv "$out/train-$peer.csv" |
    tee "$out/train-$peer.txt"
  "${vs[@]}" generate --build "$build" "${args[@]}" --configs A,B \
    --csv "$out/generate-$peer.csv" | tee "$out/generate-$peer.txt"
done
# torch.compile'd training (PyPI's torch; compiled before the timing), with jemalloc.
"${vs[@]}" train --build "$build" --python "$venv" --openblas-threads 1 --allocators jemalloc \
  --torch-compile --configs A,B --csv "$out/train-pypi-compiled.csv" |
  tee "$out/train-pypi-compiled.txt"
