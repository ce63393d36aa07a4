#!/usr/bin/env bash
# benchmarks/compile_time.sh: how long a user waits for the compiler. Compiles a fixed list of
# translation units twice, header-only and against the compiled part (-DATTN_COMPILED, what
# linking attn::compiled adds), and prints wall seconds, CPU seconds and the compiler's peak
# memory for each, plus what the compiled part (src/*.cpp) costs once.
# A benchmark, not a test: nothing is asserted. Run it on a quiet machine; the load average at
# the start and the end is printed with the table.
#
#   benchmarks/compile_time.sh [--reps N] [--only NAME]
#   CXX=clang++ benchmarks/compile_time.sh
#
# Flags are those of the presets: -O2 for the libraries' own programs (the `ci` preset), -O3 for
# char_gpt (the `release` preset, what scripts/demo builds), -march=native -fopenmp, no -g.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

reps=1
only=""
while (($#)); do
  case "$1" in
    --reps) reps="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compile_time.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$reps" =~ ^[1-9][0-9]*$ ]] || { echo "compile_time.sh: --reps needs a positive whole number, got '$reps'" >&2; exit 2; }

cxx=${CXX:-g++}
command -v "$cxx" >/dev/null || { echo "compile_time.sh: compiler '$cxx' not found" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "compile_time.sh: needs /usr/bin/time (Debian package time)" >&2; exit 2; }

common=(-std=c++20 -march=native -fopenmp -Iinclude -isystem /usr/include/eigen3)
# As CMake's default ATTN_BLAS=OpenBLAS does when Debian's OpenMP build of OpenBLAS is installed.
openblas_inc=/usr/include/x86_64-linux-gnu/openblas-openmp
if [[ -f "$openblas_inc/cblas.h" ]]; then
  common+=(-DATTN_USE_OPENBLAS -isystem "$openblas_inc")
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The translation units: name, extra flags, source.
printf '#include <attn/attn.hpp>\nint main() {}\n' >"$work/include_only.cpp"
# The README's downstream example: its first C++ block.
awk '/^```cpp/ { inside = 1; next } /^```/ { if (inside) exit } inside' README.md >"$work/readme_example.cpp"
[[ -s "$work/readme_example.cpp" ]] || { echo "compile_time.sh: no C++ block found in README.md" >&2; exit 1; }
units=(
  "include attn.hpp, empty main|-O2|$work/include_only.cpp"
  "README example (MultiHeadAttention + AdamW)|-O2|$work/readme_example.cpp"
  "examples/char_gpt/main.cpp (command line)|-O3|examples/char_gpt/main.cpp"
  "examples/char_gpt/train.cpp (the model)|-O3|examples/char_gpt/train.cpp"
  "tests/autodiff/test_gradients.cpp|-O2|tests/autodiff/test_gradients.cpp"
  "tests/attention/test_learned_scores.cpp|-O2|tests/attention/test_learned_scores.cpp"
)

# measure <flags> <source>: prints "wall cpu peak_MB" (the minimum over the repetitions).
measure() {
  local flags=$1 src=$2 best=""
  for ((r = 0; r < reps; ++r)); do
    # shellcheck disable=SC2086
    if ! /usr/bin/time -f '%e %U %S %M' -o "$work/time" "$cxx" "${common[@]}" $flags -c "$src" \
        -o "$work/unit.o" 2>"$work/err"; then
      echo "compile_time.sh: $src failed to compile:" >&2
      head -20 "$work/err" >&2
      exit 1
    fi
    local line
    line=$(awk '{ printf "%.1f %.1f %.0f", $1, $2 + $3, $4 / 1024 }' "$work/time")
    if [[ -z "$best" ]] || awk -v a="$line" -v b="$best" 'BEGIN { split(a, x); split(b, y); exit !(x[1] < y[1]) }'; then
      best=$line
    fi
  done
  echo "$best"
}

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
isa=AVX2
grep -q avx512f /proc/cpuinfo && isa=AVX-512
echo "compile_time.sh: $($cxx --version | head -1); $cpu ($isa), $(nproc) cores; best of $reps"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
printf '| %-44s | %-24s | %-24s |\n' "translation unit" "header-only: wall / CPU / MB" "compiled part: wall / CPU / MB"
printf '| %-44s | %-24s | %-24s |\n' "---" "---" "---"
gpt_units=()
for unit in "${units[@]}"; do
  IFS='|' read -r name flags src <<<"$unit"
  [[ -n "$only" && "$name" != *"$only"* ]] && continue
  read -r w1 c1 m1 < <(measure "$flags" "$src")
  read -r w2 c2 m2 < <(measure "$flags -DATTN_COMPILED" "$src")
  printf '| %-44s | %6s s / %6s s / %5s | %6s s / %6s s / %5s |\n' "$name" "$w1" "$c1" "$m1" "$w2" "$c2" "$m2"
  # char_gpt is two units that a parallel build compiles side by side: its CPU time is their sum,
  # its wall time on two cores the larger of the two.
  if [[ "$name" == examples/char_gpt/* ]]; then
    gpt_units+=("$w1 $c1 $w2 $c2")
  fi
done
if ((${#gpt_units[@]} == 2)); then
  read -r a1 b1 a2 b2 <<<"${gpt_units[0]}"
  read -r x1 y1 x2 y2 <<<"${gpt_units[1]}"
  printf '| %-44s | %6s s / %6s s / %5s | %6s s / %6s s / %5s |\n' "char_gpt, both units (wall: the larger)" \
    "$(awk -v a="$a1" -v b="$x1" 'BEGIN { print (a > b ? a : b) }')" \
    "$(awk -v a="$b1" -v b="$y1" 'BEGIN { print a + b }')" "-" \
    "$(awk -v a="$a2" -v b="$x2" 'BEGIN { print (a > b ? a : b) }')" \
    "$(awk -v a="$b2" -v b="$y2" 'BEGIN { print a + b }')" "-"
fi
# What the compiled part costs, once per build of attn::compiled.
total_w=0 total_c=0 peak=0
shopt -s nullglob
for src in src/*.cpp; do
  read -r w c m < <(measure "-O2 -DATTN_COMPILED" "$src")
  total_w=$(awk -v a="$total_w" -v b="$w" 'BEGIN { print a + b }')
  total_c=$(awk -v a="$total_c" -v b="$c" 'BEGIN { print a + b }')
  ((m > peak)) && peak=$m
done
printf '| %-44s | %-24s | %6s s / %6s s / %5s |\n' "attn::compiled itself (src/*.cpp, once)" "-" "$total_w" "$total_c" "$peak"
echo
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
