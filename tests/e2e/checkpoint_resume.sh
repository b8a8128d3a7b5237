#!/usr/bin/env bash
# Exact resume: in each layout, a run of 6 iterations and a run stopped at 3 (--exit-interval,
# which saves) then resumed with --load to 6 write bit-identical metrics (loss, lr, grad norm,
# validation loss; timing fields aside) and bit-identical final parameters.
CKPT_TOKENS=bytes . "$(dirname "$0")/checkpoint_lib.sh"
check_layout() { # name np tp flags...
  local name=$1 np=$2 tp=$3; shift 3
  rm -rf "$name" && mkdir "$name"
  train "$np" "$tp" --train-iters 6 --metrics-file "$name/full.jsonl" --dump-params "$name/full.params" "$@" ||
    { bad "$name: uninterrupted run failed"; cat "$last_log"; return; }
  train "$np" "$tp" --train-iters 6 --exit-interval 3 --save "$name/ckpt" --metrics-file "$name/split.jsonl" "$@" ||
    { bad "$name: first half failed"; cat "$last_log"; return; }
  [ "$(cat "$name/ckpt/latest_checkpointed_iteration.txt")" = 3 ] || bad "$name: latest is not 3"
  train "$np" "$tp" --train-iters 6 --load "$name/ckpt" --save "$name/ckpt" --metrics-file "$name/split.jsonl" \
    --dump-params "$name/split.params" "$@" || { bad "$name: resumed run failed"; cat "$last_log"; return; }
  grep -q "loaded checkpoint" "$last_log" || bad "$name: the resumed run did not say it loaded"
  if diff <(untimed "$name/full.jsonl") <(untimed "$name/split.jsonl") >/dev/null && [ "$(wc -l <"$name/full.jsonl")" = 6 ]; then
    ok "$name: 6 metrics lines identical to the uninterrupted run ($(grep -c val_loss "$name/full.jsonl") with validation)"
  else
    bad "$name: metrics differ"; diff <(untimed "$name/full.jsonl") <(untimed "$name/split.jsonl")
  fi
  if cmp -s "$name/full.params" "$name/split.params"; then ok "$name: final parameters bit-identical"
  else bad "$name: final parameters differ"; fi
}
check_layout one_rank 1 1
check_layout tp2_pp2 4 2 --pipeline-model-parallel-size 2
check_layout pp2_vp2_dp2 4 1 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
# mixed precision: the bf16 weight copies are remade from the loaded fp32 weights; fp16 from a
# scale that overflows at first (2^24: skips, the hysteresis counting down, a halving) and a forced
# overflow after the resume: the loss scale, its trackers and the skipped count are saved
check_layout bf16_tp2_pp2 4 2 --pipeline-model-parallel-size 2 --bf16
check_layout fp16_one_rank 1 1 --debug-overflow-iteration 5 --fp16 --initial-loss-scale 16777216
# a mixture of experts (docs/moe.md): the router and the stacked experts saved and loaded, the
# router losses on
MOE=(--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64 --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3)
check_layout moe_one_rank 1 1 "${MOE[@]}"
check_layout moe_pp2_ep2 4 1 --pipeline-model-parallel-size 2 --expert-model-parallel-size 2 "${MOE[@]}"
# expert parallelism 2 x expert data parallelism 2 with the distributed optimizer: each rank saves its
# pieces of the dense tensors (over dp 4) and of its experts (over the expert-data-parallel pair)
check_layout moe_distopt_ep2_dp4 4 1 --expert-model-parallel-size 2 --use-distributed-optimizer "${MOE[@]}"
# DeepSeek-V3's expert bias (moved each iteration, no gradient) saved and loaded with the router
check_layout moe_bias_dp2 2 1 --num-experts 4 --moe-router-topk 2 --moe-router-score-function sigmoid \
  --moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-2
# its metrics: in every layer the tokens per expert sum to k x the global batch's 8 x 16 tokens,
# and pp 2 x dp 2 counts the very tokens one rank does, with the same losses of the router
if out=$(python3 - moe_one_rank/full.jsonl moe_pp2_ep2/full.jsonl <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(f)] for f in sys.argv[1:3])
for x, y in zip(a, b):
    assert len(x["tokens_per_expert"]) == 4 and all(sum(l) == 2 * 8 * 16 for l in x["tokens_per_expert"]), x
    assert x["tokens_per_expert"] == y["tokens_per_expert"], (x["tokens_per_expert"], y["tokens_per_expert"])
    for k in ("load_balancing_loss", "z_loss", "expert_load_max_mean"):
        assert abs(x[k] - y[k]) <= 1e-5 * abs(x[k]), (k, x[k], y[k])
print("iteration 6: tokens per expert", a[-1]["tokens_per_expert"], "load balancing loss %.4f" % a[-1]["load_balancing_loss"])
PY
); then ok "MoE metrics: $out"; else bad "MoE metrics"; echo "$out"; fi
# --moe-layer-freq: dense and MoE layers mixed ([0,1,1,0]: each stage of pp 2 holds one of each),
# the expert bias moving; meta.json holds the list, the metrics the MoE layers only (2), each
# summing to k x the batch's tokens
MIXED=(--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64 --moe-aux-loss-coeff 1e-2
       --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-2)
check_layout moe_mixed_pp2 2 1 --pipeline-model-parallel-size 2 "${MIXED[@]}" --moe-layer-freq "[0,1,1,0]"
if out=$(python3 - moe_mixed_pp2/full.jsonl moe_mixed_pp2/ckpt/iter_0000006/meta.json <<'PY'
import json, sys
for x in (json.loads(l) for l in open(sys.argv[1])):
    assert len(x["tokens_per_expert"]) == 2 and all(sum(l) == 2 * 8 * 16 for l in x["tokens_per_expert"]), x
    assert len(x["expert_load_max_mean_per_layer"]) == 2, x
freq = json.load(open(sys.argv[2]))["model"]["moe_layer_freq"]
assert freq == [0, 1, 1, 0], freq
print("meta.json moe_layer_freq", freq, "tokens per expert", x["tokens_per_expert"])
PY
); then ok "mixed MoE metrics and meta.json: $out"; else bad "mixed MoE metrics and meta.json"; echo "$out"; fi
# ... loaded with other MoE layers: exit 2 before anything is allocated, naming both; the flag
# left out: the checkpoint's layers, noted
train 2 1 --train-iters 7 --pipeline-model-parallel-size 2 --load moe_mixed_pp2/ckpt "${MIXED[@]}" --moe-layer-freq 2
rc=$?
want="--moe-layer-freq 2 differs from the checkpoint's moe_layer_freq [0, 1, 1, 0] (moe_mixed_pp2/ckpt/iter_0000006/meta.json)"
if [ "$rc" = 2 ] && [ "$(grep -cF -- "$want" "$last_log")" = 1 ] && ! grep -q "parameters" "$last_log"; then
  ok "other MoE layers: exit 2, once: $want"
else bad "other MoE layers: exit $rc, want 2 and once: $want"; tail -3 "$last_log"; fi
if train 2 1 --train-iters 7 --pipeline-model-parallel-size 2 --load moe_mixed_pp2/ckpt "${MIXED[@]}" &&
   grep -q "from the checkpoint's meta.json (moe_mixed_pp2/ckpt/iter_0000006/meta.json): moe_layer_freq \[0, 1, 1, 0\]" "$last_log"; then
  ok "--moe-layer-freq left out: the checkpoint's layers, noted"
else bad "--moe-layer-freq left out"; grep -i "checkpoint\|error" "$last_log" | head -5; fi
# ... and with a corrupt moe_layer_freq in meta.json (3 entries for 4 layers): refused, naming the key
cp -r moe_mixed_pp2/ckpt bad_freq && python3 - bad_freq/iter_0000006/meta.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); m["model"]["moe_layer_freq"] = [0, 1, 1]; json.dump(m, open(sys.argv[1], "w"))
PY
train 2 1 --train-iters 7 --pipeline-model-parallel-size 2 --load bad_freq "${MIXED[@]}"
rc=$?
if [ "$rc" != 0 ] && grep -qF "model.moe_layer_freq is not an integer >= 1 nor a list of 0 and 1 with a 1, one a layer of model.num_layers 4: the checkpoint is corrupt" "$last_log"; then
  ok "a corrupt moe_layer_freq: exit $rc, the key named"
else bad "a corrupt moe_layer_freq: exit $rc"; tail -3 "$last_log"; fi
finish
