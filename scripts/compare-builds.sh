#!/usr/bin/env bash
# Two builds of trident held against each other, for a change that must not change behaviour (a
# restructuring): GPT-2, BERT, a Llama-style model (--swiglu, RMSNorm, rotary, grouped-query) and
# three mixtures of experts (GeLU experts; one with its named statistics in the log and metrics:
# every other layer MoE, the router losses, a capacity, the expert bias; SwiGLU experts) train 6
# iterations from scratch with each binary, and a checkpoint the OLD binary saved at iteration 3 is
# resumed to 6 by each; the metrics must be bit-identical (timing fields aside) and the NEW binary's
# `checkpoint info` must read the OLD checkpoint; the decoders' greedy generation from it must be
# token-for-token the same. On the GPT checkpoint, each binary's `eval` (strided perplexity: the
# flags' documents and the checkpoint's own, on one rank and on two as tp 2 and pp 2) and greedy
# `generate` must print the same (timings aside) and write the same metrics line. Greedy generation
# is also held on two ranks: GPT-2, the Llama-style model and the Mixtral-shaped one (SwiGLU experts,
# GQA, rotary, RMSNorm) as tp 2, GPT-2 as pp 2, and the Llama-style without the key/value cache;
# and `serve`'s log-probabilities of those three (one rank and tp 2; JSON prints each float's
# exact value), greedy and sampled, must be the same bit for bit.
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
# a mixture of experts whose named statistics reach the log line and metrics.jsonl: every other
# layer MoE, with the load-balancing and z losses, a capacity, the expert bias
moe_stats=("${gpt[@]}" --num-experts 4 --moe-router-topk 2 --moe-layer-freq "[1,0,1,1]" --moe-aux-loss-coeff 1e-2
     --moe-z-loss-coeff 1e-3 --moe-expert-capacity-factor 1.5 --moe-router-score-function sigmoid
     --moe-router-enable-expert-bias --log-interval 1)
moe_llama=("${llama[@]}" --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 --moe-aux-loss-coeff 0.01)
served() { # out binary checkpoint tp: serve's answers (with log-probabilities) to two requests
  local out=$1 bin=$2 ck=$3 tp=$4 port pid spid i run=()
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  [ "$tp" -gt 1 ] && run=(mpirun --oversubscribe -np "$tp")
  "${run[@]}" "$bin" serve --load "$ck" --vocab-file "$data/gpt2/vocab.json" --merge-file "$data/gpt2/merges.txt" \
    --port "$port" --tensor-model-parallel-size "$tp" >"$out.log" 2>&1 &
  pid=$!
  for i in $(seq 150); do grep -q "listening on" "$out.log" && break; sleep 0.2; done
  curl -s -X PUT "localhost:$port/api" -d '{"prompts": ["First Citizen: we", "ROMEO:"], "tokens_to_generate": 8,
    "temperature": 0, "logprobs": true}' >"$out"
  curl -s -X PUT "localhost:$port/api" -d '{"prompts": ["The quick brown fox jumps"], "tokens_to_generate": 10,
    "temperature": 0.9, "top_k": 5, "random_seed": 3, "logprobs": true}' >>"$out"
  spid=$(grep -o 'pid [0-9]*' "$out.log" | head -1 | cut -d' ' -f2)
  [ -n "$spid" ] && kill -TERM "$spid"
  wait $pid
  grep -q '"logprobs":\[\[' "$out" || : >"$out" # no answer: empty, which `same` fails
}
untimed() { sed -E 's/"(tokens_per_s|model_tflops_per_rank|mfu|elapsed_ms|comm_ms)": [^,}]*(, )?//g' "$@"; }
fails=0
mpi=(mpirun --oversubscribe -np 2)
same() { # what a b
  if [ -s "$2" ] && cmp -s <(untimed "$2") <(untimed "$3"); then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi
}
for fam in gpt bert llama moe moe_stats moe_llama; do
  declare -n flags=$fam
  "$old" train "${flags[@]}" --train-iters 6 --metrics-file $fam.old.jsonl >$fam.old.log 2>&1
  "$new" train "${flags[@]}" --train-iters 6 --metrics-file $fam.new.jsonl >$fam.new.log 2>&1
  same "$fam: 6 iterations from scratch, old and new" $fam.old.jsonl $fam.new.jsonl
  for v in old new; do grep -o 'lm loss:.*loss scale' $fam.$v.log >$fam.$v.lines; done
  [ $fam = moe ] && same "$fam: the log lines' losses and metrics, old and new" $fam.old.lines $fam.new.lines
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
  two=()
  case $fam in
    gpt) two=("tp 2:--tensor-model-parallel-size 2" "pp 2:--pipeline-model-parallel-size 2") ;;
    llama) two=("tp 2:--tensor-model-parallel-size 2" "no cache:--no-kv-cache") ;;
    moe_llama) two=("tp 2:--tensor-model-parallel-size 2") ;;
  esac
  for t in "${two[@]}"; do
    read -ra lay <<<"${t#*:}"
    run=("${mpi[@]}")
    [ "${t%%:*}" = "no cache" ] && run=()
    "${run[@]}" "$old" generate "${gen[@]}" "${lay[@]}" >$fam.gold2.txt 2>$fam.gold2.log
    "${run[@]}" "$new" generate "${gen[@]}" "${lay[@]}" >$fam.gnew2.txt 2>$fam.gnew2.log
    same "$fam: greedy generation from the old checkpoint (${t%%:*}), old and new" $fam.gold2.txt $fam.gnew2.txt
  done
  case $fam in gpt | llama | moe_llama)
    for tp in 1 2; do
      served $fam.sold$tp.json "$old" $fam.ck $tp
      served $fam.snew$tp.json "$new" $fam.ck $tp
      same "$fam: serve's log-probabilities on tp $tp, old and new" $fam.sold$tp.json $fam.snew$tp.json
    done ;;
  esac
done
# inference on the old binary's GPT checkpoint: what eval and generate print, timings aside
secs() { sed -E 's/ \| [0-9.]+ s$//' "$@"; }
infer() { # name command...: run by each binary (TRIDENT), stdout and the metrics file (METRICS) compared
  local name=$1; shift
  for b in old new; do
    local cmd=("${@/TRIDENT/${!b}}")
    "${cmd[@]/METRICS/$name.$b.jsonl}" >$name.$b.out 2>$name.$b.err || echo "($b: exit $?)" >>$name.$b.out
  done
  if [ -s $name.old.out ] && cmp -s <(secs $name.old.out) <(secs $name.new.out) &&
     { [ ! -e $name.old.jsonl ] || cmp -s $name.old.jsonl $name.new.jsonl; }; then echo "ok: $name"
  else echo "FAIL: $name"; diff <(secs $name.old.out) <(secs $name.new.out) | head -5; fails=$((fails + 1)); fi
}
infer eval_flags TRIDENT eval --metrics-file METRICS --load gpt.ck --data-path "${gpt[1]}" --split 90,10,0 \
  --split-name valid --seq-length 16 --eval-stride 5 --micro-batch-size 2
infer eval_own TRIDENT eval --metrics-file METRICS --load gpt.ck --split-name valid --micro-batch-size 3
infer eval_tp2 "${mpi[@]}" TRIDENT eval --metrics-file METRICS --load gpt.ck --split-name valid --eval-stride 7 \
  --micro-batch-size 4 --tensor-model-parallel-size 2
infer eval_pp2 "${mpi[@]}" TRIDENT eval --metrics-file METRICS --load gpt.ck --split-name valid --eval-stride 16 \
  --micro-batch-size 4 --pipeline-model-parallel-size 2
infer generate TRIDENT generate --load gpt.ck "${gpt[2]}" "${gpt[3]}" "${gpt[4]}" "${gpt[5]}" --greedy \
  --max-new-tokens 12 --prompt "The quick brown fox" --prompt "Hello"
[ $fails -eq 0 ]
