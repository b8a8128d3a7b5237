#!/usr/bin/env bash
# Two builds of trident held against each other, for a change that must not change behaviour (a
# restructuring): GPT-2, BERT, a Llama-style model (--swiglu, RMSNorm, rotary, grouped-query) and
# two mixtures of experts (GeLU and SwiGLU experts) train 6 iterations from scratch with each
# binary, and a checkpoint the OLD binary saved at iteration 3 is resumed to 6 by each; the
# metrics must be bit-identical (timing fields aside) and the NEW binary's `checkpoint info` must
# read the OLD checkpoint; the decoders' greedy generation from it must be token-for-token the same.
# Usage: scripts/compare-builds.sh OLD_TRIDENT NEW_TRIDENT [BUILD]
#   BUILD: a build folder whose test fixtures exist (make test ran there); default build.
set -u
old=$(realpath "$1") new=$(realpath "$2") build=$(cd "${3:-build}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
data=$("$root/scripts/get-data.sh")
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT && cd "$work" || exit 1
export OMP_NUM_THREADS=1
common=(--split 90,10,0 --num-layers 4 --hidden-size 32 --num-attention-heads 4 --hidden-dropout 0.1
        --attention-dropout 0.1 --global-batch-size 8 --lr 1e-3 --lr-warmup-iters 1 --lr-decay-style cosine
        --eval-interval 2 --eval-iters 1 --clip-grad 1.0 --seed 7 --peak-tflops 1 --log-interval 100 --micro-batch-size 1)
gpt=(--data-path "$build/testtmp/checkpoint/ts_text_document" --vocab-file "$data/gpt2/vocab.json"
     --merge-file "$data/gpt2/merges.txt" --seq-length 16 --max-position-embeddings 16 "${common[@]}")
bert=(--model bert --data-path "$build/testtmp/bert/ts_text_sentence" --tokenizer-type BertWordPieceLowerCase
      --vocab-file "$build/node/bert/vocab.txt" --seq-length 32 --max-position-embeddings 32 "${common[@]}")
llama=("${gpt[@]}" --normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
       --untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2 --ffn-hidden-size 64)
moe=("${gpt[@]}" --num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.01)
moe_llama=("${llama[@]}" --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 --moe-aux-loss-coeff 0.01)
untimed() { sed -E 's/"(tokens_per_s|model_tflops_per_rank|mfu|elapsed_ms|comm_ms)": [^,}]*(, )?//g' "$@"; }
fails=0
same() { # what a b
  if [ -s "$2" ] && cmp -s <(untimed "$2") <(untimed "$3"); then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi
}
for fam in gpt bert llama moe moe_llama; do
  declare -n flags=$fam
  "$old" train "${flags[@]}" --train-iters 6 --metrics-file $fam.old.jsonl >$fam.old.log 2>&1
  "$new" train "${flags[@]}" --train-iters 6 --metrics-file $fam.new.jsonl >$fam.new.log 2>&1
  same "$fam: 6 iterations from scratch, old and new" $fam.old.jsonl $fam.new.jsonl
  "$old" train "${flags[@]}" --train-iters 6 --exit-interval 3 --save $fam.ck >$fam.save.log 2>&1
  cp -r $fam.ck $fam.ck2
  "$old" train "${flags[@]}" --train-iters 6 --load $fam.ck --metrics-file $fam.rold.jsonl >$fam.rold.log 2>&1
  "$new" train "${flags[@]}" --train-iters 6 --load $fam.ck2 --metrics-file $fam.rnew.jsonl >$fam.rnew.log 2>&1
  same "$fam: the old binary's checkpoint resumed by each" $fam.rold.jsonl $fam.rnew.jsonl
  if "$new" checkpoint info $fam.ck2 >$fam.info.log 2>&1; then echo "ok: $fam: checkpoint info reads it"
  else echo "FAIL: $fam: checkpoint info"; cat $fam.info.log; fails=$((fails + 1)); fi
  [ $fam = bert ] && continue
  gen=(--load $fam.ck --vocab-file "$data/gpt2/vocab.json" --merge-file "$data/gpt2/merges.txt" --greedy
       --max-new-tokens 8 --prompt "First Citizen:" "ROMEO:")
  "$old" generate "${gen[@]}" >$fam.gold.txt 2>$fam.gold.log
  "$new" generate "${gen[@]}" >$fam.gnew.txt 2>$fam.gnew.log
  same "$fam: greedy generation from the old checkpoint, old and new" $fam.gold.txt $fam.gnew.txt
done
[ $fails -eq 0 ]
