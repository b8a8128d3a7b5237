#!/usr/bin/env bash
# Shared by the benchmarks: tinyshakespeare tokenized with GPT-2's BPE into WORK (once).
# Usage: bench/shakespeare.sh TRIDENT DATA_DIR WORK -> prints the dataset prefix.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
trident=$1 data=$2 work=$3
mkdir -p "$work"
if [ ! -f "$work/ts_text_document.idx" ]; then
  "$root/scripts/text-to-jsonl.sh" "$data/tinyshakespeare.txt" "$work/ts.jsonl"
  "$trident" preprocess --input "$work/ts.jsonl" --output-prefix "$work/ts" --vocab-file "$data/gpt2/vocab.json" \
    --merge-file "$data/gpt2/merges.txt" --append-eod >/dev/null 2>&1
fi
echo "$work/ts_text_document"
