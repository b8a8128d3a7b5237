#!/usr/bin/env bash
# The JSON-line reader of preprocess against cJSON (bench/prep_json.c) on a JSONL file of
# --mb MB made from tinyshakespeare repeated (scripts/text-to-jsonl.sh, one document per
# paragraph), in $WORK (default $BUILD/bench): builds against the core library of $BUILD
# (default build-bench, configured like bench/kernels.sh when it has no library yet). With
# --whole it also times `trident preprocess` (GPT-2 BPE, --workers 2) on that file.
# Usage: prep_json.sh [--mb 200] [--reps 3] [--whole]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$root/build-bench}
work=${WORK:-$build/bench}
data=${TRIDENT_SHARED_DATA:-$root/../shared/data}
mb=200 reps=3 whole=0
while [ $# -gt 0 ]; do
  case $1 in
    --mb) mb=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --whole) whole=1; shift ;;
    *) echo "prep_json.sh: unknown option $1 (see the usage at the top of the script)" >&2; exit 2 ;;
  esac
done
if [ ! -f "$build/bench/prep_json" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTRIDENT_NATIVE="${NATIVE:-ON}" >/dev/null
  cmake --build "$build" -j "$(nproc)" >/dev/null
fi
mkdir -p "$work"
jsonl=$work/shakespeare_${mb}mb.jsonl
if [ ! -f "$jsonl" ]; then
  "$root/scripts/text-to-jsonl.sh" "$data/tinyshakespeare.txt" "$work/shakespeare.jsonl"
  : > "$jsonl.tmp"
  while [ "$(stat -c %s "$jsonl.tmp")" -lt $((mb * 1000000)) ]; do cat "$work/shakespeare.jsonl" >> "$jsonl.tmp"; done
  mv "$jsonl.tmp" "$jsonl"
fi
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/bench/prep_json" "$jsonl" --reps "$reps"
if [ "$whole" = 1 ]; then
  /usr/bin/time -f "trident preprocess: %e s wall, %U s user, %M KB peak" "$build/trident" preprocess \
    --input "$jsonl" --output-prefix "$work/prep_bench" --vocab-file "$data/gpt2/vocab.json" \
    --merge-file "$data/gpt2/merges.txt" --tokenizer-type GPT2BPETokenizer --workers 2 --append-eod 2>&1 | tail -3
fi
