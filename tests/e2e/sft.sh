#!/usr/bin/env bash
# SFT data end to end (docs/finetune.md, "SFT data"): preprocess --sft of hand-written chat,
# ShareGPT and prompt/response lines, tokenized by a byte-level tokenizer.json with ChatML's
# <|im_start|>/<|im_end|> as added tokens (one token a byte, so every answer span is worked out
# here by counting characters); the answer masks against those spans; bad lines named file:line
# and nothing left behind; train --sft counting the samples it cuts; the loss of tp 2 and dp 2
# against one rank. Env: TRIDENT.
set -u
SCALE=${TD_TIME_SCALE:-1}
MPIRUN=(mpirun --oversubscribe --bind-to none)
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
expect() {
  local name=$1 want=$2 text=$3; shift 3
  out=$(timeout $((60 * SCALE)) "$@" 2>&1); rc=$?
  if [ "$rc" = "$want" ] && grep -qF -- "$text" <<<"$out"; then ok "$name: exit $rc: $(grep -m1 -F -- "$text" <<<"$out")"
  else bad "$name: exit $rc (expected $want, and '$text' in the output):"; echo "$out" | tail -5; fi
}

D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
python3 "$(dirname "$0")/../parallel/byte_tokenizer.py" "$D/bytes.json" || exit 1
python3 - "$D" <<'EOF' || exit 1
import json, sys
d = sys.argv[1]
t = json.load(open(d + "/bytes.json"))
for i, c in [(257, "<|im_start|>"), (258, "<|im_end|>")]:
    t["added_tokens"].append({"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": True})
    t["model"]["vocab"][c] = i
json.dump(t, open(d + "/chatml.json", "w"), ensure_ascii=False)
# ChatML as Qwen's tokenizer_config.json writes it (without the default system prompt)
tmpl = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
        "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
json.dump({"chat_template": tmpl, "eos_token": "<|im_end|>"}, open(d + "/tokenizer_config.json", "w"))
w = lambda name, rows: open(d + "/" + name, "w").write("".join(json.dumps(r) + "\n" for r in rows))
m = lambda r, c: {"role": r, "content": c}
w("chat.jsonl", [{"messages": [m("system", "S"), m("user", "ab"), m("assistant", "ba"), m("user", "xyz"),
                               m("assistant", "zyx")]},
                 {"messages": [m("user", "hi"), m("assistant", "ih")]}])
w("sharegpt.jsonl", [{"system": "S", "conversations": [{"from": "human", "value": "ab"}, {"from": "gpt", "value": "ba"}]}])
w("pairs.jsonl", [{"input": " ab ", "output": "ba"}, {"input": "x", "output": "yz"}])
w("badjson.jsonl", [{"messages": [m("user", "a"), m("assistant", "b")]}])
open(d + "/badjson.jsonl", "a").write('{"messages": [\n')
w("norole.jsonl", [{"messages": [m("user", "a"), {"content": "b"}]}])
w("noanswer.jsonl", [{"messages": [m("user", "a"), m("bot", "b")]}])
# the training set: "reverse the word" in 64 conversations; a few longer than 32 tokens
import random
random.seed(3)
rows = []
for i in range(64):
    s = "".join(random.choice("abcdefgh") for _ in range(random.randint(3, 9)))
    rows.append({"messages": [m("user", s), m("assistant", s[::-1])]})
w("rev.jsonl", rows)
EOF

T="$TRIDENT"
CHAT=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$D/chatml.json")
PRE=("$T" preprocess --sft "${CHAT[@]}")

# read PREFIX: the samples' tokens and masks as JSON (the MMIDIDX v1 layout, read here)
read_ds() {
  python3 - "$1" <<'EOF'
import json, struct, sys
def read(prefix):
    b = open(prefix + ".idx", "rb").read()
    assert b[:9] == b"MMIDIDX\x00\x00"
    dt, (n, nd) = b[17], struct.unpack_from("<QQ", b, 18)
    sizes, ptrs = struct.unpack_from("<%di" % n, b, 34), struct.unpack_from("<%dq" % n, b, 34 + 4 * n)
    c, w = {1: ("B", 1), 8: ("H", 2), 4: ("i", 4)}[dt]
    data = open(prefix + ".bin", "rb").read()
    return [list(struct.unpack_from("<%d%s" % (s, c), data, p)) for s, p in zip(sizes, ptrs)]
print(json.dumps([read(sys.argv[1]), read(sys.argv[1] + "_answer_mask")]))
EOF
}
# check NAME PREFIX SPANS LENS [FIELDS]: sample k's mask is 1 exactly on SPANS[k] (a JSON list of
# [begin, end) lists), 2 on FIELDS[k] (the truncation field's tokens; none when not given), 0
# elsewhere, and its length is LENS[k]
check() {
  local name=$1 got; got=$(read_ds "$2") || { bad "$name: unreadable"; return; }
  python3 - "$got" "$3" "$4" "${5:-[]}" <<'EOF' && ok "$1: masks on $3, fields on ${5:-[]}, lengths $4" || bad "$1: masks not on $3 / ${5:-[]} (lengths $4)"
import json, sys
(toks, masks), spans, lens, fields = (json.loads(a) for a in sys.argv[1:5])
assert [len(t) for t in toks] == lens == [len(m) for m in masks], ([len(t) for t in toks], lens)
for k, (m, sp) in enumerate(zip(masks, spans)):
    want = [0] * len(m)
    for b, e in sp:
        want[b:e] = [1] * (e - b)
    for b, e in (fields[k] if k < len(fields) else []):
        want[b:e] = [2] * (e - b)
    assert m == want, (m, want)
EOF
}

# chat, sample 1, by characters (one token each; <|im_start|> and <|im_end|> one each):
#   "<|im_start|>system\nS<|im_end|>\n"   1+6+1+1+1+1 = 11 -> 11
#   "<|im_start|>user\nab<|im_end|>\n"     1+4+1+2+1+1 = 10 -> 21
#   "<|im_start|>assistant\n"              1+9+1       = 11 -> 32 (the generation prompt: not the answer)
#   "ba<|im_end|>\n"                       2+1+1       =  4 -> 36 (the answer: [32, 36))
#   "<|im_start|>user\nxyz<|im_end|>\n"    1+4+1+3+1+1 = 11 -> 47
#   "<|im_start|>assistant\n"                            11 -> 58
#   "zyx<|im_end|>\n"                                     5 -> 63 (the answer: [58, 63))
# sample 2: user "hi" 10, generation prompt 11 -> 21, "ih<|im_end|>\n" 4 -> 25
expect "chat: preprocess" 0 "2 samples, 88 tokens, 13 of them the answer's" \
  "${PRE[@]}" --sft-format chat --chat-template "$D/tokenizer_config.json" --input "$D/chat.jsonl" --output-prefix "$D/chat"
check "chat" "$D/chat_sft_document" '[[[32,36],[58,63]],[[21,25]]]' '[63,25]'
# the folder holding tokenizer_config.json works as the file does
expect "chat: --chat-template FOLDER" 0 "2 samples" \
  "${PRE[@]}" --chat-template "$D" --input "$D/chat.jsonl" --output-prefix "$D/chatdir"
cmp -s "$D/chat_sft_document_answer_mask.bin" "$D/chatdir_sft_document_answer_mask.bin" &&
  ok "chat: the folder's masks are the file's" || bad "chat: the folder's masks differ"

# ShareGPT: "system" first, human -> user, gpt -> assistant: chat sample 1's first 36 tokens
expect "sharegpt: preprocess" 0 "1 samples, 36 tokens, 4 of them" \
  "${PRE[@]}" --sft-format sharegpt --chat-template "$D/tokenizer_config.json" --input "$D/sharegpt.jsonl" --output-prefix "$D/sg"
check "sharegpt" "$D/sg_sft_document" '[[[32,36]]]' '[36]'

# prompt/response, "Q: {input}\nA: {output}": "Q: ab\nA: " is 9 tokens (the value's spaces
# stripped, as Megatron-Bridge strips them), then "ba" and <|endoftext|>: [9, 12); "Q: x\nA: " 8,
# "yz" + EOD: [8, 11). The truncation field, input by default, is " ab" [2, 5) and " x" [2, 4)
# (the template's space before {input} with it, as Bridge splits the template at " *{key}")
expect "pairs: preprocess" 0 "2 samples, 23 tokens, 6 of them" \
  "${PRE[@]}" --sft-format prompt-response --prompt-template 'Q: {input}\nA: {output}' --input "$D/pairs.jsonl" --output-prefix "$D/pr"
check "pairs" "$D/pr_sft_document" '[[[9,12]],[[8,11]]]' '[12,11]' '[[[2,5]],[[2,4]]]'
expect "pairs: --sft-truncation-field ''" 0 "2 samples, 23 tokens" "${PRE[@]}" --sft-format prompt-response \
  --prompt-template 'Q: {input}\nA: {output}' --sft-truncation-field '' --input "$D/pairs.jsonl" --output-prefix "$D/prn"
check "pairs: no truncation field" "$D/prn_sft_document" '[[[9,12]],[[8,11]]]' '[12,11]'
expect "bad: truncation field not in the template" 2 "--sft-truncation-field 'context' is not a {key}" \
  "${PRE[@]}" --sft-format prompt-response --prompt-template 'Q: {input}\nA: {output}' --sft-truncation-field context \
  --input "$D/pairs.jsonl" --output-prefix "$D/bad"
expect "bad: truncation field the answer" 2 "is the answer's key" \
  "${PRE[@]}" --sft-format prompt-response --prompt-template 'Q: {input}\nA: {output}' --sft-truncation-field input,output \
  --input "$D/pairs.jsonl" --output-prefix "$D/bad"
expect "bad: truncation field with chat" 2 "--sft-truncation-field applies to --sft-format prompt-response" \
  "${PRE[@]}" --chat-template "$D/tokenizer_config.json" --sft-truncation-field input --input "$D/chat.jsonl" --output-prefix "$D/bad"

# truncation as Bridge's GPTSFTDataset (--seq-length 11: 12 tokens kept; one token a byte):
#   long.jsonl:  "Q:" 2 + " " + 20 letters (the field, 21) + "\nA: " 4 + "ba" + EOD 3 = 30 tokens, 18 too
#     many: the field keeps 3 (right: its first, left: its last), the answer whole: 3 targets
#     counted a sample by either method (cut at the right as before: none)
#   short.jsonl: "Q:" 2 + " ab" 3 + "\nA: " 4 + "abcdefghij" + EOD 11 = 20 tokens, 8 too many: the
#     field gives its 3, the other 5 come off the end (right: 12 tokens "Q:\nA: abcdef", 6 answer
#     targets) or the start (left: " abcdefghij" + EOD, 11 answer targets)
python3 - "$D" <<'EOF' || exit 1
import json, sys
d = sys.argv[1]
open(d + "/long.jsonl", "w").write("".join(json.dumps({"input": "abcdefghijklmnopqrst", "output": "ba"}) + "\n" for _ in range(8)))
open(d + "/short.jsonl", "w").write("".join(json.dumps({"input": "ab", "output": "abcdefghij"}) + "\n" for _ in range(8)))
EOF
for f in long short; do
  expect "truncation: preprocess $f" 0 "8 samples" "${PRE[@]}" --sft-format prompt-response \
    --prompt-template 'Q: {input}\nA: {output}' --input "$D/$f.jsonl" --output-prefix "$D/$f"
done
TR=(train --sft "${CHAT[@]}" --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 11
    --micro-batch-size 2 --global-batch-size 2 --train-iters 1 --log-interval 1 --lr 1e-3 --split 100,0,0
    --eval-iters 0 --seed 7)
for want in "long right 6" "long left 6" "short right 12" "short left 22"; do
  set -- $want
  rm -f "$D/m.jsonl"
  expect "truncation: $1 $2" 0 "sft: 8 training samples, 8 of them longer than --seq-length + 1 = 12 tokens, truncated (100.0%, --sft-truncation-method $2)" \
    "$T" "${TR[@]}" --data-path "$D/${1}_sft_document" --sft-truncation-method $2 --metrics-file "$D/m.jsonl"
  got=$(python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).readline()); print(r["sft_loss_tokens"], r["sft_samples_cut"])' "$D/m.jsonl")
  [ "$got" = "$3 2" ] && ok "truncation: $1 $2: $3 answer targets counted in a batch of 2, 2 cut" || bad "truncation: $1 $2: got '$got', want '$3 2'"
done
# eval --sft truncates as train does: the short samples' 11 answer targets each (left), 6 (right);
# without the flag, the training run's method (left) from the checkpoint
expect "truncation: save" 0 "iteration        1/" "$T" "${TR[@]}" --data-path "$D/short_sft_document" --save "$D/tck" \
  --sft-truncation-method left
for want in "left 88 --sft-truncation-method" "right 48 --sft-truncation-method" "left 88"; do
  set -- $want
  expect "truncation: eval --sft ${3:+$3 }$1" 0 "eval --sft: 8 samples (8 truncated past --seq-length + 1 = 12 tokens, --sft-truncation-method $1), 160 tokens; $2 of the answer's targets scored" \
    "$T" eval --sft --load "$D/tck" --split-name train --micro-batch-size 2 ${3:+$3 $1}
done
expect "bad: --sft-truncation-method without --sft" 2 "--sft-truncation-method applies to --sft only" \
  "$T" train --data-path "$D/long_sft_document" "${CHAT[@]}" --num-layers 1 --hidden-size 16 --num-attention-heads 2 \
  --seq-length 11 --micro-batch-size 2 --global-batch-size 2 --train-iters 1 --sft-truncation-method left
first=$(read_ds "$D/pr_sft_document" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0][0])')
[ "$first" = "[81, 58, 32, 97, 98, 10, 65, 58, 32, 98, 97, 256]" ] && ok "pairs: tokens $first" || bad "pairs: tokens $first"

# --workers: the same bytes as one worker. 2600 chat lines of about 900 bytes (2.3 MB: two batches
# of 2 x 1 MB at --workers 2, one at 3) with blank lines among them, and the pairs; a file whose
# lines 5 and 8 are bad names line 5 whatever the workers (line 5 in the second worker's share of
# three, line 8 in the third's)
python3 - "$D" <<'EOF' || exit 1
import json, random, sys
d = sys.argv[1]
random.seed(5)
w = lambda n: "".join(random.choice("abcdefgh ") for _ in range(n))
with open(d + "/many.jsonl", "w") as f:
    for i in range(2600):
        f.write(json.dumps({"messages": [{"role": "user", "content": w(random.randint(300, 800))},
                                         {"role": "assistant", "content": w(random.randint(100, 400))}]}) + "\n")
        if i % 997 == 3: f.write("  \n")
ok = json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})
lines = [ok] * 9
lines[4], lines[7] = "{not json", json.dumps({"messages": [{"role": "user", "content": "a"}]})
open(d + "/twobad.jsonl", "w").write("\n".join(lines) + "\n")
EOF
for n in 1 2 3; do
  expect "workers: chat --workers $n" 0 "2600 samples" "${PRE[@]}" --chat-template "$D/tokenizer_config.json" \
    --input "$D/many.jsonl" --output-prefix "$D/w$n" --workers $n
  expect "workers: pairs --workers $n" 0 "with $n worker" "${PRE[@]}" --sft-format prompt-response --workers $n \
    --prompt-template 'Q: {input}\nA: {output}' --input "$D/pairs.jsonl" "$D/long.jsonl" "$D/pairs.jsonl" --output-prefix "$D/pw$n"
  expect "workers: the first bad line at --workers $n" 1 "$D/twobad.jsonl:5: not a JSON object" \
    "${PRE[@]}" --chat-template "$D/tokenizer_config.json" --input "$D/twobad.jsonl" --output-prefix "$D/bad" --workers $n
done
same=1
for n in 2 3; do
  for p in w pw; do
    for f in _sft_document.bin _sft_document.idx _sft_document_answer_mask.bin _sft_document_answer_mask.idx; do
      cmp -s "$D/${p}1$f" "$D/$p$n$f" || { same=0; echo "differs: $p$n$f"; }
    done
  done
done
[ $same = 1 ] && ok "workers: --workers 2 and 3 write the bytes of one worker (chat and pairs)" || bad "workers: the bytes differ"

# bad input: one line naming file:line, exit 1; nothing written
expect "bad: not JSON" 1 "$D/badjson.jsonl:2: not a JSON object" \
  "${PRE[@]}" --chat-template "$D/tokenizer_config.json" --input "$D/badjson.jsonl" --output-prefix "$D/bad"
expect "bad: no role" 1 "$D/norole.jsonl:1: message 2 has no \"role\" string" \
  "${PRE[@]}" --chat-template "$D/tokenizer_config.json" --input "$D/norole.jsonl" --output-prefix "$D/bad"
expect "bad: no assistant turn" 1 "$D/noanswer.jsonl:1: no assistant turn" \
  "${PRE[@]}" --chat-template "$D/tokenizer_config.json" --input "$D/noanswer.jsonl" --output-prefix "$D/bad"
expect "bad: sharegpt line of chat" 1 "$D/chat.jsonl:1: no \"conversations\" list" \
  "${PRE[@]}" --sft-format sharegpt --chat-template "$D/tokenizer_config.json" --input "$D/chat.jsonl" --output-prefix "$D/bad"
expect "bad: pairs without the key" 1 "$D/chat.jsonl:1: no \"input\" key" \
  "${PRE[@]}" --sft-format prompt-response --prompt-template '{input} {output}' --input "$D/chat.jsonl" --output-prefix "$D/bad"
left=$(ls "$D" | grep -c '^bad_') ; [ "$left" = 0 ] && ok "bad: nothing written" || bad "bad: $left files left: $(ls "$D")"
expect "bad: unknown format" 2 "--sft-format" \
  "${PRE[@]}" --sft-format alpaca --chat-template "$D/tokenizer_config.json" --input "$D/chat.jsonl" --output-prefix "$D/bad"
expect "bad: chat without a template" 2 "--sft-format chat needs --chat-template" \
  "${PRE[@]}" --input "$D/chat.jsonl" --output-prefix "$D/bad"
expect "bad: template without the answer last" 2 "must end with the answer's {key} placeholder" \
  "${PRE[@]}" --sft-format prompt-response --prompt-template '{output} is the answer' --input "$D/pairs.jsonl" --output-prefix "$D/bad"
expect "bad: --sft-format without --sft" 2 "--sft-format applies to --sft only" \
  "$T" preprocess "${CHAT[@]}" --sft-format chat --input "$D/chat.jsonl" --output-prefix "$D/bad"

# training: 64 samples (56 training, 8 validation), 4 iterations of 8; tp 2, dp 2, pp 2 and cp 2 the loss of one rank
expect "rev: preprocess" 0 "64 samples" \
  "${PRE[@]}" --chat-template "$D/tokenizer_config.json" --input "$D/rev.jsonl" --output-prefix "$D/rev"
long=$(read_ds "$D/rev_sft_document" | python3 -c 'import json,sys; t=json.load(sys.stdin)[0]; print(sum(len(x) > 33 for x in t[:56]))')
TRAIN=(train --sft --data-path "$D/rev_sft_document" "${CHAT[@]}" --num-layers 2 --hidden-size 32
       --num-attention-heads 4 --seq-length 32 --micro-batch-size 2 --global-batch-size 8 --train-iters 4
       --log-interval 1 --lr 1e-3 --split 87.5,12.5,0 --eval-interval 4 --eval-iters 1 --seed 7 --peak-tflops 1)
expect "train: one rank" 0 "sft: 56 training samples, $long of them longer than --seq-length + 1 = 33 tokens" "$T" "${TRAIN[@]}" \
  --save "$D/ck" --save-interval 4
one=$out
expect "train: tp 2" 0 "iteration        4/" "${MPIRUN[@]}" -np 2 "$T" "${TRAIN[@]}" --tensor-model-parallel-size 2
tp=$out
expect "train: dp 2" 0 "iteration        4/" "${MPIRUN[@]}" -np 2 "$T" "${TRAIN[@]}"
dp=$out
expect "train: pp 2" 0 "iteration        4/" "${MPIRUN[@]}" -np 2 "$T" "${TRAIN[@]}" --pipeline-model-parallel-size 2
pp=$out
expect "train: cp 2" 0 "iteration        4/" "${MPIRUN[@]}" -np 2 "$T" "${TRAIN[@]}" --context-parallel-size 2
cp=$out
losses() { grep -oE '(lm loss|lm loss value): [0-9.E+-]+' <<<"$1" | awk '{print $NF}' | tr '\n' ' '; }
python3 - "$(losses "$one")" "$(losses "$tp")" "$(losses "$dp")" "$(losses "$pp")" "$(losses "$cp")" <<'EOF' && ok "layouts: tp 2, dp 2, pp 2 and cp 2 the losses of one rank: $(losses "$one")" || bad "layouts: $(losses "$one") / $(losses "$tp") / $(losses "$dp") / $(losses "$pp") / $(losses "$cp")"
import sys
a, *others = ([float(x) for x in s.split()] for s in sys.argv[1:6])
assert len(a) == 5 and all(len(o) == 5 for o in others), (a, others)
assert all(abs(x - y) <= 2e-5 * abs(x) for o in others for x, y in zip(a, o)), (a, others)
EOF
# eval --sft of the validation split (its 8 samples, one global batch): the final validation loss
# of the run that saved the checkpoint, through ev_forward's rows instead of the schedule; tp 2 so
valid=$(grep -oE 'lm loss value: [0-9.E+-]+' <<<"$one" | tail -1 | awk '{print $NF}')
for np in 1 2; do
  expect "eval --sft: np $np" 0 "eval --sft: 8 samples" "${MPIRUN[@]}" -np $np "$T" eval --sft --load "$D/ck" \
    --split-name valid --micro-batch-size 2 --tensor-model-parallel-size $np
  got=$(grep -oE 'eval: loss [0-9.]+' <<<"$out" | awk '{print $NF}')
  python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); assert abs(a - b) <= 2e-5 * a" "$valid" "$got" &&
    ok "eval --sft: np $np: loss $got = the run's validation loss $valid" || bad "eval --sft: np $np: loss '$got', validation '$valid'"
done
# every target counted: a different (larger-denominator) loss from the same weights
expect "train: --no-answer-only-loss" 0 "loss over every token" "$T" "${TRAIN[@]}" --no-answer-only-loss --train-iters 1
first_all=$(losses "$out" | awk '{print $1}') first_ans=$(losses "$one" | awk '{print $1}')
[ "$first_all" != "$first_ans" ] && ok "--no-answer-only-loss: $first_all, answer-only $first_ans" || bad "--no-answer-only-loss: the same loss $first_all"
# metrics: at --seq-length 8 every sample (at least 10 + 11 tokens before its answer) is cut, so each
# iteration cuts all 8 of its samples and counts 8 x 8 targets with --no-answer-only-loss, none with
# the answer-only loss (which is then 0)
for mode in all answer; do
  rm -f "$D/m.jsonl"
  extra=(); [ $mode = all ] && extra=(--no-answer-only-loss)
  expect "metrics: $mode" 0 "samples cut: 8" "$T" "${TRAIN[@]}" --seq-length 8 --train-iters 2 --eval-iters 0 \
    --metrics-file "$D/m.jsonl" "${extra[@]}"
  python3 - "$D/m.jsonl" $mode <<'EOF' && ok "metrics: $mode: sft_samples_cut 8, sft_loss_tokens as worked out" || bad "metrics: $mode: $(cat "$D/m.jsonl")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 2
for r in rows:
    assert r["sft_samples_cut"] == 8, r
    assert r["sft_loss_tokens"] == (64 if sys.argv[2] == "all" else 0), r
    assert sys.argv[2] == "all" or r["lm_loss"] == 0, r
EOF
done
expect "train: --sft with --eod-mask-loss" 2 "--sft counts the answer's tokens" "$T" "${TRAIN[@]}" --eod-mask-loss
# packed: the 56 training samples (29 to 41 tokens, cut to 33) two or so a row of 64 + 1; tp 2, dp 2
# and cp 2 the losses of one rank
PACK=("${TRAIN[@]}" --seq-length 64 --max-position-embeddings 64 --reset-attention-mask --reset-position-ids)
expect "packed: one rank" 0 "sft: training samples packed into" "$T" "${PACK[@]}"
rows=$(grep -oE 'training samples packed into [0-9]+ rows' <<<"$out" | grep -oE '[0-9]+')
[ -n "$rows" ] && [ "$rows" -lt 56 ] && [ "$rows" -ge 28 ] && ok "packed: 56 samples in $rows rows" || bad "packed: rows '$rows'"
pone=$out
expect "packed: tp 2" 0 "iteration        4/" "${MPIRUN[@]}" -np 2 "$T" "${PACK[@]}" --tensor-model-parallel-size 2
ptp=$out
expect "packed: dp 2" 0 "iteration        4/" "${MPIRUN[@]}" -np 2 "$T" "${PACK[@]}"
pdp=$out
expect "packed: cp 2" 0 "iteration        4/" "${MPIRUN[@]}" -np 2 "$T" "${PACK[@]}" --context-parallel-size 2
pcp=$out
python3 - "$(losses "$pone")" "$(losses "$ptp")" "$(losses "$pdp")" "$(losses "$pcp")" <<'EOF' && ok "packed: tp 2, dp 2 and cp 2 the losses of one rank: $(losses "$pone")" || bad "packed: $(losses "$pone") / $(losses "$ptp") / $(losses "$pdp") / $(losses "$pcp")"
import sys
a, *others = ([float(x) for x in s.split()] for s in sys.argv[1:5])
assert len(a) == 5 and all(len(o) == 5 for o in others), (a, others)
assert all(abs(x - y) <= 2e-5 * abs(x) for o in others for x, y in zip(a, o)), (a, others)
EOF
cp "$D/rev_sft_document.bin" "$D/nomask_sft_document.bin" && cp "$D/rev_sft_document.idx" "$D/nomask_sft_document.idx"
NOMASK=("${TRAIN[@]}")
NOMASK[3]="$D/nomask_sft_document"
expect "train: no mask sidecar" 1 "the answer mask $D/nomask_sft_document_answer_mask" "$T" "${NOMASK[@]}"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
