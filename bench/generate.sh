#!/usr/bin/env bash
# Generation speed: `trident generate` (GPT-2 124M, greedy, fp32) against the PyTorch peer with a
# key/value cache (bench/peer_torch_generate.py, the same architecture), side by side in one run,
# at batch 1 and 8; and each side's cache against recomputing the prefix at every step. --sample:
# both sample instead (temperature 0.9, top-k 40, top-p 0.95), the cache only.
#
# Usage: bench/generate.sh [--prompt N] [--new N] [--batches "1 8"] [--threads T] [--sample]
# Environment: BUILD (default build-bench), WORK (default $BUILD/bench).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prompt=16 new=128 batches="1 8" threads=$(nproc) sample=0
while [ $# -gt 0 ]; do
  case $1 in
    --prompt) prompt=$2 ;; --new) new=$2 ;; --batches) batches=$2 ;; --threads) threads=$2 ;;
    --sample) sample=1; shift; continue ;;
    *) echo "generate.sh: unknown option $1" >&2; exit 2 ;;
  esac; shift 2
done
decode=(--greedy) pdecode=() modes="cache recompute" how=greedy
[ $sample = 1 ] && decode=(--temperature 0.9 --top-k 40 --top-p 0.95 --seed 1) pdecode=(--sample) modes=cache \
  how="sampled (temperature 0.9, top-k 40, top-p 0.95)"
build=${BUILD:-$root/build-bench}
if [ ! -x "$build/trident" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$build" -j "$(nproc)" >/dev/null
fi
pyt=/usr/bin/python3
if ! $pyt -c "import torch" 2>/dev/null; then
  if [ "$(id -u)" -eq 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch >/dev/null
  else echo "generate.sh: the peer needs Debian's python3-torch: apt-get install python3-torch" >&2; exit 1; fi
fi
data=$("$root/scripts/get-data.sh")
work=${WORK:-$build/bench}
ds=$("$root/bench/shakespeare.sh" "$build/trident" "$data" "$work")
tok=(--vocab-file "$data/gpt2/vocab.json" --merge-file "$data/gpt2/merges.txt")
ck=$work/gen-gpt2-124m
if [ ! -f "$ck/latest_checkpointed_iteration.txt" ]; then # GPT-2 124M after one step: the speed is the shape's
  "$build/trident" train --data-path "$ds" "${tok[@]}" --split 100,0,0 --num-layers 12 --hidden-size 768 \
    --num-attention-heads 12 --seq-length 64 --max-position-embeddings 1024 --micro-batch-size 1 --train-iters 1 \
    --eval-iters 0 --lr 1e-4 --save "$ck" >/dev/null 2>&1
fi
# a prompt of exactly $prompt tokens: that many repetitions of " the" (one GPT-2 token each)
text=$(printf ' the%.0s' $(seq "$prompt"))
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "GPT-2 124M, fp32, $how, prompt $prompt tokens, $new new tokens per row, $threads threads"
for b in $batches; do
  prompts=(); for ((i = 0; i < b; i++)); do prompts+=("$text"); done
  for mode in $modes; do
    flag=(); [ $mode = recompute ] && flag=(--no-kv-cache)
    line=$(OMP_NUM_THREADS=$threads "$build/trident" generate --load "$ck" "${tok[@]}" --prompt "${prompts[@]}" \
      --max-new-tokens "$new" "${decode[@]}" --ignore-eod "${flag[@]}" 2>&1 | grep -o '[0-9.]* tokens/s (first.*' || true)
    pflag=(); [ $mode = recompute ] && pflag=(--no-cache)
    peer=$($pyt "$root/bench/peer_torch_generate.py" --batch "$b" --prompt "$prompt" --new "$new" --threads "$threads" "${pflag[@]}" "${pdecode[@]}")
    ptok=$(grep -o 'tokens_per_s [0-9.]*' <<<"$peer" | head -1 | cut -d' ' -f2)
    ttok=${line%% tokens/s*}
    echo "batch $b, $mode: trident $line | peer $ptok tokens/s | ratio $(awk "BEGIN{printf \"%.2f\", $ttok/$ptok}")"
  done
done
