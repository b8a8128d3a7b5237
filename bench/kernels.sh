#!/usr/bin/env bash
# Kernel micro-benchmark (bench/bench_kernels.c) at one GPT layer's shapes, on the CPU backend:
# builds it against the core library of $BUILD (default build-bench, configured with
# -DTRIDENT_NATIVE=${NATIVE:-ON} when it has no library yet) and runs it with the given options
# (--hidden --heads --mbs --seq --vocab --threads --reps --adam-mparams).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$root/build-bench}
if [ ! -f "$build/libtrident_core.a" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTRIDENT_NATIVE="${NATIVE:-ON}" >/dev/null
  cmake --build "$build" -j "$(nproc)" >/dev/null
fi
blas=$(sed -n 's/^OPENBLAS_LIB:FILEPATH=//p' "$build/CMakeCache.txt")
dnnl=$(sed -n 's/^DNNL_LIB:FILEPATH=//p' "$build/CMakeCache.txt") # the bf16 GEMMs' oneDNN, when found
flags=$(sed -n 's/^C_FLAGS = //p' "$build/CMakeFiles/trident_core.dir/flags.make")
# shellcheck disable=SC2086
cc $flags -I"$root/include" -I"$root/src" -o "$build/bench_kernels" "$root/bench/bench_kernels.c" \
  "$build/libtrident_core.a" "$blas" $dnnl -Wl,-rpath,"$(dirname "$blas")" -lm
exec "$build/bench_kernels" "$@"
