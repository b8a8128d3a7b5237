#!/usr/bin/env bash
# trident convert through the binary: a checkpoint trained in tp2 x pp2 and the same state
# re-saved in pp2 x 2 virtual stages export to byte-identical Hugging Face files; hf -> trident
# gives back every tensor bit-identical (`trident checkpoint compare`, the word embedding over
# its real rows); a converted checkpoint fine-tunes (--finetune) in another layout; a
# Qwen2-MoE-shaped mixture of experts goes out as Qwen2MoeForCausalLM and comes back bit-identical;
# bad invocations and configs trident cannot compute are refused. (Logits of converted models against an independent reference:
# tests/unit/test_checkpoint_hf.c.)
. "$(dirname "$0")/checkpoint_lib.sh"
train 4 2 --pipeline-model-parallel-size 2 --train-iters 3 --save src >/dev/null || { bad "source run"; cat "$last_log"; }
train 2 1 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --train-iters 3 --load src \
  --save vp >/dev/null || { bad "re-save run"; cat "$last_log"; }
for s in src vp; do
  "$TRIDENT" convert --from trident $s --to hf hf_$s >conv_$s.log 2>&1 || { bad "convert $s"; cat conv_$s.log; }
done
if cmp -s hf_src/model.safetensors hf_vp/model.safetensors && cmp -s hf_src/config.json hf_vp/config.json; then
  ok "tp2 x pp2 and pp2 x vp2 checkpoints export to identical files ($(stat -c %s hf_src/model.safetensors) bytes)"
else bad "exports of the same state from two layouts differ"; fi
jq -e '.architectures == ["GPT2LMHeadModel"] and .vocab_size == 50257 and .n_embd == 32 and .n_layer == 4 and
       .n_head == 4 and .n_positions == 16 and .tie_word_embeddings' hf_src/config.json >/dev/null &&
  ok "config.json: GPT2LMHeadModel, vocab 50257, n_embd 32, 4 layers, tied" || bad "config.json"; 
# every number of config.json in the shortest text of its float32 (1e-05, not 9.99999974737875e-06)
if python3 - hf_src/config.json <<'PY'
import json, re, struct, sys
text = open(sys.argv[1]).read()
c = json.loads(text)
want = {"layer_norm_epsilon": "1e-05", "initializer_range": "0.02", "embd_pdrop": "0.1", "attn_pdrop": "0.1"}
got = {k: re.search(r'"%s":\s*([^,\n}]+)' % k, text).group(1) for k in want}
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
ok = got == want and all(f32(c[k]) == f32(float(v)) for k, v in want.items())
floats = re.findall(r":\s*(-?[0-9.]+e?-?[0-9]*)", text)
long = [x for x in floats if len(re.sub(r"[^0-9]", "", x.split("e")[0]).strip("0")) > 9]
print("config.json floats:", got, "longer than 9 digits:", long)
sys.exit(0 if ok and not long else 1)
PY
then ok "config.json: floats in their shortest form (layer_norm_epsilon 1e-05)"; else bad "config.json floats"; fi
before=$(tree_sums hf_src)
out=$("$TRIDENT" convert --from trident src --to hf hf_src 2>&1); rc=$?
if [ "$rc" = 1 ] && grep -qF "error: --to hf hf_src already holds a model (hf_src/config.json)" <<<"$out" &&
   [ "$before" = "$(tree_sums hf_src)" ]; then ok "--to hf into a folder holding a model: refused, exit 1, untouched"
else bad "--to hf into an existing model: exit $rc: $out"; fi

# the model's tokenizer_config.json (chat template, special tokens) goes with the conversion both ways
printf '{"chat_template": "{%% for m in messages %%}<{{ m.role }}>{{ m.content }}{%% endfor %%}{{ eos_token }}", "eos_token": "</s>"}' \
  >hf_src/tokenizer_config.json
printf '[{"role":"user","content":"hi"}]' >chat.json
if "$TRIDENT" convert --from hf hf_src --to trident back >back.log 2>&1 &&
   out=$("$TRIDENT" checkpoint compare src back) && grep -q "bit-identical" <<<"$out"; then
  ok "trident -> hf -> trident: $(tail -1 <<<"$out")"
else bad "round trip:"; cat back.log; echo "${out:-}"; fi
if cmp -s hf_src/tokenizer_config.json back/tokenizer_config.json && grep -q "kept hf_src/tokenizer_config.json" back.log &&
   [ "$("$TRIDENT" chat-template --model-dir back/iter_0000000 --messages chat.json)" = "<user>hi</s>" ] &&
   "$TRIDENT" convert --from trident back/iter_0000000 --to hf hf_back >hf_back.log 2>&1 &&
   cmp -s hf_src/tokenizer_config.json hf_back/tokenizer_config.json; then
  ok "tokenizer_config.json kept by --to trident and by --to hf (of an iter_ folder); chat-template renders from the checkpoint"
else bad "tokenizer_config.json through the conversions"; cat back.log hf_back.log 2>/dev/null; ls back hf_back 2>/dev/null; fi
info=$("$TRIDENT" checkpoint info back 2>&1); rc=$? # its exit code checked, not hidden by a pipe
[ "$rc" = 0 ] && grep -q "optimizer: none" <<<"$info" && ok "the converted checkpoint is weights only" ||
  { bad "converted checkpoint info: exit $rc"; echo "$info"; }

if train 2 2 --train-iters 2 --load back --finetune --metrics-file ft.jsonl && grep -q "weights only" "$last_log" &&
   [ "$(wc -l <ft.jsonl)" = 2 ]; then
  ok "fine-tunes from the converted checkpoint in tp2 (padded vocabulary 50304 -> 50688)"
else bad "fine-tune from the converted checkpoint"; cat "$last_log"; fi
if train 1 1 --train-iters 2 --load back >/dev/null; then bad "loading weights-only without --finetune was accepted"
else grep -q "add --finetune or --no-load-optim" "$last_log" && ok "without --finetune: refused with a hint" ||
  { bad "message without --finetune"; cat "$last_log"; }; fi

# --to trident takes the folder's save lock as a training run does: while another process holds
# it (this shell, through util-linux flock, independent of trident; its holder line written as a
# holder writes it), the convert is refused naming the holder and writes nothing; once free, the
# convert takes the lock (the file names it) and writes its checkpoint
mkdir held && exec 9>held/.trident-save.lock && flock -n 9 && echo "host test, pid $$, since now" >&9
out=$("$TRIDENT" convert --from hf hf_src --to trident held 2>&1); rc=$?
if [ "$rc" = 1 ] && grep -qF "error: --to trident held is in use by another training run (host test, pid $$, since now)" <<<"$out" &&
   [ "$(ls -A held)" = .trident-save.lock ]; then ok "--to trident into a locked folder: refused, exit 1, nothing written: $out"
else bad "--to trident into a locked folder: exit $rc: $out"; ls -A held; fi
flock -u 9 && exec 9>&-
if "$TRIDENT" convert --from hf hf_src --to trident held >held.log 2>&1 && [ -f held/latest_checkpointed_iteration.txt ] &&
   grep -q "^host .*, pid [0-9]*, since " held/.trident-save.lock && ! grep -q "pid $$," held/.trident-save.lock; then
  ok "--to trident into the folder once free: written, the lock file names the convert ($(cat held/.trident-save.lock))"
else bad "--to trident once the lock is free"; cat held.log held/.trident-save.lock; fi

# ... and holds it while it writes, not only while it checks the folder: a convert whose save is
# held (--debug-save-delay-ms, as in e2e/checkpoint_lock) is paused (SIGSTOP) once its
# iter_0000000.tmp exists (the writing phase), so the overlap does not depend on timing; meanwhile
# flock -n cannot take the lock and a second convert into the folder is refused naming the first;
# continued, the first finishes its checkpoint
OMPI_MCA_orte_tmpdir_base=$(session_base) "$TRIDENT" convert --from hf hf_src \
  --to trident writing --debug-save-delay-ms 300 >writing.log 2>&1 &
conv=$!
for k in $(seq 1200); do [ -d writing/iter_0000000.tmp ] || ! kill -0 $conv 2>/dev/null && break; sleep 0.05; done
if kill -STOP $conv 2>/dev/null && [ -d writing/iter_0000000.tmp ]; then
  holder=$(cat writing/.trident-save.lock)
  if flock -n writing/.trident-save.lock true; then bad "flock -n took writing/.trident-save.lock while a convert writes there"
  else ok "the lock is held while the convert writes ($holder)"; fi
  out=$("$TRIDENT" convert --from hf hf_src --to trident writing 2>&1); rc=$?
  if [ "$rc" = 1 ] && grep -qF "error: --to trident writing is in use by another training run ($holder)" <<<"$out"
  then ok "a second convert while the first writes: refused, exit 1"
  else bad "a second convert while the first writes: exit $rc: $out"; fi
else bad "the convert into writing/ ended before its writing phase was seen"; cat writing.log; fi
kill -CONT $conv 2>/dev/null
if wait $conv && [ "$(cat writing/latest_checkpointed_iteration.txt 2>/dev/null)" = 0 ] &&
   out=$("$TRIDENT" checkpoint compare back writing) && grep -q "bit-identical" <<<"$out"; then
  ok "the paused convert finished its checkpoint (bit-identical to back/)"
else bad "the paused convert:"; cat writing.log; echo "${out:-}"; fi

# A Qwen2-MoE-shaped mixture of experts (RMSNorm, rotary, SwiGLU experts, q/k/v biases, a gated
# shared expert) trained on one rank goes out as Qwen2MoeForCausalLM with its experts one tensor
# each, and comes back bit-identical; a config.json trident cannot compute is refused, exit 1.
# (Logits against an independent double-precision forward: tests/unit/test_checkpoint_hf.c.)
QWEN=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear --add-qkv-bias
      --untie-embeddings-and-output-weights --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 16
      --moe-shared-expert-intermediate-size 24 --moe-shared-expert-gate --moe-aux-loss-coeff 1e-2)
if train 1 1 --train-iters 2 "${QWEN[@]}" --save moe >/dev/null &&
   "$TRIDENT" convert --from trident moe --to hf moe_hf >moe_conv.log 2>&1 &&
   jq -e '.architectures == ["Qwen2MoeForCausalLM"] and .num_experts == 4 and .num_experts_per_tok == 2 and
          .moe_intermediate_size == 16 and .shared_expert_intermediate_size == 24 and .norm_topk_prob and .qkv_bias' \
      moe_hf/config.json >/dev/null &&
   python3 - moe_hf/model.safetensors <<'PY'
import json, struct, sys
f = open(sys.argv[1], "rb")
h = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
want = {"model.layers.3.mlp.gate.weight": [4, 32], "model.layers.0.mlp.experts.3.up_proj.weight": [16, 32],
        "model.layers.2.mlp.experts.1.down_proj.weight": [32, 16], "model.layers.1.mlp.shared_expert_gate.weight": [1, 32],
        "model.layers.0.mlp.shared_expert.gate_proj.weight": [24, 32], "model.layers.0.self_attn.k_proj.bias": [32]}
sys.exit(0 if all(h.get(k, {}).get("shape") == v for k, v in want.items()) else 1)
PY
then ok "a Qwen2-MoE-shaped checkpoint exports as Qwen2MoeForCausalLM (experts one tensor each)"
else bad "MoE export"; cat "$last_log" moe_conv.log; fi
if "$TRIDENT" convert --from hf moe_hf --to trident moe_back >moe_back.log 2>&1 &&
   out=$("$TRIDENT" checkpoint compare moe moe_back) && grep -q "bit-identical" <<<"$out"; then
  ok "MoE trident -> hf -> trident: $(tail -1 <<<"$out")"
else bad "MoE round trip:"; cat moe_back.log; echo "${out:-}"; fi
if train 1 1 --train-iters 1 "${QWEN[@]}" --load moe_back --finetune >/dev/null; then
  ok "fine-tunes from the converted MoE checkpoint with the flags it was trained with"
else bad "fine-tune from the converted MoE checkpoint"; cat "$last_log"; fi
# Mixtral-shaped, as Megatron's recipe gives it (the experts' size from --ffn-hidden-size)
MIXTRAL=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
         --untie-embeddings-and-output-weights --num-experts 4 --moe-router-topk 2 --ffn-hidden-size 16)
if train 1 1 --train-iters 2 "${MIXTRAL[@]}" --save mix >/dev/null &&
   "$TRIDENT" convert --from trident mix --to hf mix_hf >mix_conv.log 2>&1 &&
   jq -e '.architectures == ["MixtralForCausalLM"] and .num_local_experts == 4 and .intermediate_size == 16' \
      mix_hf/config.json >/dev/null && "$TRIDENT" convert --from hf mix_hf --to trident mix_back >mix_back.log 2>&1 &&
   out=$("$TRIDENT" checkpoint compare mix mix_back) && grep -q "bit-identical" <<<"$out" &&
   train 1 1 --train-iters 1 "${MIXTRAL[@]}" --load mix_back --finetune >/dev/null &&
   train 1 1 --train-iters 1 "${MIXTRAL[@]}" --moe-ffn-hidden-size 16 --load mix_back --finetune >/dev/null; then
  ok "a Mixtral-shaped checkpoint: out as MixtralForCausalLM, back bit-identical, fine-tunes with or without --moe-ffn-hidden-size"
else bad "Mixtral round trip"; cat "$last_log" mix_conv.log mix_back.log; echo "${out:-}"; fi
mkdir -p moe_bad && cp moe_hf/model.safetensors moe_bad/ && jq '.decoder_sparse_step = 2' moe_hf/config.json >moe_bad/config.json

check_fail() { # name rc text args...
  local name=$1 want=$2 text=$3; shift 3
  out=$("$TRIDENT" convert "$@" 2>&1); rc=$?
  if [ "$rc" = "$want" ] && grep -qF -- "$text" <<<"$out"; then ok "$name: exit $rc: $out"
  else bad "$name: exit $rc: $out"; fi
}
check_fail "unknown direction" 2 "the conversions are" --from trident src --to trident x
check_fail "missing input" 1 "no checkpoint there" --from trident nowhere --to hf x
check_fail "not a GPT-2 folder" 1 "cannot read nowhere/config.json" --from hf nowhere --to trident x
check_fail "Qwen2-MoE with dense layers" 1 "decoder_sparse_step is 2; trident converts Qwen2-MoE models whose every layer is sparse" \
  --from hf moe_bad --to trident x
finish
