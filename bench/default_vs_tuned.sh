#!/usr/bin/env bash
# What a new user gets against the hand-tuned set-up, side by side in one run: the default build
# (`make`: portable, trident's kernels picked per CPU at run time, OpenBLAS's kernels chosen at
# start-up), no environment variables, against a -DTRIDENT_NATIVE=ON build (-march=native) run
# with OPENBLAS_CORETYPE set by hand (SkylakeX, or Cooperlake where the CPU has AVX512-BF16).
#
# Usage: bench/default_vs_tuned.sh [--shapes LIST] [--steps N] [--repeat R] [--precision fp32|bf16]
#   shapes as bench/cpu_gpt2.sh (default small,long: GPT-2 124M at 4 x 64 and 8 x 256); the two
#   alternate R times (default 3) per shape; prints each pair's tokens/s and the median ratio.
# Environment: BUILD (default build-bench), BUILD_NATIVE (default build-native).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shapes=small,long steps=6 repeat=3 precision=fp32
while [ $# -gt 0 ]; do
  case $1 in
    --shapes) shapes=$2 ;; --steps) steps=$2 ;; --repeat) repeat=$2 ;; --precision) precision=$2 ;;
    *) echo "default_vs_tuned.sh: unknown option $1" >&2; exit 2 ;;
  esac; shift 2
done
build=${BUILD:-$root/build-bench} native=${BUILD_NATIVE:-$root/build-native}
for b in "$build:OFF" "$native:ON"; do
  dir=${b%:*}
  if [ ! -x "$dir/trident" ]; then
    cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DTRIDENT_NATIVE="${b#*:}" >/dev/null
    cmake --build "$dir" -j "$(nproc)" >/dev/null
  fi
done
core=SkylakeX
grep -q ' avx512_bf16' /proc/cpuinfo && core=Cooperlake
grep -q ' avx512f' /proc/cpuinfo || core=
tokens() { grep -o '[0-9.]* tokens/s' | head -1 | cut -d' ' -f1; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "default: $build, no environment; tuned: $native (-march=native), OPENBLAS_CORETYPE=${core:-(unset)}"
IFS=, read -r -a list <<<"$shapes"
for shape in "${list[@]}"; do
  ratios=()
  echo
  echo "== $shape, $precision"
  for ((r = 1; r <= repeat; r++)); do
    d=$(env -u OPENBLAS_CORETYPE BUILD="$build" "$root/bench/cpu_gpt2.sh" --no-peer --shapes "$shape" --steps "$steps" \
        --precision "$precision" | tokens)
    t=$(env ${core:+OPENBLAS_CORETYPE=$core} BUILD="$native" "$root/bench/cpu_gpt2.sh" --no-peer --shapes "$shape" \
        --steps "$steps" --precision "$precision" | tokens)
    ratio=$(awk "BEGIN{printf \"%.3f\", $d/$t}")
    ratios+=("$ratio")
    echo "pair $r: default $d tokens/s, tuned $t tokens/s: $ratio"
  done
  echo "median ratio (default / tuned): $(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END{print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')"
done
