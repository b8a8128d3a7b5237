#!/usr/bin/env bash
# Kernel micro-benchmark (bench/bench_kernels.c) at one GPT layer's shapes, on the CPU backend:
# builds it against the core library of $BUILD (default build-bench, configured with
# -DTRIDENT_NATIVE=${NATIVE:-ON} when it has no library yet) and runs it with the given options
# (--hidden --heads --mbs --seq --vocab --threads --reps --adam-mparams).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$root/build-bench}
if [ ! -f "$build/bench/bench_kernels" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTRIDENT_NATIVE="${NATIVE:-ON}" >/dev/null
  cmake --build "$build" -j "$(nproc)" >/dev/null
fi
exec "$build/bench/bench_kernels" "$@"
