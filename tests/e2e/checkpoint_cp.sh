#!/usr/bin/env bash
# Context parallelism does not change the model: a checkpoint saved at cp 2 x dp 2 with the
# distributed optimizer (its Adam state sharded over dp x cp: 4 shards) at iteration 2 continues
# on one rank, at cp 4 and at cp 2 x tp 2 with sequence parallelism, each within 1e-5 of the run
# that never stopped (iterations 3-4, final parameters); meta.json records cp as a layout
# setting; a one-rank checkpoint continues at cp 2; and a mixture of experts saved at cp 2 x ep 2
# continues elsewhere.
CKPT_TOKENS=bytes . "$(dirname "$0")/checkpoint_lib.sh"
train 4 1 --context-parallel-size 2 --use-distributed-optimizer --train-iters 4 --save src --save-interval 2 \
  --metrics-file base.jsonl --dump-params base.params || { bad "cp2 x dp2 source run failed"; cat "$last_log"; finish; exit; }
tail -n 2 base.jsonl >base_tail.jsonl
m=src/iter_0000002/meta.json
if [ "$(jq .layout.context_parallel_size $m)" = 2 ] && [ "$(jq .layout.data_parallel_size $m)" = 2 ] &&
   [ "$(jq '[.files[] | select(.kind == "optimizer")] | length' $m)" = 4 ] &&
   [ "$(jq '[.files[] | select(.kind == "model")] | length' $m)" = 1 ]; then
  ok "meta.json: cp 2 x dp 2, one model shard, the optimizer in 4 shards (dp x cp)"
else bad "meta.json of the cp2 x dp2 save:"; jq -c '.layout, [.files[].name]' $m; fi
cont() { # name np tp flags...
  local name=$1 np=$2 tp=$3; shift 3
  if ! train "$np" "$tp" --train-iters 4 --load src/iter_0000002 --metrics-file "$name.jsonl" --dump-params "$name.params" "$@"; then
    bad "$name: run failed"; tail -3 "$last_log"; return
  fi
  if out=$("$COMPARE_RUNS" base_tail.jsonl "$name.jsonl" base.params "$name.params" 1e-5); then
    ok "cp2 x dp2 -> $name: iterations 3-4 and final parameters within 1e-5 ($(grep -o 'relative norm of the difference [^ ]*' <<<"$out"))"
  else bad "cp2 x dp2 -> $name:"; echo "$out"; fi
}
cont one_rank 1 1
cont cp4 4 1 --context-parallel-size 4
cont cp2_sp_tp2 4 2 --context-parallel-size 2 --sequence-parallel

# a one-rank checkpoint continues at cp 2
if train 1 1 --train-iters 4 --save one --save-interval 2 --metrics-file one.jsonl --dump-params one.params &&
   tail -n 2 one.jsonl >one_tail.jsonl &&
   train 2 1 --context-parallel-size 2 --train-iters 4 --load one/iter_0000002 --metrics-file one_cp2.jsonl \
     --dump-params one_cp2.params && out=$("$COMPARE_RUNS" one_tail.jsonl one_cp2.jsonl one.params one_cp2.params 1e-5); then
  ok "one rank -> cp 2: within 1e-5"
else bad "one rank -> cp 2"; tail -3 "$last_log"; echo "${out:-}"; fi

# a mixture of experts saved at cp 2 x dp 2 x ep 2 (ep carved out of dp x cp: cp rank 1 holds ep
# rank 1's experts and writes their shard) with the distributed optimizer continues on one rank and
# at dp 2 x ep 2 without cp, within 1e-5 of the run that never stopped
MOE=(--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64 --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3)
if train 4 1 --context-parallel-size 2 --expert-model-parallel-size 2 --use-distributed-optimizer --train-iters 4 \
     --save moe --save-interval 2 --metrics-file moe.jsonl --dump-params moe.params "${MOE[@]}"; then
  m=moe/iter_0000002/meta.json
  if [ "$(jq '[.files[] | select(.kind == "model")] | length' $m)" = 2 ] &&
     [ "$(jq '[.files[] | select(.kind == "optimizer")] | length' $m)" = 4 ]; then
    ok "moe cp2 x dp2 x ep2: two model shards (one per ep rank), the optimizer in 4 shards"
  else bad "moe cp2 x dp2 x ep2 meta.json:"; jq -c '[.files[].name]' $m; fi
  tail -n 2 moe.jsonl >moe_tail.jsonl
  for to in "one_rank 1" "dp2_ep2 2 --expert-model-parallel-size 2"; do
    read -r name np flags <<<"$to"
    # shellcheck disable=SC2086
    if train "$np" 1 --train-iters 4 --load moe/iter_0000002 --metrics-file "moe_$name.jsonl" \
         --dump-params "moe_$name.params" $flags "${MOE[@]}" &&
       out=$("$COMPARE_RUNS" moe_tail.jsonl "moe_$name.jsonl" moe.params "moe_$name.params" 1e-5); then
      ok "moe cp2 x dp2 x ep2 -> $name: within 1e-5 ($(grep -o 'relative norm of the difference [^ ]*' <<<"$out"))"
    else bad "moe cp2 x dp2 x ep2 -> $name"; tail -3 "$last_log"; echo "${out:-}"; fi
  done
else bad "moe cp2 x dp2 x ep2 source run failed"; tail -5 "$last_log"; fi
finish
