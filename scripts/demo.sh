#!/usr/bin/env bash
# The demo (make demo): tinyshakespeare -> GPT-2 BPE -> Megatron indexed dataset -> statistics ->
# a small GPT trained for a few minutes on this machine -> the same model trained on 8 ranks
# (tp 2 x pp 2 x dp 2) against one rank, losses side by side.
# Environment: DEMO_ITERS (default 300), DEMO_SKIP_PARALLEL=1 to skip the 8-rank part.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
bin=$build/trident
data=$("$root/scripts/get-data.sh")
out=$build/demo
mkdir -p "$out"
vocab=$data/gpt2/vocab.json merges=$data/gpt2/merges.txt
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "== 1. preprocess: tinyshakespeare, one document per paragraph, GPT-2 BPE"
"$root/scripts/text-to-jsonl.sh" "$data/tinyshakespeare.txt" "$out/tinyshakespeare.jsonl"
"$bin" preprocess --input "$out/tinyshakespeare.jsonl" --json-keys text --tokenizer-type GPT2BPETokenizer \
  --vocab-file "$vocab" --merge-file "$merges" --output-prefix "$out/ts" --append-eod --workers "$(nproc)"
ds=$out/ts_text_document

echo; echo "== 2. dataset statistics"
iters=${DEMO_ITERS:-300}
"$bin" data-info --data-path "$ds" --split 949,50,1 --seq-length 128 --global-batch-size 16 \
  --train-iters "$iters" --eval-interval 100 --eval-iters 10

echo; echo "== 3. train a 4-layer GPT (hidden 128, seq 128) for $iters iterations on one rank"
rm -f "$out/metrics.jsonl"
"$bin" train --data-path "$ds" --vocab-file "$vocab" --merge-file "$merges" --split 949,50,1 \
  --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 \
  --micro-batch-size 8 --global-batch-size 16 --train-iters "$iters" --lr 2e-3 --min-lr 2e-4 \
  --lr-decay-style cosine --lr-warmup-iters 30 --weight-decay 0.1 --hidden-dropout 0 --attention-dropout 0 \
  --eval-interval 100 --eval-iters 10 --log-interval 20 --metrics-file "$out/metrics.jsonl"
echo "metrics: $out/metrics.jsonl"

[ "${DEMO_SKIP_PARALLEL:-0}" = 1 ] && exit 0
echo; echo "== 4. the same kind of model on 8 ranks (tp 2 x pp 2 x dp 2) against one rank, dropout on"
common=(--data-path "$ds" --vocab-file "$vocab" --merge-file "$merges" --split 949,50,1 --num-layers 4
  --hidden-size 64 --num-attention-heads 4 --seq-length 64 --micro-batch-size 2 --global-batch-size 16
  --train-iters 10 --lr 1e-3 --hidden-dropout 0.1 --attention-dropout 0.1 --eval-iters 0 --log-interval 100
  --verbose 0)
# the padded vocabulary is a multiple of divisible-by x tp: keep it the same (256) in both runs
rm -f "$out/one.jsonl" "$out/eight.jsonl"
OMP_NUM_THREADS=$(nproc) "$bin" train "${common[@]}" --make-vocab-size-divisible-by 256 --metrics-file "$out/one.jsonl" >/dev/null
OMP_NUM_THREADS=1 mpirun --oversubscribe --bind-to none -np 8 "$bin" train "${common[@]}" \
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --make-vocab-size-divisible-by 128 --metrics-file "$out/eight.jsonl" >/dev/null
paste <(grep -o '"lm_loss": [0-9.e+-]*' "$out/one.jsonl" | cut -d' ' -f2) \
      <(grep -o '"lm_loss": [0-9.e+-]*' "$out/eight.jsonl" | cut -d' ' -f2) |
  awk 'BEGIN { printf "%9s  %-22s %-22s %s\n", "iteration", "1 rank", "8 ranks (2x2x2)", "relative difference" }
       { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > worst) worst = d
         printf "%9d  %-22s %-22s %.1e\n", NR, $1, $2, d }
       END { printf "worst relative difference: %.1e\n", worst }'
