#!/usr/bin/env bash
# Parallel efficiency on one machine: the same model and global batch trained on one rank with
# all cores, and on 2 ranks x 1 thread as tp 2 (with and without sequence parallelism), pp 2
# (1F1B, 8 micro-batches: even, the last stage holding a quarter of the layers beside the output
# layer and loss, or only those; and the last with gbs micro-batches of one sample) and dp 2.
# Prints tokens/s of each, the ratio to one rank, and the time each layout spends blocked in
# communication per iteration (on the reporting rank). Usage:
#   bench/parallel_scaling.sh [--layers 8 --hidden 512 --heads 8 --seq 128 --gbs 16 --iters 6]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
layers=8 hidden=512 heads=8 seq=128 gbs=16 iters=6
while [ $# -gt 0 ]; do
  case $1 in
    --layers) layers=$2 ;; --hidden) hidden=$2 ;; --heads) heads=$2 ;; --seq) seq=$2 ;;
    --gbs) gbs=$2 ;; --iters) iters=$2 ;;
    *) echo "parallel_scaling.sh: unknown option $1" >&2; exit 2 ;;
  esac; shift 2
done
build=${BUILD:-$root/build}
[ -x "$build/trident" ] || make -C "$root" build >/dev/null
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
data=$("$root/scripts/get-data.sh")
work=${WORK:-$build/bench}
mkdir -p "$work"
"$root/bench/shakespeare.sh" "$build/trident" "$data" "$work" >/dev/null
cores=$(nproc)
common=(--data-path "$work/ts_text_document" --vocab-file "$data/gpt2/vocab.json" --merge-file "$data/gpt2/merges.txt"
  --split 100,0,0 --num-layers "$layers" --hidden-size "$hidden" --num-attention-heads "$heads" --seq-length "$seq"
  --global-batch-size "$gbs" --train-iters "$iters" --eval-iters 0 --hidden-dropout 0 --attention-dropout 0
  --log-interval 1000 --peak-tflops 1 --make-vocab-size-divisible-by 256)
summarise() { # metrics file -> "tokens/s comm_ms" (median over iterations after the first)
  /usr/bin/python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]
print(f'{statistics.median(r["tokens_per_s"] for r in rows):.1f} {statistics.median(r["comm_ms"] for r in rows):.1f} '
      f'{statistics.median(r["elapsed_ms"] for r in rows):.1f}')
PY
}
run() { # name np threads flags...
  local name=$1 np=$2 th=$3; shift 3
  rm -f "$work/scale-$name.jsonl"
  if [ "$np" -eq 1 ]; then OMP_NUM_THREADS=$th "$build/trident" train "${common[@]}" "$@" --metrics-file "$work/scale-$name.jsonl" >/dev/null
  else OMP_NUM_THREADS=$th mpirun --oversubscribe --bind-to none -np "$np" "$build/trident" train "${common[@]}" "$@" \
         --metrics-file "$work/scale-$name.jsonl" >/dev/null; fi
  summarise "$work/scale-$name.jsonl"
}
echo "model: $layers layers, hidden $hidden, heads $heads, seq $seq; global batch $gbs; $cores cores"
read -r base_tok base_comm base_ms < <(run one 1 "$cores" --micro-batch-size 2)
printf "%-34s %10s %8s %12s %10s\n" layout tokens/s ratio "iter (ms)" "comm (ms)"
printf "%-34s %10.1f %8s %12.1f %10.1f\n" "1 rank x $cores threads" "$base_tok" 1.00 "$base_ms" "$base_comm"
for spec in "tp2|--tensor-model-parallel-size 2 --make-vocab-size-divisible-by 128 --micro-batch-size 2" \
            "tp2-sp (sequence parallel)|--tensor-model-parallel-size 2 --make-vocab-size-divisible-by 128 --micro-batch-size 2 --sequence-parallel" \
            "pp2 (1F1B, $((gbs / (gbs / 8))) micro-batches)|--pipeline-model-parallel-size 2 --micro-batch-size $((gbs / 8))" \
            "pp2-uneven (last stage $((layers / 4)) layers + head)|--pipeline-model-parallel-size 2 --micro-batch-size $((gbs / 8)) --decoder-last-pipeline-num-layers $((layers / 4))" \
            "pp2-headonly (last stage: head + loss only)|--pipeline-model-parallel-size 2 --micro-batch-size $((gbs / 8)) --decoder-last-pipeline-num-layers 0" \
            "pp2-headonly-m$gbs (the same, $gbs micro-batches of 1)|--pipeline-model-parallel-size 2 --micro-batch-size 1 --decoder-last-pipeline-num-layers 0" \
            "dp2|--micro-batch-size 2"; do
  name=${spec%%|*}; flags=${spec#*|}
  read -r tok comm ms < <(run "$(echo "$name" | cut -d' ' -f1)" 2 1 $flags)
  ratio=$(/usr/bin/python3 -c "print(f'{$tok/$base_tok:.2f}')")
  printf "%-34s %10.1f %8s %12.1f %10.1f\n" "$name (2 ranks x 1 thread)" "$tok" "$ratio" "$ms" "$comm"
done
