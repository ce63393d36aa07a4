#!/usr/bin/env bash
# benchmarks/peers/setup.sh: what the benchmarks compare attn with, installed and recorded.
#
#   benchmarks/peers/setup.sh        # idempotent: installs what is missing, then records versions
#
# * PyPI's current PyTorch (with transformers and tokenizers) in build/oracle-venv, made by
#   scripts/oracle-venv with its pinned versions: the benchmarks use the oracle's environment
#   rather than a second copy of it. PyPI's Linux wheel of torch is its CUDA build and does not
#   import without its CUDA libraries (installed with --no-deps, `import torch` fails on
#   libcufile.so.0), and the CPU-only wheels are published outside PyPI, which these machines do
#   not reach: so the smallest install that runs on the CPU is the whole wheel, about 5.6 GB.
# * Debian's python3-torch (1.13), the earlier baseline, kept as a second column.
# * The allocators commonly preloaded to speed PyTorch up on the CPU, which vs_torch.py --allocators
#   preloads: Debian's libjemalloc2 and libtcmalloc-minimal4.
# Writes build/peers/versions.txt: each peer's version, for the tables' commands.
# Never used by the library, its build or its tests.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

debian=(python3-torch libjemalloc2 libtcmalloc-minimal4)
missing=()
for p in "${debian[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if ((EUID == 0)); then sudo=(); else sudo=(sudo); fi
  echo "peers/setup.sh: installing ${missing[*]}"
  "${sudo[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends \
    "${missing[@]}"
fi
bash "$root/scripts/oracle-venv"

mkdir -p "$root/build/peers"
out="$root/build/peers/versions.txt"
{
  echo "# benchmarks/peers/setup.sh, $(date -u +%Y-%m-%dT%H:%MZ)"
  "$root/build/oracle-venv/bin/python" -c \
    'import torch, transformers, tokenizers; print("pypi: torch", torch.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__, "(build/oracle-venv/bin/python)")'
  /usr/bin/python3 -c 'import torch; print("debian: torch", torch.__version__, "(/usr/bin/python3)")'
  for p in libjemalloc2 libtcmalloc-minimal4 libopenblas0-openmp; do
    echo "debian: $p $(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || echo missing)"
  done
} > "$out.tmp"
mv "$out.tmp" "$out"
cat "$out"
