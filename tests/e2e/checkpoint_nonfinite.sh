#!/usr/bin/env bash
# Non-finite numbers in a model are refused where they come in and where they come out:
#  - `trident convert --from hf` of a model.safetensors holding a NaN (or an infinity) in one
#    weight: exit 1, one line naming the file, the tensor, the element and its value, and nothing
#    written (the files are patched here with Python's struct, after the published safetensors
#    layout: an 8-byte little-endian header length, the JSON header, the raw data);
#  - a model whose weights are finite but whose logits overflow float32 (the final LayerNorm's
#    bias 3e38 and every embedding 1: each logit is 32 x 3e38): it converts, but `trident generate`
#    exits 1 with one line naming the prompt and the position instead of printing what the
#    argmax of infinities gives, and `trident serve` answers such a request 500 with the reason
#    (a stream: an error event), and goes on serving;
#  - `trident train --load` of that model stops at its first iteration (the NaN check of the loop).
# Environment: checkpoint.cmake's.
CKPT_TOKENS=bytes
. "$(dirname "$0")/checkpoint_lib.sh"
TOK=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$BYTES_TOKENIZER")
train 1 1 --train-iters 1 --save ck >/dev/null || { bad "training"; cat "$last_log"; }
"$TRIDENT" convert --from trident ck --to hf hf >conv.log 2>&1 || { bad "export"; cat conv.log; }

# patch SRC DST NAME INDEX VALUE [NAME INDEX VALUE ...]: DST is SRC with element INDEX (or "all")
# of F32 tensor NAME set to VALUE
patch() {
  mkdir -p "$2" && cp "$1/config.json" "$2/" && python3 - "$@" <<'PY'
import json, shutil, struct, sys
src, dst, edits = sys.argv[1], sys.argv[2], sys.argv[3:]
raw = bytearray(open(src + "/model.safetensors", "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
for name, index, value in zip(edits[0::3], edits[1::3], edits[2::3]):
    t = h[name]
    assert t["dtype"] == "F32", t
    b, e = t["data_offsets"]
    idx = range((e - b) // 4) if index == "all" else [int(index)]
    for i in idx:
        struct.pack_into("<f", raw, 8 + n + b + 4 * i, float(value))
open(dst + "/model.safetensors", "wb").write(raw)
PY
}

# 1. a NaN and an infinity in the weights: refused on import, nothing written
W=transformer.h.2.mlp.c_fc.weight # [32, 128] (GPT-2's Conv1D layout): element 133 is row 1, column 5
patch hf nan $W 133 nan && patch hf inf transformer.ln_f.bias 7 inf
for k in nan inf; do
  out=$("$TRIDENT" convert --from hf $k --to trident ${k}_ck 2>&1); rc=$?
  if [ $k = nan ]; then want="error: nan/model.safetensors: tensor $W holds a non-finite value: element 133 (row 1, column 5) of 4096 is nan"
  else want="error: inf/model.safetensors: tensor transformer.ln_f.bias holds a non-finite value: element 7 of 32 is inf"; fi
  out=$(unsanitized <<<"$out")
  if [ "$rc" = 1 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -qF -- "$want" <<<"$out" && [ ! -e ${k}_ck/latest_checkpointed_iteration.txt ]; then
    ok "a weight $k: convert refused, exit 1, nothing written: $out"
  else bad "a weight $k: exit $rc: $out"; fi
done

# 2. finite weights, overflowing logits: converted, then refused where they are sampled
patch hf big transformer.ln_f.bias all 3e38 transformer.wte.weight all 1
"$TRIDENT" convert --from hf big --to trident big_ck >big.log 2>&1 && ok "finite weights that overflow convert" ||
  { bad "convert of the overflowing model"; cat big.log; }
out=$("$TRIDENT" generate --load big_ck "${TOK[@]}" --prompt "First" --max-new-tokens 4 --greedy 2>&1); rc=$?
# "First" is 5 bytes: the logits at position 4 choose the first new token
want="error: prompt 1: the model's logits at position 4 (0 generated) hold a NaN or an infinity"
if [ "$rc" = 1 ] && [ "$(grep -c 'error:' <<<"$out")" = 1 ] && grep -qF -- "$want" <<<"$out" && ! grep -q '!!' <<<"$out"; then
  ok "generate on overflowing logits: exit 1: $(grep error: <<<"$out")"
else bad "generate on overflowing logits: exit $rc: $out"; fi
out=$(timeout $((60 * ${TD_TIME_SCALE:-1})) "${MPIRUN[@]}" -np 2 "$TRIDENT" generate --load big_ck "${TOK[@]}" --pipeline-model-parallel-size 2 \
  --prompt "First" "Second!" --max-new-tokens 4 --greedy 2>&1); rc=$?
if [ "$rc" = 1 ] && [ "$(grep -c 'error:' <<<"$out")" = 1 ] &&
   grep -qF "error: prompt 1 (of the batch): the model's logits at position 4 (0 generated) hold" <<<"$out" &&
   grep -qF "2 of 2 prompts stopped" <<<"$out"; then
  ok "the same in pp 2 with two prompts: exit 1, one line: $(grep -o 'error: prompt 1 (of the batch)' <<<"$out")"
else bad "pp 2, two prompts: exit $rc: $out"; fi

# serve: a 500 naming the reason for each API, an error event for a stream; still serving after
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$TRIDENT" serve --load big_ck "${TOK[@]}" --port "$port" >serve.log 2>&1 &
srv=$!
for _ in $(seq 1 300); do
  curl -s -o /dev/null "http://127.0.0.1:$port/api" && break
  sleep 0.1
done
req() { curl -s -m 30 -w '\n%{http_code}' -X "$1" "http://127.0.0.1:$port$2" -d "$3"; }
for call in "PUT /api {\"prompts\":[\"First\"],\"tokens_to_generate\":4}" \
            "POST /v1/completions {\"prompt\":\"First\",\"max_tokens\":4}"; do
  set -- $call
  out=$(req "$1" "$2" "$3")
  if [ "$(tail -1 <<<"$out")" = 500 ] && head -1 <<<"$out" | jq -e '.error | test("logits for prompt 1 hold a NaN or an infinity")' >/dev/null; then
    ok "serve $1 $2: 500: $(head -1 <<<"$out")"
  else bad "serve $1 $2: $out"; fi
done
out=$(req POST /v1/completions '{"prompt":"First","max_tokens":4,"stream":true}')
if [ "$(tail -1 <<<"$out")" = 200 ] && grep -q '^data: {"error":{"message":"the model.s logits for prompt 1 hold a NaN' <<<"$out" &&
   ! grep -q 'DONE' <<<"$out"; then
  ok "serve, streamed: an error event and no [DONE]"
else bad "serve, streamed: $out"; fi
kill -TERM $srv; wait $srv; rc=$?
if [ "$rc" = 0 ] && grep -q "serve: request 3: the model's logits" serve.log; then ok "the server answered all three and stopped cleanly (exit 0)"
else bad "the server: exit $rc"; tail -3 serve.log; fi

# 3. training from it stops at once (the loop's check, not a new one)
if train 1 1 --train-iters 2 --load big_ck --finetune >/dev/null; then bad "training from the overflowing model went on"
else
  grep -qE "error: iteration 1: the gradient norm is -?(nan|inf) \(NaN or Inf\); the first iteration from the loaded checkpoint: check its weights" "$last_log" &&
    ok "train --load of it: stopped at iteration 1: $(grep -o 'error: .*' "$last_log" | head -1)" ||
    { bad "train --load of it"; tail -3 "$last_log"; }
fi
finish
