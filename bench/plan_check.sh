#!/usr/bin/env bash
# trident plan against measured runs on this machine: calibrate (one device per rank, two ranks of
# one thread), then train a GPT (8 layers, hidden 256, seq 128, global batch 16) in seven layouts
# of one or two ranks — one rank, one rank with full recomputation, tp 2, pp 2 (1F1B), pp 2
# interleaved, dp 2, dp 2 with the distributed optimizer — and print, per layout, the measured
# median time per iteration (the first left out) and peak RSS against plan's prediction
# (`trident plan --cluster <calibrated> --json` with the same flags).
# Usage: bench/plan_check.sh [ITERS]   Environment: BUILD (default build), WORK (default $BUILD/plan_check).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$root/build}
T=$build/trident
work=${WORK:-$build/plan_check}
iters=${1:-10}
mkdir -p "$work"
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1
data=${SHARED:-$root/../shared/data}
if [ ! -f "$work/ts_text_document.idx" ]; then
  "$root/scripts/text-to-jsonl.sh" "$data/tinyshakespeare.txt" "$work/ts.jsonl"
  "$T" preprocess --input "$work/ts.jsonl" --output-prefix "$work/ts" --vocab-file "$data/gpt2/vocab.json" \
    --merge-file "$data/gpt2/merges.txt" --append-eod >/dev/null
fi
mpirun --oversubscribe --bind-to none -np 2 "$T" plan --calibrate >"$work/cluster.json"
echo "calibrated: $(tr -d '\n\t' <"$work/cluster.json" | cut -c1-400)"
MODEL=(--num-layers 8 --hidden-size 256 --num-attention-heads 8 --seq-length 128 --max-position-embeddings 128
       --global-batch-size 16)
TRAIN=(--data-path "$work/ts_text_document" --vocab-file "$data/gpt2/vocab.json" --merge-file "$data/gpt2/merges.txt"
       --split 100,0,0 --train-iters "$iters" --eval-iters 0 --lr 1e-4 --log-interval 1000 --hidden-dropout 0
       --attention-dropout 0 --make-vocab-size-divisible-by 128)
printf "%-28s %10s %10s %7s %10s %10s %7s\n" layout "measured" "predicted" error "RSS MiB" "predicted" error
run() { # name np flags...
  local name=$1 np=$2; shift 2
  rm -f "$work/$name.jsonl"
  mpirun --oversubscribe --bind-to none -np "$np" "$T" train "${MODEL[@]}" "${TRAIN[@]}" "$@" \
    --metrics-file "$work/$name.jsonl" >"$work/$name.log" 2>&1 || { echo "$name: train failed, see $work/$name.log"; return; }
  local ms rss pred
  ms=$(tail -n +2 "$work/$name.jsonl" | grep -o '"elapsed_ms": [0-9.]*' | awk '{print $2}' | sort -n |
       awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}')
  rss=$(grep -o 'peak memory (RSS), stage [0-9]*: [0-9.]* MiB measured' "$work/$name.log" | awk '{print $6}' | sort -n | tail -n 1)
  pred=$("$T" plan "${MODEL[@]}" --vocab-size 50257 --make-vocab-size-divisible-by 128 --cluster "$work/cluster.json" \
         --num-gpus "$np" --json "$@" 2>&1) || true
  local ps pm
  ps=$(grep -o '"iteration_s": [0-9.e+-]*' <<<"$pred" | awk '{print $2}')
  pm=$(grep -o '"memory_gib_per_gpu": [0-9.e+-]*' <<<"$pred" | awk '{print $2 * 1024}')
  awk -v n="$name" -v ms="$ms" -v ps="$ps" -v rss="$rss" -v pm="$pm" 'BEGIN {
    printf "%-28s %8.1f ms %8.1f ms %+6.1f%% %10.1f %10.1f %+6.1f%%\n", n, ms, ps * 1e3, 100 * (ps * 1e3 - ms) / ms,
      rss, pm, 100 * (pm - rss) / rss }'
}
run one_rank 1 --micro-batch-size 2
run one_rank_full_recompute 1 --micro-batch-size 2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
run tp2 2 --micro-batch-size 2 --tensor-model-parallel-size 2
run pp2_1f1b 2 --micro-batch-size 2 --pipeline-model-parallel-size 2
run pp2_interleaved 2 --micro-batch-size 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2
run dp2 2 --micro-batch-size 2
run dp2_distopt 2 --micro-batch-size 2 --use-distributed-optimizer
