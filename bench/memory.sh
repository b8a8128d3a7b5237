#!/usr/bin/env bash
# Memory per rank, measured (peak RSS) against trident's prediction (src/train/memory.c), for the
# tables of docs/memory.md. Two parts:
#   states: GPT-2 350M's shape (24 layers x 1024, 16 heads, seq 128, micro-batch 1) at dp 1, 2 and 4,
#           with and without --use-distributed-optimizer: the optimizer state per rank falls as 1/dp.
#           Needs about 23 GiB free for dp 4 without the distributed optimizer (it is skipped, and
#           said so, when the machine has less).
#   acts:   GPT-2 124M's shape (12 x 768, seq 1024, micro-batch 4, one micro-batch): no, selective
#           and full recomputation on one rank; tp 2 with and without --sequence-parallel.
#   precision: the same shape in fp32, --bf16 and --fp16 (and bf16 with selective recomputation):
#           bf16 keeps the GEMM inputs it saves in bf16 and adds 2-byte copies of the weights.
# Usage: bench/memory.sh [states|acts|precision|all] [--iters N]
# Every run trains N iterations (default 2) on tinyshakespeare; ranks run one thread each, the
# one-rank runs all cores. Environment: BUILD (default build), WORK (default $BUILD/bench).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
part=${1:-all}; [ $# -gt 0 ] && shift
iters=2
while [ $# -gt 0 ]; do
  case $1 in
    --iters) iters=$2 ;;
    *) echo "memory.sh: unknown option $1 (give states, acts or all, then --iters N)" >&2; exit 2 ;;
  esac; shift 2
done
case $part in states|acts|precision|all) ;; *) echo "memory.sh: unknown part $part (states, acts, precision or all)" >&2; exit 2 ;; esac
build=${BUILD:-$root/build}
[ -x "$build/trident" ] || make -C "$root" build >/dev/null
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
data=$("$root/scripts/get-data.sh")
work=${WORK:-$build/bench}
mkdir -p "$work"
"$root/bench/shakespeare.sh" "$build/trident" "$data" "$work" >/dev/null
common=(--data-path "$work/ts_text_document" --vocab-file "$data/gpt2/vocab.json" --merge-file "$data/gpt2/merges.txt"
  --split 100,0,0 --train-iters "$iters" --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --lr 1e-4
  --log-interval 1000 --peak-tflops 1)

gpt2_124m_1024=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --micro-batch-size 4
  --global-batch-size 4)

# run NAME NP FLAGS... -> one table row from the run's log
run() {
  local name=$1 np=$2; shift 2
  local log="$work/memory-$name.log"
  if [ "$np" -eq 1 ]; then "$build/trident" train "${common[@]}" "$@" >"$log" 2>&1
  else OMP_NUM_THREADS=1 mpirun --oversubscribe --bind-to none -np "$np" "$build/trident" train "${common[@]}" "$@" >"$log" 2>&1; fi \
    || { echo "memory.sh: $name failed; see $log" >&2; tail -5 "$log" >&2; return 1; }
  /usr/bin/python3 - "$name" "$log" <<'PY'
import re, sys
name, text = sys.argv[1], open(sys.argv[2]).read()
pred = re.search(r"memory per rank \(predicted\), stage 0: params ([\d.]+) \+ grads ([\d.]+) \+ optimizer ([\d.]+).*?"
                 r"activations ([\d.]+) \(([\d.]+) per micro-batch", text)
meas = re.search(r"peak memory \(RSS\), stage 0: ([\d.]+) MiB measured, ([\d.]+) MiB predicted", text)
p = [float(x) for x in pred.groups()]
m, t = float(meas.group(1)), float(meas.group(2))
print(f"| {name} | {p[0]:.0f} | {p[2]:.0f} | {p[4]:.0f} | {t:.0f} | {m:.0f} | {100*(m-t)/t:+.1f}% |")
PY
}
header() {
  echo "| run | params MiB | optimizer MiB | activations per micro-batch MiB | predicted peak MiB | measured peak RSS MiB | error |"
  echo "|---|---|---|---|---|---|---|"
}
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, load $(cut -d' ' -f1-3 /proc/loadavg); $iters iterations per run"

if [ "$part" = states ] || [ "$part" = all ]; then
  echo; echo "GPT-2 350M shape: 24 layers x 1024, seq 128, micro-batch 1, one micro-batch per rank"
  shape=(--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 128 --micro-batch-size 1)
  header
  free_gb=$(free -g | awk '/Mem:/ {print $7}')
  for dp in 1 2 4; do
    for opt in plain distributed; do
      flags=("${shape[@]}" --global-batch-size "$dp")
      [ $opt = distributed ] && flags+=(--use-distributed-optimizer)
      if [ "$dp" -eq 4 ] && [ $opt = plain ] && [ "$free_gb" -lt 23 ]; then
        echo "| dp4-$opt | skipped: $free_gb GiB available, about 23 needed |"; continue
      fi
      [ "$dp" -eq 1 ] && [ $opt = distributed ] && continue
      run "dp$dp-$opt" "$dp" "${flags[@]}"
    done
  done
fi

if [ "$part" = acts ] || [ "$part" = all ]; then
  echo; echo "GPT-2 124M shape: 12 layers x 768, seq 1024, micro-batch 4, one micro-batch"
  shape=("${gpt2_124m_1024[@]}")
  header
  run none 1 "${shape[@]}"
  run selective 1 "${shape[@]}" --recompute-granularity selective
  run full-uniform-1 1 "${shape[@]}" --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
  run tp2 2 "${shape[@]}" --tensor-model-parallel-size 2
  run tp2-sp 2 "${shape[@]}" --tensor-model-parallel-size 2 --sequence-parallel
  run tp2-sp-full 2 "${shape[@]}" --tensor-model-parallel-size 2 --sequence-parallel --recompute-granularity full \
    --recompute-method uniform --recompute-num-layers 1
fi

if [ "$part" = precision ] || [ "$part" = all ]; then
  echo; echo "GPT-2 124M shape: 12 layers x 768, seq 1024, micro-batch 4, one micro-batch; fp32 against mixed precision"
  shape=("${gpt2_124m_1024[@]}")
  header
  run fp32 1 "${shape[@]}"
  run bf16 1 "${shape[@]}" --bf16
  run fp16 1 "${shape[@]}" --fp16
  run bf16-selective 1 "${shape[@]}" --bf16 --recompute-granularity selective
fi
