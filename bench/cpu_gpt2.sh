#!/usr/bin/env bash
# GPT-2 training step on the CPU: trident against the PyTorch peer (../shared/bench/
# peer_torch_gpt2.py, Debian's python3-torch), side by side in one run, same shape, all cores.
# Usage: bench/cpu_gpt2.sh [--layers 12 --hidden 768 --heads 12 --mbs 4 --seq 64 --steps 6]
# Prints best and median step time, tokens/s and the ratio, and the sgemm peak for MFU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
layers=12 hidden=768 heads=12 mbs=4 seq=64 steps=6 threads=$(nproc)
while [ $# -gt 0 ]; do
  case $1 in
    --layers) layers=$2 ;; --hidden) hidden=$2 ;; --heads) heads=$2 ;; --mbs) mbs=$2 ;;
    --seq) seq=$2 ;; --steps) steps=$2 ;; --threads) threads=$2 ;;
    *) echo "cpu_gpt2.sh: unknown option $1" >&2; exit 2 ;;
  esac; shift 2
done
build=${BUILD:-$root/build}
peer=$root/../shared/bench/peer_torch_gpt2.py
pyt=/usr/bin/python3
if ! $pyt -c "import torch" 2>/dev/null; then
  if [ "$(id -u)" -eq 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch >/dev/null
  else echo "cpu_gpt2.sh: the peer needs Debian's python3-torch: apt-get install python3-torch" >&2; exit 1; fi
fi
[ -x "$build/trident" ] || make -C "$root" build >/dev/null
data=$("$root/scripts/get-data.sh")
work=${WORK:-$build/bench}
mkdir -p "$work"
if [ ! -f "$work/ts_text_document.idx" ]; then
  "$root/scripts/text-to-jsonl.sh" "$data/tinyshakespeare.txt" "$work/ts.jsonl"
  "$build/trident" preprocess --input "$work/ts.jsonl" --output-prefix "$work/ts" --vocab-file "$data/gpt2/vocab.json" \
    --merge-file "$data/gpt2/merges.txt" --append-eod --workers "$threads" 2>/dev/null
fi

echo "shape: layers $layers hidden $hidden heads $heads micro-batch $mbs seq $seq, fp32, AdamW, $threads threads"
metrics=$work/metrics-$layers-$hidden-$mbs-$seq.jsonl
rm -f "$metrics"
OMP_NUM_THREADS=$threads "$build/trident" train --data-path "$work/ts_text_document" --vocab-file "$data/gpt2/vocab.json" \
  --merge-file "$data/gpt2/merges.txt" --split 100,0,0 --num-layers "$layers" --hidden-size "$hidden" \
  --num-attention-heads "$heads" --seq-length "$seq" --micro-batch-size "$mbs" --global-batch-size "$mbs" \
  --train-iters "$steps" --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --lr 1e-4 \
  --metrics-file "$metrics" --log-interval 1000 > "$work/trident.log"
peak=$(grep -o 'peak for MFU: [0-9.]*' "$work/trident.log" | grep -o '[0-9.]*$')
rss=$(grep -o 'peak memory (RSS) [0-9.]* MiB' "$work/trident.log" | grep -o '[0-9.]* MiB')
read -r tbest tmed ttok tmfu < <($pyt - "$metrics" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])][1:]  # the first step warms up
ms = [r["elapsed_ms"] for r in rows]; best = min(ms)
b = min(rows, key=lambda r: r["elapsed_ms"])
print(f'{best:.1f} {statistics.median(ms):.1f} {b["tokens_per_s"]:.1f} {100*b["mfu"]:.1f}')
PY
)
pout=$(OMP_NUM_THREADS=$threads $pyt "$peer" --layers "$layers" --heads "$heads" --hidden "$hidden" --mbs "$mbs" \
  --seq "$seq" --steps "$steps" --threads "$threads")
pbest=$(grep -o 'best_step_ms [0-9.]*' <<<"$pout" | grep -o '[0-9.]*$')
ptok=$(grep -o 'tokens_per_s [0-9.]*' <<<"$pout" | grep -o '[0-9.]*$')
echo "trident: best step ${tbest} ms, median ${tmed} ms, ${ttok} tokens/s, MFU ${tmfu}% of the sgemm peak ${peak} TFLOP/s, peak RSS ${rss}"
echo "peer:    $pout"
$pyt -c "print(f'ratio (trident tokens/s / peer tokens/s): {float($ttok)/float($ptok):.2f}')"
