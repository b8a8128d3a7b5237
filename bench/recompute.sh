#!/usr/bin/env bash
# Activation recomputation: step time and memory of none, selective and full recomputation, one
# rank, same data and model, run back to back (alternating when --repeat > 1).
#
# Usage: bench/recompute.sh [--shape LAYERSxHIDDENxHEADS:MBSxSEQ] [--steps N] [--repeat R]
#                           [--modes LIST]
#   --shape   default 12x256x4:4x256 (the step-time figure of docs/memory.md); 12x768x12:4x1024 is
#             GPT-2 124M at the memory figure's shape (about 6 GB of RSS and a minute a step per mode)
#   --steps   steps per run, default 6; the first warms up and is left out of the times
#   --repeat  rounds over the modes, default 1; the median over rounds of each mode's median step
#   --modes   comma-separated from none, selective, full (uniform, 1 layer per group), full2
#             (uniform, 2), block (block, half the layers); default none,selective,full
# Prints per mode: median step time, its ratio to none, the activation bytes per micro-batch and
# shared (from the start-up log, gpt_create's accounting) and the run's peak RSS.
# Environment: BUILD (default build, the tree's Release build), WORK (default $BUILD/bench-recompute).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shape=12x256x4:4x256 steps=6 repeat=1 modes=none,selective,full
while [ $# -gt 0 ]; do
  case $1 in
    --shape) shape=$2 ;; --steps) steps=$2 ;; --repeat) repeat=$2 ;; --modes) modes=$2 ;;
    *) echo "recompute.sh: unknown option $1" >&2; exit 2 ;;
  esac; shift 2
done
build=${BUILD:-$root/build}
[ -x "$build/trident" ] || { cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null; cmake --build "$build" -j "$(nproc)" >/dev/null; }
data=$("$root/scripts/get-data.sh")
work=${WORK:-$build/bench-recompute}
mkdir -p "$work"
tok=(--vocab-file "$data/gpt2/vocab.json" --merge-file "$data/gpt2/merges.txt")
"$root/bench/shakespeare.sh" "$build/trident" "$data" "$work" >/dev/null
IFS=x: read -r layers hidden heads mbs seq <<<"$shape"

mode_flags() {
  case $1 in
    none) ;;
    selective) echo "--recompute-granularity selective" ;;
    full) echo "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1" ;;
    full2) echo "--recompute-granularity full --recompute-method uniform --recompute-num-layers 2" ;;
    block) echo "--recompute-granularity full --recompute-method block --recompute-num-layers $((layers / 2))" ;;
    *) echo "recompute.sh: unknown mode $1" >&2; exit 2 ;;
  esac
}

run() { # mode round -> prints the median step in ms
  local log=$work/$1-$2.log metrics=$work/$1-$2.jsonl
  rm -f "$metrics"
  # shellcheck disable=SC2046
  "$build/trident" train --data-path "$work/ts_text_document" "${tok[@]}" --split 100,0,0 \
    --num-layers "$layers" --hidden-size "$hidden" --num-attention-heads "$heads" --micro-batch-size "$mbs" \
    --seq-length "$seq" --max-position-embeddings "$seq" --global-batch-size "$mbs" --train-iters "$steps" \
    --eval-iters 0 --lr 1e-4 --metrics-file "$metrics" --log-interval 1000 $(mode_flags "$1") > "$log" 2>&1
  python3 - "$metrics" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows = rows[1:] if len(rows) > 1 else rows  # the first step warms up
print(f'{statistics.median(r["elapsed_ms"] for r in rows):.1f}')
PY
}

echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); shape $shape, $steps steps, $repeat round(s)"
IFS=, read -r -a mlist <<<"$modes"
declare -A times
for r in $(seq 1 "$repeat"); do
  for m in "${mlist[@]}"; do times[$m]+="$(run "$m" "$r") "; done
done
med() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
base=""
printf '%-10s %10s %7s  %s\n' mode "step ms" ratio "activations (start-up log) | peak RSS"
for m in "${mlist[@]}"; do
  t=$(med "${times[$m]}")
  [ -z "$base" ] && base=$t
  acts=$(grep -o 'activations (rank 0): .*' "$work/$m-1.log" | sed 's/activations (rank 0): //; s/; recomputation.*//')
  rss=$(grep -o 'peak memory (RSS) [0-9.]* MiB' "$work/$m-1.log" | sed 's/memory (RSS)/RSS/')
  printf '%-10s %10s %7s  %s | %s\n' "$m" "$t" "$(awk -v a="$t" -v b="$base" 'BEGIN {printf "%.3f", a / b}')" "$acts" "$rss"
done
