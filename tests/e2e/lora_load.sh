#!/usr/bin/env bash
# A PEFT adapter made elsewhere loaded as trainable adapters (train --lora-load, docs/finetune.md),
# on the tiny Llama-shaped model of the checkpoint tests:
# - a LoRA run's adapters exported with convert --to peft and loaded back with --lora-load onto
#   its base train exactly as the LoRA checkpoint itself loaded with --finetune (metrics bitwise
#   equal), on one rank, on tp 2 x pp 2, and on dp 2 with the distributed optimizer under --bf16;
# - a hand-written adapter (tests/e2e/lora_peft.py: BF16, use_rslora, the adapter's name in the
#   keys) loaded at lr 0 and exported again is the same adapter, on one rank and on tp 2 x pp 2
#   (each rank's slices placed where the checkpoint's slicing puts them); its first loss is the
#   merged model's (convert --merge-lora) to float noise, and it trains (the loss falls);
# - what trident cannot train (DoRA, bias, modules_to_save, rank_pattern, GPT-2's c_attn, a layer
#   without a module, a --lora-rank that differs, no --finetune, a --load with adapters) refused
#   with exit 2 and one line.
PEFT_PY=$(cd "$(dirname "$0")" && pwd)/lora_peft.py
CKPT_TOKENS=bytes . "$(dirname "$0")/checkpoint_lib.sh"
LLAMA=(--normalization RMSNorm --position-embedding-type rope --swiglu --ffn-hidden-size 64 --group-query-attention
       --num-query-groups 2 --disable-bias-linear --untie-embeddings-and-output-weights)
LORA=(--lora-rank 4 --lora-alpha 16 --lora-target-modules all-linear --lora-dropout 0.1)
LR0=(--lr 0 --min-lr 0 --lr-warmup-iters 0)
losses() { grep -o 'lm loss: [0-9.E+-]*' "$1" | cut -d' ' -f3 | tr '\n' ' '; }

train 1 1 --train-iters 2 --save base "${LLAMA[@]}" || { bad "base run failed"; cat "$last_log"; }
train 1 1 --train-iters 3 --lr 1e-2 --load base --finetune --save ft "${LLAMA[@]}" "${LORA[@]}" ||
  { bad "LoRA run failed"; cat "$last_log"; }
"$TRIDENT" convert --from trident ft --to peft peft >conv.log 2>&1 || { bad "--to peft failed"; cat conv.log; }

# the exported adapter loaded back: the same run as the LoRA checkpoint's weights with --finetune
roundtrip() { # name np tp flags...
  local name=$1 np=$2 tp=$3; shift 3
  train "$np" "$tp" --train-iters 3 --lr 1e-2 --load ft --finetune --log-interval 1 --metrics-file "$name.ckpt.jsonl" \
    "${LLAMA[@]}" "$@" || { bad "$name: --finetune of the LoRA checkpoint failed"; cat "$last_log"; return; }
  local want; want=$(losses "$last_log")
  train "$np" "$tp" --train-iters 3 --lr 1e-2 --load base --finetune --lora-load peft --log-interval 1 \
    --metrics-file "$name.peft.jsonl" "${LLAMA[@]}" "$@" || { bad "$name: --lora-load failed"; cat "$last_log"; return; }
  grep -q -- "--lora-load peft: r 4, lora_alpha 16, lora_dropout 0.1, modules q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj" "$last_log" ||
    bad "$name: the settings were not taken from adapter_config.json: $(grep -- '--lora-load' "$last_log")"
  if [ -n "$want" ] && diff <(untimed "$name.ckpt.jsonl") <(untimed "$name.peft.jsonl") >/dev/null; then
    ok "$name: --lora-load of the exported adapter trains as the LoRA checkpoint (losses $want, metrics bit-identical)"
  else bad "$name: --lora-load '$(losses "$last_log")', the LoRA checkpoint '$want'"; fi
}
roundtrip one_rank 1 1
roundtrip tp2_pp2 4 2 --pipeline-model-parallel-size 2
roundtrip distopt_dp2_bf16 2 1 --use-distributed-optimizer --bf16
train 1 1 --train-iters 1 --load base --finetune --log-interval 1 "${LLAMA[@]}" "${LORA[@]}"
fresh=$(losses "$last_log")
loaded=$(grep -o '"lm_loss": [0-9.e+-]*' one_rank.peft.jsonl 2>/dev/null | head -1 | cut -d' ' -f2)
if [ -n "$fresh" ] && [ -n "$loaded" ] && awk -v a="$fresh" -v b="$loaded" 'BEGIN { d = a - b; exit !(d > 1e-3 || d < -1e-3) }'
then ok "the loaded adapters matter: first loss $loaded, new adapters' (the base's) $fresh"
else bad "the loaded adapters' first loss '$loaded' is the base's '$fresh'"; fi

# a hand-written adapter: placed exactly (exported again after a step at lr 0), on 1 and 4 ranks
python3 "$PEFT_PY" hand hand ok || bad "writing the hand adapter failed"
for lay in "1 1" "4 2 --pipeline-model-parallel-size 2"; do
  set -- $lay
  np=$1; out=hand_np$np; rm -rf "$out" "$out.peft"
  train "$@" --train-iters 1 "${LR0[@]}" --load base --finetune --lora-load hand --save "$out" "${LLAMA[@]}" ||
    { bad "np $np: --lora-load of the hand adapter failed"; cat "$last_log"; continue; }
  "$TRIDENT" convert --from trident "$out" --to peft "$out.peft" >conv.log 2>&1 || { bad "np $np: --to peft failed"; cat conv.log; }
  if python3 "$PEFT_PY" same hand "$out.peft" >same.log 2>&1; then ok "np $np: the hand adapter placed exactly: $(cat same.log)"
  else bad "np $np: the hand adapter, exported again, differs: $(cat same.log)"; fi
done
# its first loss is the merged model's (peft's merge, --merge-lora), to float noise
train 1 1 --train-iters 1 --load base --finetune --lora-load hand --log-interval 1 "${LLAMA[@]}" ||
  { bad "the hand adapter's run failed"; cat "$last_log"; }
hl=$(losses "$last_log")
rm -rf base_hf merged
"$TRIDENT" convert --from trident base --to hf base_hf >conv.log 2>&1 &&
  "$TRIDENT" convert --from hf base_hf --to trident merged --merge-lora hand >>conv.log 2>&1 || { bad "--merge-lora failed"; cat conv.log; }
train 1 1 --train-iters 1 --load merged --finetune --log-interval 1 "${LLAMA[@]}" || { bad "merged run failed"; cat "$last_log"; }
ml=$(losses "$last_log")
train 1 1 --train-iters 1 --load base --finetune --log-interval 1 "${LLAMA[@]}" || { bad "base run failed"; cat "$last_log"; }
bl=$(losses "$last_log")
if [ -n "$hl" ] && [ -n "$ml" ] && awk -v a="$hl" -v m="$ml" -v b="$bl" \
  'BEGIN { d = a - m; if (d < 0) d = -d; e = a - b; if (e < 0) e = -e; exit !(d <= 2e-5 * m && e > 1e-3) }'; then
  ok "the hand adapter's first loss $hl is the merged model's $ml (the base's: $bl)"
else bad "the hand adapter's first loss '$hl', the merged model's '$ml', the base's '$bl'"; fi
# ... and it trains: the held-out loss (eval, the same documents) falls from the adapter as loaded
evalloss() { "$TRIDENT" eval --load "$1" "${TOKENS[@]}" --split 90,10,0 --split-name valid --seq-length 16 2>&1 |
  grep -o 'eval: loss [0-9.]*' | cut -d' ' -f3; }
train 1 1 --train-iters 10 --lr 1e-2 --load base --finetune --lora-load hand --save hand_trained "${LLAMA[@]}" ||
  { bad "training the hand adapter failed"; cat "$last_log"; }
e0=$(evalloss hand_np1) e1=$(evalloss hand_trained)
if [ -n "$e0" ] && [ -n "$e1" ] && awk -v a="$e0" -v b="$e1" 'BEGIN { exit !(b < a - 0.01) }'; then
  ok "the hand adapter trains: held-out loss $e0 as loaded, $e1 after 10 iterations"
else bad "the hand adapter did not train: held-out loss '$e0' as loaded, '$e1' after"; fi

# refusals: exit 2, one line
refused() { # what flags...
  local what=$1; shift
  train 1 1 --train-iters 1 "${LLAMA[@]}" "$@"
  local rc=$?
  if [ $rc = 2 ] && [ "$(unsanitized "$last_log" | grep -c .)" = 1 ] &&
     grep -qF -- "$what" "$last_log"; then ok "refused: $(head -1 "$last_log")"
  else bad "$* not refused with exit 2 and one line naming '$what' (exit $rc)"; cat "$last_log"; fi
}
for v in dora bias modules_to_save rank_pattern gpt2 missing; do python3 "$PEFT_PY" hand "bad_$v" "$v"; done
refused "use_dora is set" --load base --finetune --lora-load bad_dora
refused 'bias is all: only bias "none"' --load base --finetune --lora-load bad_bias
refused "modules_to_save is set" --load base --finetune --lora-load bad_modules_to_save
refused "rank_pattern is set" --load base --finetune --lora-load bad_rank_pattern
refused "c_attn.lora_A.weight is not a LoRA weight of a Llama-family module" --load base --finetune --lora-load bad_gpt2
refused "layer 2 has no o_proj.lora_A" --load base --finetune --lora-load bad_missing
refused "--lora-rank 8 differs from the adapter's r 2" --load base --finetune --lora-load hand --lora-rank 8
refused "--lora-load needs --load BASE --finetune" --load base --lora-load hand
refused "has LoRA adapters of its own" --load ft --finetune --lora-load hand
refused "cannot read" --load base --finetune --lora-load no_such_folder
# tensors whose shape is not the model's (rank 3 under r 2): exit 1, one line naming the tensor
python3 "$PEFT_PY" hand bad_shape shape
train 1 1 --train-iters 1 "${LLAMA[@]}" --load base --finetune --lora-load bad_shape
rc=$?
if [ $rc = 1 ] && grep -q "down_proj.lora_A.default.weight is BF16 (3, 64) but the model's layers.3.mlp.down_proj.lora_A.weight is (2, 64)" "$last_log" &&
   [ "$(grep -c error "$last_log")" = 1 ]; then ok "a shape that is not the model's: exit 1, $(grep -m1 error "$last_log")"
else bad "a wrong adapter shape: exit $rc"; cat "$last_log"; fi
finish
