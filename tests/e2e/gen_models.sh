#!/usr/bin/env bash
# The fixture of e2e/generate and e2e/serve (FIXTURES_SETUP gen_models): a small GPT-2 and a small
# Llama-style model trained on tinyshakespeare and saved once, in $WORK/gpt2 and $WORK/llama.
# Their tests compare texts with each other (cache and no cache, layouts, batches, the server
# and `trident generate`), never with a quality bar, so 30 iterations do: enough that the output
# distribution is no longer uniform (the loss falls from 10.9 to about 7), in seconds; sequences of 32
# tokens halve its CPU (11.5 against 20.8 CPU-s) and change no test that reads the models.
# Environment: TRIDENT, DATA (tinyshakespeare preprocessed), VOCAB, MERGES, WORK.
set -u
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
TOK=(--vocab-file "$VOCAB" --merge-file "$MERGES")
LLAMA=(--normalization RMSNorm --position-embedding-type rope --swiglu --ffn-hidden-size 192
       --group-query-attention --num-query-groups 2 --disable-bias-linear --untie-embeddings-and-output-weights)
train() { # name flags...
  local name=$1; shift
  "$TRIDENT" train --data-path "$DATA" "${TOK[@]}" --split 949,50,1 --num-layers 4 --hidden-size 64 \
    --num-attention-heads 4 --seq-length 32 --max-position-embeddings 128 --micro-batch-size 8 --global-batch-size 8 \
    --train-iters 30 --lr 4e-3 --min-lr 4e-4 --lr-decay-style cosine --lr-warmup-iters 10 --hidden-dropout 0 \
    --attention-dropout 0 --eval-iters 0 --log-interval 10 --seed 1 --make-vocab-size-divisible-by 256 --peak-tflops 1 \
    --save "$name" "$@" >"$name.log" 2>&1 || { echo "FAIL: training $name"; tail -5 "$name.log"; exit 1; }
  echo "ok: $name trained: lm loss $(grep -o 'lm loss: [0-9.E+-]*' "$name.log" | sed -n '1p;$p' | cut -d' ' -f3 | paste -sd' ' | sed 's/ / -> /')"
}
train gpt2
train llama "${LLAMA[@]}"
