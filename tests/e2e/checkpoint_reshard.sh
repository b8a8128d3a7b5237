#!/usr/bin/env bash
# Resharding: a tp2 x pp2 run saves at iteration 2 (model and Adam state); the checkpoint is
# loaded in other layouts (one rank, pp2 with 2 virtual stages, dp2, tp4, tp2 x dp2) which train
# to iteration 4. Per-iteration loss and validation loss and the final parameters must match the
# tp2 x pp2 run that never stopped within 1e-5 (compare_runs). Then the reverse: a one-rank
# checkpoint loads into tp2 x pp2 x dp2, and `trident checkpoint compare` finds a checkpoint
# re-saved by another layout right after loading bit-identical to the original. And checkpoints
# saved at dp 2 (tp1 x dp2, tp2 x dp2) continue at dp 1 within 1e-5 of the runs that never stopped.
CKPT_TOKENS=bytes . "$(dirname "$0")/checkpoint_lib.sh"
train 4 2 --pipeline-model-parallel-size 2 --train-iters 4 --save src --save-interval 2 \
  --metrics-file base.jsonl --dump-params base.params || { bad "source run failed"; cat "$last_log"; finish; exit; }
tail -n 2 base.jsonl >base_tail.jsonl
reshard() { # name np tp flags...
  local name=$1 np=$2 tp=$3; shift 3
  if ! train "$np" "$tp" --train-iters 4 --load src/iter_0000002 --metrics-file "$name.jsonl" --dump-params "$name.params" "$@"; then
    bad "$name: run failed"; cat "$last_log"; return
  fi
  if out=$("$COMPARE_RUNS" base_tail.jsonl "$name.jsonl" base.params "$name.params" 1e-5); then
    ok "$name: iterations 3-4 and final parameters within 1e-5 ($(grep -o 'relative norm of the difference [^ ]*' <<<"$out"))"
  else bad "$name:"; echo "$out"; fi
}
reshard one_rank 1 1
reshard pp2_vp2 2 1 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
reshard dp2 2 1
reshard tp4 4 4
reshard tp2_dp2 4 2
reshard pp2_uneven 2 1 --pipeline-model-parallel-size 2 --decoder-last-pipeline-num-layers 1
reshard pp2_vp3_accounted 2 1 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split

# the other way: one rank -> tp2 x pp2 x dp2
train 1 1 --train-iters 4 --save one --save-interval 2 --metrics-file one.jsonl --dump-params one.params ||
  { bad "one-rank source run failed"; cat "$last_log"; }
tail -n 2 one.jsonl >one_tail.jsonl
if train 8 2 --pipeline-model-parallel-size 2 --train-iters 4 --load one/iter_0000002 --metrics-file wide.jsonl \
     --dump-params wide.params && out=$("$COMPARE_RUNS" one_tail.jsonl wide.jsonl one.params wide.params 1e-5); then
  ok "one rank -> tp2 x pp2 x dp2: within 1e-5"
else bad "one rank -> tp2 x pp2 x dp2"; cat "$last_log"; echo "${out:-}"; fi

# fewer data-parallel ranks: saved at tp1 x dp2 and tp2 x dp2, loaded at dp 1 (one rank, tp2)
dp_down() { # name np tp -> np2 (tp the same, dp 1)
  local name=$1 np=$2 tp=$3 np2=$4
  train "$np" "$tp" --train-iters 4 --save "$name" --save-interval 2 --metrics-file "$name.jsonl" \
    --dump-params "$name.params" >/dev/null || { bad "$name: source run failed"; cat "$last_log"; return; }
  [ "$(jq .layout.data_parallel_size "$name/iter_0000002/meta.json")" = 2 ] || bad "$name: meta.json does not say dp 2"
  tail -n 2 "$name.jsonl" >"${name}_tail.jsonl"
  if train "$np2" "$tp" --train-iters 4 --load "$name/iter_0000002" --metrics-file "${name}_dp1.jsonl" \
       --dump-params "${name}_dp1.params" && grep -q "written by tp $tp x pp 1 x dp 2" "$last_log" &&
     out=$("$COMPARE_RUNS" "${name}_tail.jsonl" "${name}_dp1.jsonl" "$name.params" "${name}_dp1.params" 1e-5); then
    ok "$name -> dp 1: iterations 3-4 and final parameters within 1e-5 ($(grep -o 'relative norm of the difference [^ ]*' <<<"$out"))"
  else bad "$name -> dp 1"; tail -3 "$last_log"; echo "${out:-}"; fi
}
dp_down tp1_dp2 2 1 1
dp_down tp2_dp2 4 2 2

# a mixture of experts saved at expert parallelism 4 (each rank 1 of the 4 experts, the distributed
# optimizer) continues on one rank (all 4), at pp 2 x ep 2 (2 a rank) and at tp 2 x ep 2 with
# sequence parallelism (halves of 2 experts a rank): the experts resharded
MOE=(--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64 --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3)
if train 4 1 --expert-model-parallel-size 4 --use-distributed-optimizer --train-iters 4 --save moe_ep4 \
     --save-interval 2 --metrics-file moe_ep4.jsonl --dump-params moe_ep4.params "${MOE[@]}"; then
  [ "$(ls moe_ep4/iter_0000002/model_*.safetensors | wc -l)" = 4 ] || bad "moe ep4: not 4 model shards (rank 0's and 3 of experts)"
  tail -n 2 moe_ep4.jsonl >moe_ep4_tail.jsonl
  for to in "one_rank 1 1" "pp2_ep2 4 1 --pipeline-model-parallel-size 2 --expert-model-parallel-size 2" \
            "sp_tp2_ep2 4 2 --sequence-parallel --expert-model-parallel-size 2"; do
    read -r name np tp flags <<<"$to"
    # shellcheck disable=SC2086
    if train "$np" "$tp" --train-iters 4 --load moe_ep4/iter_0000002 --metrics-file "moe_$name.jsonl" \
         --dump-params "moe_$name.params" $flags "${MOE[@]}" &&
       out=$("$COMPARE_RUNS" moe_ep4_tail.jsonl "moe_$name.jsonl" moe_ep4.params "moe_$name.params" 1e-5); then
      ok "moe ep4 -> $name: iterations 3-4 and final parameters within 1e-5 ($(grep -o 'relative norm of the difference [^ ]*' <<<"$out"))"
    else bad "moe ep4 -> $name"; tail -3 "$last_log"; echo "${out:-}"; fi
  done
else bad "moe ep4 source run failed"; cat "$last_log"; fi

# under tp the stacked experts are many blocks (40 SwiGLU experts: 80, over the slice format's old
# limit of 64): saved at tp 2 with sequence parallelism, continued on one rank
MANY=(--num-experts 40 --moe-router-topk 2 --moe-ffn-hidden-size 16 --swiglu)
if train 2 2 --sequence-parallel --train-iters 4 --save moe_many --save-interval 2 --metrics-file moe_many.jsonl \
     --dump-params moe_many.params "${MANY[@]}" && tail -n 2 moe_many.jsonl >moe_many_tail.jsonl &&
   train 1 1 --train-iters 4 --load moe_many/iter_0000002 --metrics-file moe_many_1.jsonl --dump-params moe_many_1.params \
     "${MANY[@]}" && out=$("$COMPARE_RUNS" moe_many_tail.jsonl moe_many_1.jsonl moe_many.params moe_many_1.params 1e-5); then
  ok "moe of 40 SwiGLU experts, tp 2 -> one rank: within 1e-5 ($(grep -o 'relative norm of the difference [^ ]*' <<<"$out"))"
else bad "moe of 40 experts, tp 2 -> one rank"; tail -3 "$last_log"; echo "${out:-}"; fi

# loading and saving again in another layout changes no bit (Adam moments included)
train 2 1 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --train-iters 2 \
  --load src/iter_0000002 --save resaved >/dev/null || { bad "re-save run failed"; cat "$last_log"; }
if out=$("$TRIDENT" checkpoint compare src/iter_0000002 resaved 2>&1); then ok "tp2 x pp2 -> pp2 x vp2 -> saved again: $(tail -1 <<<"$out")"
else bad "re-saved checkpoint differs:"; echo "$out"; fi
finish
