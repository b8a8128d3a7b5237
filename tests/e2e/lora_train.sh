#!/usr/bin/env bash
# LoRA training (train --lora-rank, docs/finetune.md) on the tiny model of the checkpoint tests,
# Llama-shaped (RMSNorm, rope, SwiGLU, 4 heads in 2 query groups, no biases, untied output):
# - the bad flags refused, exit 2, one line;
# - the trained count (the optimizer's line) is the adapters' hand-counted 8192 elements;
# - the base is bitwise the initial model after training (held against a plain run at lr 0, whose
#   weights are the initial ones), only the adapters and their moments move, the loss falls;
# - convert --to hf writes the adapters merged into the weights, --to peft the adapters in PEFT's
#   format (merged by --merge-lora into the base's export): both score as the LoRA model; GPT-2's
#   --to peft (c_attn stacked) applied by tests/e2e/lora_peft.py in float64 is the merged export;
# - --finetune --lora-rank on a plain checkpoint starts new adapters on that base (its first loss
#   the base's), without --finetune refused;
# - a run stopped at 3 and resumed to 6 is bitwise the uninterrupted run (the LoRA settings read
#   back from meta.json, not given again), one rank, tp 2 x pp 2, and tp 2 under --bf16.
PEFT_PY=$(cd "$(dirname "$0")" && pwd)/lora_peft.py
CKPT_TOKENS=bytes . "$(dirname "$0")/checkpoint_lib.sh"
LLAMA=(--normalization RMSNorm --position-embedding-type rope --swiglu --ffn-hidden-size 64 --group-query-attention
       --num-query-groups 2 --disable-bias-linear --untie-embeddings-and-output-weights)
LORA=(--lora-rank 4 --lora-alpha 16 --lora-target-modules all-linear --lora-dropout 0.1)

refused() { # what flags...: exit 2 and one line saying what
  local what=$1; shift
  train 1 1 --train-iters 1 "${LLAMA[@]}" "$@"
  local rc=$?
  # one line: the error (a sanitizer build's leak checker adds its suppression table at exit)
  if [ $rc = 2 ] && [ "$(unsanitized "$last_log" | grep -c .)" = 1 ] &&
     grep -qF -- "$what" "$last_log"; then ok "refused: $(head -1 "$last_log")"
  else bad "$* not refused with exit 2 and one line naming $what (exit $rc)"; cat "$last_log"; fi
}
refused "--lora-alpha needs --lora-rank" --lora-alpha 16
refused "--lora-target-modules: 'c_attn' is not one of" --lora-rank 4 --lora-target-modules q_proj,c_attn
refused "--lora-target-modules is empty" --lora-rank 4 --lora-target-modules ""
refused "--lora-alpha 0: " --lora-rank 4 --lora-alpha 0
# GPT-2's ungated MLP has no gate_proj (its fc is up_proj)
train 1 1 --train-iters 1 --lora-rank 4 --lora-target-modules gate_proj
if [ $? = 2 ] && grep -q "gate_proj: the MLP is not gated" "$last_log"; then ok "refused: $(cat "$last_log")"; else bad "gate_proj on an ungated MLP not refused"; fi

# the adapters, per layer (hidden 32, head size 8, kv width 16, ffn 64, r 4): q 4x32 + 32x4, k and v
# 4x32 + 16x4, o 4x32 + 32x4, gate and up 4x32 + 64x4, down 4x64 + 32x4 = 2048; 4 layers
train 1 1 --train-iters 6 --lr 1e-2 --save lora --save-interval 1 --log-interval 1 "${LLAMA[@]}" "${LORA[@]}" ||
  { bad "LoRA run failed"; cat "$last_log"; }
log=$last_log
if grep -q "both moments of 8192 of its 8192 parameters" "$log"; then ok "optimizer state: the 8192 adapter elements only"
else bad "optimizer state not the adapters' 8192: $(grep 'optimizer:' "$log")"; fi
first=$(grep -o 'lm loss: [0-9.E+-]*' "$log" | head -1 | cut -d' ' -f3)
last=$(grep -o 'lm loss: [0-9.E+-]*' "$log" | sed -n 6p | cut -d' ' -f3)
if [ -n "$first" ] && [ -n "$last" ] && awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.05) }'; then ok "loss falls: $first -> $last"
else bad "loss did not fall by 0.05: $first -> $last"; fi
# the initial weights: a plain run at lr 0 changes none of them (AdamW's step and decay are lr x ...)
train 1 1 --train-iters 1 --lr 0 --min-lr 0 --lr-warmup-iters 0 --save init "${LLAMA[@]}" || { bad "lr 0 run failed"; cat "$last_log"; }
"$TRIDENT" checkpoint compare init lora >cmp_init.txt 2>&1
base=$(grep -c "values differ" cmp_init.txt)
frozen=$(grep -c "frozen (LoRA's base)" cmp_init.txt)
if [ "$base" = 0 ] && [ "$frozen" = 31 ]; then ok "after 6 iterations the 31 base tensors are bitwise the initial ones"
else bad "the base moved ($base tensors differ, $frozen seen frozen)"; cat cmp_init.txt; fi
"$TRIDENT" checkpoint compare lora/iter_0000001 lora >cmp_12.txt 2>&1
moved=$(grep "values differ" cmp_12.txt | grep -c "lora_[AB]")
other=$(grep "values differ" cmp_12.txt | grep -vc "lora_[AB]")
# 56 adapter tensors (4 layers x 7 modules x A, B), each with its two moments
if [ "$moved" = 168 ] && [ "$other" = 0 ]; then ok "iterations 2-6 moved the 56 adapter tensors and their moments, nothing else"
else bad "iterations 2-6 moved $moved adapter entries (want 168) and $other others"; cat cmp_12.txt; fi

# LoRA on a mixture of experts' attention: the experts, the router and the shared expert frozen,
# bitwise the initial ones after training (against a plain run at lr 0), only the adapters moving
MOE=(--swiglu --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64 --moe-shared-expert-intermediate-size 32
     --moe-shared-expert-gate --moe-aux-loss-coeff 1e-2)
train 1 1 --train-iters 3 --lr 1e-2 --save moe_lora --save-interval 1 "${MOE[@]}" --lora-rank 4 \
  --lora-target-modules q_proj,k_proj,v_proj,o_proj || { bad "MoE LoRA run failed"; cat "$last_log"; }
train 1 1 --train-iters 1 --lr 0 --min-lr 0 --lr-warmup-iters 0 --save moe_init "${MOE[@]}" || { bad "MoE lr 0 run failed"; cat "$last_log"; }
"$TRIDENT" checkpoint compare moe_init moe_lora >cmp_moe.txt 2>&1
"$TRIDENT" checkpoint compare moe_lora/iter_0000001 moe_lora >cmp_moe12.txt 2>&1
frozen=$(grep -c "frozen (LoRA's base)" cmp_moe.txt) experts=$(grep "frozen (LoRA's base)" cmp_moe.txt | grep -c "mlp")
moved=$(grep "values differ" cmp_moe12.txt | grep -c "lora_[AB]") other=$(grep "values differ" cmp_moe12.txt | grep -vc "lora_[AB]")
# 4 layers x 4 modules x A, B = 32 adapter tensors, each with its two moments
if [ "$(grep -c "values differ" cmp_moe.txt)" = 0 ] && [ "$experts" -ge 4 ] && [ "$moved" = 96 ] && [ "$other" = 0 ]; then
  ok "MoE attention LoRA: the $frozen base tensors ($experts of the MoE MLPs) bitwise the initial ones, the 32 adapters and their moments moved"
else bad "MoE attention LoRA: base differences $(grep -c "values differ" cmp_moe.txt), $frozen frozen ($experts MLP), $moved adapter entries moved (want 96), $other others"
  cat cmp_moe.txt cmp_moe12.txt; fi

# convert --to hf of a LoRA checkpoint writes the merged model (PEFT's merge_and_unload): imported
# back, it scores as the LoRA checkpoint itself (eval's loss to its 7 printed digits), unlike the base
evalloss() { "$TRIDENT" eval --load "$1" "${TOKENS[@]}" --split 90,10,0 --split-name valid --seq-length 16 2>&1 |
  grep -o 'eval: loss [0-9.]*'; }
rm -rf merged imported
"$TRIDENT" convert --from trident lora --to hf merged >conv.log 2>&1 && "$TRIDENT" convert --from hf merged --to trident imported   >>conv.log 2>&1 || { bad "convert of the LoRA checkpoint failed"; cat conv.log; }
el=$(evalloss lora) em=$(evalloss imported) eb=$(evalloss init)
if [ -n "$el" ] && [ "$el" = "$em" ] && [ "$el" != "$eb" ]; then ok "merged export scores as the LoRA model ($el; the base: $eb)"
else bad "merged export: '$em', the LoRA model '$el', the base '$eb'"; fi
# ... and GPT-2's fused q|k|v (multi-head attention) and ungated MLP, exported as c_attn / c_fc
train 1 1 --train-iters 4 --lr 1e-2 --save lora_gpt2 --lora-rank 4 --lora-alpha 16 --lora-target-modules all-linear ||
  { bad "GPT-2 LoRA run failed"; cat "$last_log"; }
rm -rf merged2 imported2
"$TRIDENT" convert --from trident lora_gpt2 --to hf merged2 >conv.log 2>&1 &&
  "$TRIDENT" convert --from hf merged2 --to trident imported2 >>conv.log 2>&1 || { bad "GPT-2 convert failed"; cat conv.log; }
el=$(evalloss lora_gpt2) em=$(evalloss imported2)
if [ -n "$el" ] && [ "$el" = "$em" ]; then ok "GPT-2: merged export scores as the LoRA model ($el)"
else bad "GPT-2 merged export: '$em', the LoRA model '$el'"; fi

# convert --to peft: the adapters in PEFT's format; merged into the base's Hugging Face export by
# convert --merge-lora (PEFT's reader and merge, src/ckpt/peft.c) they score as the LoRA model
rm -rf peft base_hf peft_merged
"$TRIDENT" convert --from trident lora --to peft peft >conv.log 2>&1 && "$TRIDENT" convert --from trident init --to hf base_hf \
  >>conv.log 2>&1 && "$TRIDENT" convert --from hf base_hf --to trident peft_merged --merge-lora peft >>conv.log 2>&1 ||
  { bad "--to peft, or merging it, failed"; cat conv.log; }
ep=$(evalloss peft_merged)
if [ -n "$ep" ] && [ "$ep" = "$(evalloss lora)" ] && grep -q '"target_modules":.*"down_proj"' peft/adapter_config.json; then
  ok "--to peft: merged by --merge-lora into the base, scores as the LoRA model ($ep)"
else bad "--to peft: merged '$ep', the LoRA model '$(evalloss lora)'"; cat peft/adapter_config.json; fi
"$TRIDENT" convert --from trident init --to peft peft2 >conv.log 2>&1
if [ $? = 1 ] && [ "$(grep -c . conv.log)" = 1 ] && grep -q "has no LoRA adapters" conv.log; then ok "--to peft without adapters refused: $(cat conv.log)"
else bad "--to peft of a checkpoint without adapters not refused"; cat conv.log; fi
# GPT-2's --to peft (c_attn the rank n r stack of the targeted q, k, v; fan_in_fan_out): the
# adapter applied to the base's --to hf export as PEFT computes it, in float64 in
# tests/e2e/lora_peft.py, is the merged --to hf export bit for bit; all-linear (c_attn rank 12),
# and q_proj,v_proj,down_proj (k's rows of c_attn zero, rank 8; mlp.c_proj padded to rank 8)
train 1 1 --train-iters 1 --lr 0 --min-lr 0 --lr-warmup-iters 0 --save init_gpt2 || { bad "GPT-2 lr 0 run failed"; cat "$last_log"; }
train 1 1 --train-iters 4 --lr 1e-2 --save lora_gpt2_qv --lora-rank 4 --lora-alpha 16 --lora-target-modules q_proj,v_proj,down_proj ||
  { bad "GPT-2 q,v LoRA run failed"; cat "$last_log"; }
rm -rf base2_hf merged3 peft3 peft4
"$TRIDENT" convert --from trident init_gpt2 --to hf base2_hf >conv.log 2>&1 &&
  "$TRIDENT" convert --from trident lora_gpt2_qv --to hf merged3 >>conv.log 2>&1 &&
  "$TRIDENT" convert --from trident lora_gpt2 --to peft peft3 >>conv.log 2>&1 &&
  "$TRIDENT" convert --from trident lora_gpt2_qv --to peft peft4 >>conv.log 2>&1 || { bad "GPT-2 exports failed"; cat conv.log; }
for p in "peft3 merged2 all-linear" "peft4 merged3 q_proj,v_proj,down_proj"; do
  set -- $p
  if python3 "$PEFT_PY" apply "$1" base2_hf "$2" >apply.log 2>&1; then ok "GPT-2 --to peft ($3): $(cat apply.log)"
  else bad "GPT-2 --to peft ($3): PEFT's delta on the base is not the merged export: $(cat apply.log)"; fi
done
if grep -q '"r":[[:space:]]*12\b' peft3/adapter_config.json && grep -q '"lora_alpha":[[:space:]]*48\b' peft3/adapter_config.json &&
   grep -q '"fan_in_fan_out":[[:space:]]*true\b' peft3/adapter_config.json && grep -q '"r":[[:space:]]*8\b' peft4/adapter_config.json &&
   grep -q '"lora_alpha":[[:space:]]*32\b' peft4/adapter_config.json && grep -q '"mlp.c_proj"' peft4/adapter_config.json &&
   ! grep -q '"mlp.c_fc"' peft4/adapter_config.json; then
  ok "GPT-2 adapter_config.json: r 3x4 and 2x4, alpha scaled with it, fan_in_fan_out, the targeted modules"
else bad "GPT-2 adapter_config.json"; cat peft3/adapter_config.json peft4/adapter_config.json; fi
# ... and trident's own PEFT reader (--merge-lora) merges it into a model that scores as the LoRA one
rm -rf peft4_merged
"$TRIDENT" convert --from hf base2_hf --to trident peft4_merged --merge-lora peft4 >conv.log 2>&1 || { bad "--merge-lora of GPT-2's adapter failed"; cat conv.log; }
el=$(evalloss lora_gpt2_qv) em=$(evalloss peft4_merged)
if [ -n "$el" ] && [ "$el" = "$em" ]; then ok "GPT-2 --to peft merged by --merge-lora scores as the LoRA model ($el)"
else bad "GPT-2 --to peft merged by --merge-lora: '$em', the LoRA model '$el'"; fi
# a model that is neither (LayerNorm with a gated MLP): refused, one line
train 1 1 --train-iters 1 --swiglu --save lora_ln_glu --lora-rank 4 || { bad "LayerNorm+SwiGLU LoRA run failed"; cat "$last_log"; }
"$TRIDENT" convert --from trident lora_ln_glu --to peft peft5 >conv.log 2>&1
if [ $? = 1 ] && [ "$(grep -c . conv.log)" = 1 ] && grep -q "is neither GPT-2, Megatron-BERT nor a Llama-family model" conv.log; then ok "--to peft of another model refused: $(cat conv.log)"
else bad "--to peft of a LayerNorm+SwiGLU model not refused"; cat conv.log; fi

# LoRA on a pretrained base: a plain run's checkpoint, then --finetune --lora-rank: the adapters
# new (B zero: the first loss is the base's, as a plain --finetune's), the base left as loaded
train 1 1 --train-iters 2 --save base "${LLAMA[@]}" || { bad "base run failed"; cat "$last_log"; }
train 1 1 --train-iters 3 --load base --finetune --log-interval 1 "${LLAMA[@]}" || { bad "plain finetune failed"; cat "$last_log"; }
plain=$(grep -o 'lm loss: [0-9.E+-]*' "$last_log" | head -1)
train 1 1 --train-iters 3 --load base --finetune --save ft --log-interval 1 "${LLAMA[@]}" "${LORA[@]}" ||
  { bad "LoRA finetune failed"; cat "$last_log"; }
lora1=$(grep -o 'lm loss: [0-9.E+-]*' "$last_log" | head -1)
if [ -n "$plain" ] && [ "$plain" = "$lora1" ]; then ok "--finetune --lora-rank on a base: first loss the base's ($lora1)"
else bad "--finetune --lora-rank: first loss '$lora1', plain finetune's '$plain'"; fi
"$TRIDENT" checkpoint compare base ft >cmp_ft.txt 2>&1
if [ "$(grep -c "values differ" cmp_ft.txt)" = 0 ] && [ "$(grep -c "frozen (LoRA's base)" cmp_ft.txt)" = 31 ]; then
  ok "--finetune --lora-rank: the 31 base tensors saved as loaded"
else bad "--finetune --lora-rank changed the base"; cat cmp_ft.txt; fi
train 1 1 --train-iters 3 --load base "${LLAMA[@]}" "${LORA[@]}"
if [ $? = 2 ] && grep -q "has no LoRA adapters: add --finetune" "$last_log"; then ok "--lora-rank on a base without --finetune refused: $(head -1 "$last_log")"
else bad "--lora-rank on a base without --finetune not refused"; cat "$last_log"; fi

check_resume() { # name np tp flags...
  local name=$1 np=$2 tp=$3; shift 3
  train "$np" "$tp" --train-iters 6 --metrics-file "$name.full.jsonl" --dump-params "$name.full.params" "${LLAMA[@]}" \
    "${LORA[@]}" "$@" || { bad "$name: uninterrupted run failed"; cat "$last_log"; return; }
  train "$np" "$tp" --train-iters 6 --exit-interval 3 --save "$name" --metrics-file "$name.split.jsonl" "${LLAMA[@]}" \
    "${LORA[@]}" "$@" || { bad "$name: first half failed"; cat "$last_log"; return; }
  # resumed without the LoRA flags: meta.json gives them
  train "$np" "$tp" --train-iters 6 --load "$name" --metrics-file "$name.split.jsonl" --dump-params "$name.split.params" \
    "${LLAMA[@]}" "$@" || { bad "$name: resumed run failed"; cat "$last_log"; return; }
  grep -q "lora_rank 4, lora_target_modules 127, lora_alpha 16, lora_dropout 0.1" "$last_log" ||
    bad "$name: the resumed run did not take the LoRA settings from meta.json"
  if diff <(untimed "$name.full.jsonl") <(untimed "$name.split.jsonl") >/dev/null && cmp -s "$name.full.params" "$name.split.params"
  then ok "$name: resumed at 3, metrics and final parameters bit-identical to the uninterrupted run"
  else bad "$name: the resumed run differs"; diff <(untimed "$name.full.jsonl") <(untimed "$name.split.jsonl"); fi
}
check_resume resume_one_rank 1 1
# the trainer's TFLOP/s counts LoRA's work (gpt_flops_per_iteration): by hand a token, forward FLOPs
# (2 a multiply-add) of the frozen weights 2 x 32 x (32 + 32 + 32 + 128) + 2 x 64 x 32 = 18432 a
# layer, 2 passes (no weight gradient); the attention core 2 x 2 x 16 x 32 = 2048, 3 passes; the
# adapters 2 x 4 x (64 + 48 + 48 + 64 + 96 + 96 + 96) = 4096, 3 passes; the frozen output layer
# 2 x 32 x 512 = 32768, 2 passes: 4 x 55296 + 65536 = 286720 a token, 128 tokens an iteration
fl=$(head -1 resume_one_rank.full.jsonl | sed -E 's/.*"model_tflops_per_rank": ([0-9.e+-]*).*"elapsed_ms": ([0-9.e+-]*).*/\1 \2/')
if awk -v x="$fl" 'BEGIN { split(x, a, " "); f = a[1] * a[2] * 1e9; d = f / 36700160 - 1; exit !(d < 1e-4 && d > -1e-4) }'
then ok "the TFLOP/s line counts LoRA's FLOPs: 36700160 an iteration by hand ($fl)"
else bad "the TFLOP/s line's FLOPs ($fl: TFLOP/s, ms) are not LoRA's 36700160 by hand"; fi
check_resume resume_tp2_pp2 4 2 --pipeline-model-parallel-size 2
check_resume resume_bf16_tp2 2 2 --bf16
finish
