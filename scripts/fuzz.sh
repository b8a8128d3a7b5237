#!/usr/bin/env bash
# Builds every tests/fuzz/fuzz_<name>.c as a libFuzzer binary (clang, -fsanitize=fuzzer,address,
# undefined; CMake option TRIDENT_FUZZ) in BUILD (default build-fuzz) and runs each for
# FUZZ_SECONDS (default 60), starting from its seeds in tests/fuzz/corpus/<name>/.
# New interesting inputs go to BUILD/fuzz-corpus/<name>/ (kept between runs); crashing inputs to
# BUILD/fuzz-artifacts/<name>/. Exits non-zero if any harness found a crash.
# Environment: FUZZ_SECONDS, FUZZ_TARGETS (space-separated names, default all), FUZZ_FLAGS
# (extra libFuzzer flags, e.g. "-jobs=2 -workers=2"), JOBS (build parallelism).
set -euo pipefail
build=${1:-build-fuzz}
secs=${FUZZ_SECONDS:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

command -v clang >/dev/null || { echo "fuzz: clang not found; run scripts/deps.sh --fuzz" >&2; exit 1; }
cmake -S . -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Release -DTRIDENT_FUZZ=ON >/dev/null
build=$(cd "$build" && pwd)

names=()
if [ -n "${FUZZ_TARGETS:-}" ]; then
  read -r -a names <<<"$FUZZ_TARGETS"
else
  for src in tests/fuzz/fuzz_*.c; do
    [ -e "$src" ] || continue
    n=$(basename "$src" .c); names+=("${n#fuzz_}")
  done
fi
[ ${#names[@]} -gt 0 ] || { echo "fuzz: no tests/fuzz/fuzz_*.c harnesses" >&2; exit 1; }
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target "${names[@]/#/fuzz_}"

failed=()
for name in "${names[@]}"; do
  corpus="$build/fuzz-corpus/$name"; artifacts="$build/fuzz-artifacts/$name"
  mkdir -p "$corpus" "$artifacts" "$build/testtmp"
  seeds=(); [ -d "tests/fuzz/corpus/$name" ] && seeds=("tests/fuzz/corpus/$name")
  echo "fuzz: $name for ${secs}s (corpus $corpus)" >&2
  # The first folder receives new inputs; the committed seeds are only read.
  # shellcheck disable=SC2086
  if ! TMPDIR="$build/testtmp" "$build/tests/fuzz_$name" -max_total_time="$secs" -timeout=10 \
       -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/" ${FUZZ_FLAGS:-} \
       "$corpus" "${seeds[@]}"; then
    failed+=("$name")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: crashes in: ${failed[*]} (inputs under $build/fuzz-artifacts/; replay one with" \
       "$build/tests/fuzz_<name> <file>)" >&2
  exit 1
fi
echo "fuzz: ${names[*]}: no crashes in ${secs}s each" >&2
