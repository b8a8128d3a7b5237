#!/usr/bin/env bash
# The largest GPT that trains on this machine (bench/largest_model.c, by trident's memory
# prediction), then, with --verify, each answer trained for one iteration on that many ranks to
# set the prediction against the measured peak RSS.
# Usage: bench/largest_model.sh [--ranks 8] [--budget-gib 22] [--seq 1024] [--gbs 16] [--verify]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$root/build}
[ -f "$build/bench/largest_model" ] || make -C "$root" build >/dev/null
verify=0 args=()
while [ $# -gt 0 ]; do
  case $1 in --verify) verify=1; shift ;; *) args+=("$1" "$2"); shift 2 ;; esac
done
"$build/bench/largest_model" "${args[@]}" | tee "$build/largest_model.txt"
[ $verify -eq 1 ] || exit 0
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
data=$("$root/scripts/get-data.sh")
work=${WORK:-$build/bench}
ranks=8 seq=1024 gbs=16
for ((i = 0; i < ${#args[@]}; i += 2)); do
  case ${args[i]} in --ranks) ranks=${args[i+1]} ;; --seq) seq=${args[i+1]} ;; --gbs) gbs=${args[i+1]} ;; esac
done
"$root/bench/shakespeare.sh" "$build/trident" "$data" "$work" >/dev/null
n=0
grep 'parameters:' "$build/largest_model.txt" | while read -r line; do
  n=$((n + 1))
  L=$(sed -E 's/.*: ([0-9]+) layers x.*/\1/' <<<"$line"); h=$(sed -E 's/.* layers x ([0-9]+) .*/\1/' <<<"$line")
  tp=$(sed -E 's/.*tp ([0-9]+) x.*/\1/' <<<"$line"); pp=$(sed -E 's/.*pp ([0-9]+) x.*/\1/' <<<"$line")
  feats=()
  grep -q 'distributed optimizer' <<<"$line" && feats+=(--use-distributed-optimizer)
  grep -q 'sequence parallel' <<<"$line" && [ "$tp" -gt 1 ] && feats+=(--sequence-parallel)
  grep -q 'full recompute' <<<"$line" && feats+=(--recompute-granularity full --recompute-method uniform --recompute-num-layers 1)
  log="$work/largest-$n.log"
  echo "== $line"
  OMP_NUM_THREADS=1 mpirun --oversubscribe --bind-to none -np "$ranks" "$build/trident" train \
    --data-path "$work/ts_text_document" --vocab-file "$data/gpt2/vocab.json" --merge-file "$data/gpt2/merges.txt" \
    --split 100,0,0 --train-iters 1 --eval-iters 0 --lr 1e-4 --peak-tflops 1 --make-vocab-size-divisible-by 128 \
    --num-layers "$L" --hidden-size "$h" --num-attention-heads $((h / 128)) --seq-length "$seq" \
    --micro-batch-size 1 --global-batch-size "$gbs" --tensor-model-parallel-size "$tp" \
    --pipeline-model-parallel-size "$pp" "${feats[@]}" >"$log" 2>&1 || { echo "   failed: see $log"; tail -3 "$log"; continue; }
  grep -E 'peak memory \(RSS\), stage|done:' "$log" | sed 's/^/   /'
done
