#!/usr/bin/env bash
# LoRA on a mixture of experts' experts (docs/finetune.md), on the tiny Mixtral-shaped model of the
# checkpoint tests (RMSNorm, rope, 4 SwiGLU experts of 64, top 2, no shared expert):
# - the trained count (the optimizer's line) is the hand-counted adapters', experts' included;
# - the base (experts and router too) is bitwise the loaded one after training, only the adapters
#   and their moments move;
# - convert --to hf merges each expert's adapters into its own weights: imported back it scores
#   as the LoRA checkpoint, and generates its greedy text; --to peft writes Mixtral's keys (block_sparse_moe.experts.E.w1/w3/w2),
#   which tests/e2e/lora_peft.py applies to the base's export in float64 to the merged export bit
#   for bit, and which --merge-lora merges into a model scoring as the LoRA checkpoint;
# - --lora-load of that PEFT adapter trains as the LoRA checkpoint loaded with --finetune
#   (metrics bit-identical), on one rank, on tp 2 x ep 2 and on ep 2 x dp 2 with the distributed
#   optimizer;
# - a run stopped at 3 and resumed to 6 is bitwise the uninterrupted run, one rank and ep 2 x tp 2;
# - Qwen2-MoE-shaped (q/k/v biases, a gated shared expert): the shared expert's adapters beside the
#   experts'; the merged --to hf export scores as the LoRA checkpoint, --to peft (mlp.experts.E.* and
#   mlp.shared_expert.* keys) applied in float64 is the merged export bit for bit, and --lora-load of
#   it trains as the LoRA checkpoint, metrics bit-identical, on one rank and tp 2 x ep 2;
# - --lora-dropout with the experts' adapters trains (parallel/layout_lora_experts_drop_* and
#   unit/test_moe hold its masks).
PEFT_PY=$(cd "$(dirname "$0")" && pwd)/lora_peft.py
CKPT_TOKENS=bytes . "$(dirname "$0")/checkpoint_lib.sh"
MIX=(--normalization RMSNorm --position-embedding-type rope --swiglu --group-query-attention --num-query-groups 2
     --disable-bias-linear --untie-embeddings-and-output-weights --num-experts 4 --moe-router-topk 2
     --moe-ffn-hidden-size 64 --moe-aux-loss-coeff 1e-2)
LORA=(--lora-rank 4 --lora-alpha 16 --lora-target-modules all-linear)
losses() { grep -o 'lm loss: [0-9.E+-]*' "$1" | cut -d' ' -f3 | tr '\n' ' '; }
evalloss() { "$TRIDENT" eval --load "$1" "${TOKENS[@]}" --split 90,10,0 --split-name valid --seq-length 16 2>&1 |
  grep -o 'eval: loss [0-9.]*'; }

refused() { # what flags...: exit 2 and one line saying what
  local what=$1; shift
  train 1 1 --train-iters 1 "${MIX[@]}" "$@"
  local rc=$?
  if [ $rc = 2 ] && [ "$(unsanitized "$last_log" | grep -c .)" = 1 ] &&
     grep -qF -- "$what" "$last_log"; then ok "refused: $(head -1 "$last_log")"
  else bad "$* not refused with exit 2 and one line naming $what (exit $rc)"; cat "$last_log"; fi
}

train 1 1 --train-iters 2 --save base "${MIX[@]}" || { bad "base run failed"; cat "$last_log"; }
# per layer (hidden 32, head size 8, kv width 16, r 4): q 4x32 + 32x4, k and v 4x32 + 16x4, o 4x32 +
# 32x4 = 896; each of the 4 experts' gate and up 4x32 + 64x4, down 4x64 + 32x4 = 4 x 1152 = 4608;
# 4 layers: 22016
train 1 1 --train-iters 4 --lr 1e-2 --load base --finetune --save ft --save-interval 1 --log-interval 1 "${MIX[@]}" \
  "${LORA[@]}" || { bad "LoRA run failed"; cat "$last_log"; }
if grep -q "both moments of 22016 of its 22016 parameters" "$last_log"; then ok "optimizer state: the 22016 adapter elements only, the experts' included"
else bad "optimizer state not the adapters' 22016: $(grep 'optimizer:' "$last_log")"; fi
"$TRIDENT" checkpoint compare base ft >cmp_base.txt 2>&1
frozen=$(grep -c "frozen (LoRA's base)" cmp_base.txt) experts=$(grep "frozen (LoRA's base)" cmp_base.txt | grep -c "mlp\.\(experts\|router\)")
if [ "$(grep -c "values differ" cmp_base.txt)" = 0 ] && [ "$experts" = 12 ]; then
  ok "after 4 iterations the $frozen base tensors (the 12 experts' and routers' among them) are bitwise the loaded ones"
else bad "the base moved: $(grep -c "values differ" cmp_base.txt) differ, $frozen frozen ($experts experts' or routers')"; cat cmp_base.txt; fi
"$TRIDENT" checkpoint compare ft/iter_0000001 ft >cmp_12.txt 2>&1
moved=$(grep "values differ" cmp_12.txt | grep -c "experts\.[a-z_]*\.lora_[AB]") other=$(grep "values differ" cmp_12.txt | grep -vc "lora_[AB]")
# 4 layers x 3 expert modules x A, B, each with its two moments
if [ "$moved" = 72 ] && [ "$other" = 0 ]; then ok "iterations 2-4 moved the 24 expert adapter stacks and their moments, no base tensor"
else bad "iterations 2-4 moved $moved expert adapter entries (want 72) and $other others"; cat cmp_12.txt; fi

# the merged export and the PEFT adapter
rm -rf merged imported base_hf peft peft_merged
"$TRIDENT" convert --from trident ft --to hf merged >conv.log 2>&1 && "$TRIDENT" convert --from hf merged --to trident imported \
  >>conv.log 2>&1 && "$TRIDENT" convert --from trident base --to hf base_hf >>conv.log 2>&1 &&
  "$TRIDENT" convert --from trident ft --to peft peft >>conv.log 2>&1 || { bad "the exports failed"; cat conv.log; }
el=$(evalloss ft) em=$(evalloss imported) eb=$(evalloss base)
if [ -n "$el" ] && [ "$el" = "$em" ] && [ "$el" != "$eb" ]; then ok "merged --to hf scores as the LoRA model ($el; the base: $eb)"
else bad "merged --to hf: '$em', the LoRA model '$el', the base '$eb'"; fi
# generation's step (the experts' adapters on the new positions' rows): the LoRA checkpoint's greedy
# text is the merged model's
gen() { "$TRIDENT" generate --load "$1" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$BYTES_TOKENIZER" \
  --prompt "The king" --max-new-tokens 8 --greedy 2>&1 |
  grep -v '^generate:' | unsanitized; }
# (less a sanitizer build's leak-checker suppression table, which it prints at exit)
gl=$(gen ft) gm=$(gen imported)
if [ -n "$gl" ] && [ "$gl" = "$gm" ] && [ "${gl#error}" = "$gl" ]; then ok "generate: the LoRA checkpoint's greedy text is the merged model's ('$gl')"
else bad "generate: the LoRA checkpoint '$gl', the merged model '$gm'"; fi
# ... and on tp 2 (each expert's adapters split over tp: down's low-rank sum over the group)
g2=$(OMPI_MCA_orte_tmpdir_base=$(session_base) timeout 60 "${MPIRUN[@]}" -np 2 "$TRIDENT" generate --load ft \
  --tensor-model-parallel-size 2 --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$BYTES_TOKENIZER" \
  --prompt "The king" --max-new-tokens 8 --greedy 2>/dev/null | tr -d '\n')
if [ -n "$gl" ] && [ "$g2" = "$gl" ]; then ok "generate on tp 2: the same greedy text"
else bad "generate on tp 2: '$g2', one rank '$gl'"; fi
if python3 "$PEFT_PY" apply peft base_hf merged >apply.log 2>&1 && grep -q "^64 modules applied" apply.log; then
  ok "--to peft (Mixtral's expert keys) applied in float64: $(cat apply.log)"
else bad "--to peft applied to the base is not the merged export: $(cat apply.log)"; fi
if grep -q '"w1"' peft/adapter_config.json && grep -q '"w2"' peft/adapter_config.json && grep -q '"w3"' peft/adapter_config.json &&
   ! grep -q '"gate_proj"' peft/adapter_config.json; then ok "adapter_config.json: target_modules name Mixtral's w1, w3, w2"
else bad "adapter_config.json target_modules"; cat peft/adapter_config.json; fi
"$TRIDENT" convert --from hf base_hf --to trident peft_merged --merge-lora peft >conv.log 2>&1 || { bad "--merge-lora failed"; cat conv.log; }
ep=$(evalloss peft_merged)
if [ -n "$ep" ] && [ "$ep" = "$el" ]; then ok "--merge-lora of the Mixtral adapter scores as the LoRA model ($ep)"
else bad "--merge-lora: '$ep', the LoRA model '$el'"; fi

# --lora-load of the PEFT adapter: the same run as the LoRA checkpoint's weights with --finetune
roundtrip() { # name np tp flags...
  local name=$1 np=$2 tp=$3; shift 3
  train "$np" "$tp" --train-iters 3 --lr 1e-2 --load ft --finetune --log-interval 1 --metrics-file "$name.ckpt.jsonl" \
    "${MIX[@]}" "$@" || { bad "$name: --finetune of the LoRA checkpoint failed"; cat "$last_log"; return; }
  local want; want=$(losses "$last_log")
  train "$np" "$tp" --train-iters 3 --lr 1e-2 --load base --finetune --lora-load peft --log-interval 1 \
    --metrics-file "$name.peft.jsonl" "${MIX[@]}" "$@" || { bad "$name: --lora-load failed"; cat "$last_log"; return; }
  if [ -n "$want" ] && diff <(untimed "$name.ckpt.jsonl") <(untimed "$name.peft.jsonl") >/dev/null; then
    ok "$name: --lora-load of the Mixtral adapter trains as the LoRA checkpoint (losses $want, metrics bit-identical)"
  else bad "$name: --lora-load '$(losses "$last_log")', the LoRA checkpoint '$want'"; fi
}
roundtrip one_rank 1 1
roundtrip tp2_ep2 4 2 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall
roundtrip distopt_ep2_dp2 4 1 --expert-model-parallel-size 2 --use-distributed-optimizer

check_resume() { # name np tp flags...
  local name=$1 np=$2 tp=$3; shift 3
  train "$np" "$tp" --train-iters 6 --metrics-file "$name.full.jsonl" --dump-params "$name.full.params" "${MIX[@]}" \
    "${LORA[@]}" "$@" || { bad "$name: uninterrupted run failed"; cat "$last_log"; return; }
  train "$np" "$tp" --train-iters 6 --exit-interval 3 --save "$name" --metrics-file "$name.split.jsonl" "${MIX[@]}" \
    "${LORA[@]}" "$@" || { bad "$name: first half failed"; cat "$last_log"; return; }
  train "$np" "$tp" --train-iters 6 --load "$name" --metrics-file "$name.split.jsonl" --dump-params "$name.split.params" \
    "${MIX[@]}" "$@" || { bad "$name: resumed run failed"; cat "$last_log"; return; }
  if diff <(untimed "$name.full.jsonl") <(untimed "$name.split.jsonl") >/dev/null && cmp -s "$name.full.params" "$name.split.params"
  then ok "$name: resumed at 3, metrics and final parameters bit-identical to the uninterrupted run"
  else bad "$name: the resumed run differs"; diff <(untimed "$name.full.jsonl") <(untimed "$name.split.jsonl"); fi
}
check_resume resume_one_rank 1 1
check_resume resume_ep2_tp2 4 2 --expert-model-parallel-size 2

# Qwen2-MoE: adapters on the shared expert (mlp.shared_expert.gate_proj ...) beside the experts'
QWEN=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear --add-qkv-bias
      --untie-embeddings-and-output-weights --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 16
      --moe-shared-expert-intermediate-size 24 --moe-shared-expert-gate --moe-aux-loss-coeff 1e-2)
rm -rf qbase qft qmerged qimported qbase_hf qpeft qpeft_merged
train 1 1 --train-iters 2 --save qbase "${QWEN[@]}" || { bad "Qwen2-MoE base run failed"; cat "$last_log"; }
train 1 1 --train-iters 4 --lr 1e-2 --load qbase --finetune --save qft "${QWEN[@]}" "${LORA[@]}" --lora-dropout 0.1 ||
  { bad "Qwen2-MoE LoRA run failed"; cat "$last_log"; }
"$TRIDENT" checkpoint compare qbase qft >qcmp.txt 2>&1
"$TRIDENT" convert --from trident qft --to hf qmerged >qconv.log 2>&1 && "$TRIDENT" convert --from hf qmerged --to trident qimported \
  >>qconv.log 2>&1 && "$TRIDENT" convert --from trident qbase --to hf qbase_hf >>qconv.log 2>&1 &&
  "$TRIDENT" convert --from trident qft --to peft qpeft >>qconv.log 2>&1 || { bad "the Qwen2-MoE exports failed"; cat qconv.log; }
if [ "$(grep -c "values differ" qcmp.txt)" = 0 ] && [ "$(grep "frozen (LoRA's base)" qcmp.txt | grep -c "shared_expert\.")" -ge 4 ]; then
  ok "Qwen2-MoE: after training the base (the shared experts' among it) is bitwise as loaded"
else bad "Qwen2-MoE: the base moved or the shared expert is not frozen"; cat qcmp.txt; fi
ql=$(evalloss qft) qm=$(evalloss qimported) qb=$(evalloss qbase)
if [ -n "$ql" ] && [ "$ql" = "$qm" ] && [ "$ql" != "$qb" ]; then ok "Qwen2-MoE: merged --to hf scores as the LoRA model ($ql; the base: $qb)"
else bad "Qwen2-MoE merged --to hf: '$qm', the LoRA model '$ql', the base '$qb'"; fi
# per layer: q, k, v, o 4 modules; the 4 experts' gate, up, down (4 x 3 = 12); the shared expert's 3
if python3 "$PEFT_PY" apply qpeft qbase_hf qmerged >qapply.log 2>&1 && grep -q "^76 modules applied" qapply.log &&
   python3 - qpeft/adapter_model.safetensors <<'PY'
import json, struct, sys
with open(sys.argv[1], 'rb') as f:
    n = struct.unpack('<Q', f.read(8))[0]
    keys = json.loads(f.read(n))
want = [f"base_model.model.model.layers.{l}.mlp.shared_expert.{m}.lora_{w}.weight"
        for l in range(4) for m in ("gate_proj", "up_proj", "down_proj") for w in "AB"]
sys.exit(0 if all(k in keys for k in want) else 1)
PY
then ok "Qwen2-MoE --to peft (experts' and shared expert's keys) applied in float64: $(cat qapply.log)"
else bad "Qwen2-MoE --to peft applied to the base is not the merged export: $(cat qapply.log)"; fi
"$TRIDENT" convert --from hf qbase_hf --to trident qpeft_merged --merge-lora qpeft >qconv.log 2>&1 || { bad "Qwen2-MoE --merge-lora failed"; cat qconv.log; }
qp=$(evalloss qpeft_merged)
if [ -n "$qp" ] && [ "$qp" = "$ql" ]; then ok "Qwen2-MoE: --merge-lora of the adapter (shared expert's modules too) scores as the LoRA model ($qp)"
else bad "Qwen2-MoE --merge-lora: '$qp', the LoRA model '$ql'"; fi
qroundtrip() { # name np tp flags...
  local name=$1 np=$2 tp=$3; shift 3
  train "$np" "$tp" --train-iters 3 --lr 1e-2 --load qft --finetune --log-interval 1 --metrics-file "$name.ckpt.jsonl" \
    "${QWEN[@]}" "$@" || { bad "$name: --finetune of the LoRA checkpoint failed"; cat "$last_log"; return; }
  local want; want=$(losses "$last_log")
  train "$np" "$tp" --train-iters 3 --lr 1e-2 --load qbase --finetune --lora-load qpeft --lora-dropout 0.1 --log-interval 1 \
    --metrics-file "$name.peft.jsonl" "${QWEN[@]}" "$@" || { bad "$name: --lora-load failed"; cat "$last_log"; return; }
  if [ -n "$want" ] && diff <(untimed "$name.ckpt.jsonl") <(untimed "$name.peft.jsonl") >/dev/null; then
    ok "$name: --lora-load of the Qwen2-MoE adapter trains as the LoRA checkpoint (losses $want, metrics bit-identical)"
  else bad "$name: --lora-load '$(losses "$last_log")', the LoRA checkpoint '$want'"; fi
}
qroundtrip qwen_one_rank 1 1
qroundtrip qwen_tp2_ep2 4 2 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall
finish
