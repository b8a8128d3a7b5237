#!/usr/bin/env bash
# SFT on a rule the model can only learn from the answers (docs/finetune.md, "SFT data"): chat
# conversations "user: a word" -> "assistant: the word reversed", ChatML over a byte-level
# tokenizer.json, preprocess --sft, a small Llama-shaped model fine-tuned with the answer-only
# loss from its initial weights, the held-out split's answer-only loss (eval --sft) and greedy
# answers to unseen words before and after. Usage: scripts/sft-demo.sh [WORKDIR] (default
# /tmp/trident-sft-demo); ITERS (default 600), NP (ranks, default 1).
set -eu
T=${TRIDENT:-$(dirname "$0")/../build/trident}
W=${1:-/tmp/trident-sft-demo}
ITERS=${ITERS:-600} NP=${NP:-1}
mkdir -p "$W"
rm -rf "$W/before" "$W/after" # the runs start from scratch
python3 "$(dirname "$0")/../tests/parallel/byte_tokenizer.py" "$W/bytes.json"
python3 - "$W" <<'EOF'
import json, random, sys
d = sys.argv[1]
t = json.load(open(d + "/bytes.json"))
for i, c in [(257, "<|im_start|>"), (258, "<|im_end|>")]:
    t["added_tokens"].append({"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": True})
    t["model"]["vocab"][c] = i
json.dump(t, open(d + "/chatml.json", "w"), ensure_ascii=False)
tmpl = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
        "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
json.dump({"chat_template": tmpl, "eos_token": "<|im_end|>"}, open(d + "/tokenizer_config.json", "w"))
random.seed(11)
word = lambda: "".join(random.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(random.randint(3, 7)))
held = sorted({word() for _ in range(8)})
seen, rows = set(held), []
while len(rows) < 4000:
    w = word()
    if w in seen: continue
    seen.add(w)
    rows.append({"messages": [{"role": "user", "content": w}, {"role": "assistant", "content": w[::-1]}]})
open(d + "/rev.jsonl", "w").write("".join(json.dumps(r) + "\n" for r in rows))
open(d + "/held.txt", "w").write("".join(w + "\n" for w in held))
EOF
TOK=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$W/chatml.json")
"$T" preprocess --sft --sft-format chat --chat-template "$W/tokenizer_config.json" "${TOK[@]}" --input "$W/rev.jsonl" \
  --output-prefix "$W/rev"
MODEL=(--num-layers 4 --hidden-size 128 --num-attention-heads 4 --group-query-attention --num-query-groups 2
       --normalization RMSNorm --position-embedding-type rope --swiglu --ffn-hidden-size 352
       --disable-bias-linear --untie-embeddings-and-output-weights --seq-length 48 --max-position-embeddings 48)
COMMON=(--sft --data-path "$W/rev_sft_document" "${TOK[@]}" "${MODEL[@]}" --micro-batch-size 16 --global-batch-size 32
        --split 98,2,0 --seed 5 --log-interval 50 --eval-interval 200 --eval-iters 2 --peak-tflops 1)
mpirun --oversubscribe --bind-to none -np "$NP" "$T" train "${COMMON[@]}" --train-iters 1 --lr 0 --save "$W/before" \
  --save-interval 1 --eval-iters 0 > "$W/before.log" 2>&1
mpirun --oversubscribe --bind-to none -np "$NP" "$T" train "${COMMON[@]}" --load "$W/before" --finetune \
  --train-iters "$ITERS" --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters 30 --save "$W/after" \
  --save-interval "$ITERS" 2>&1 | tee "$W/train.log" | grep -E "sft:|iteration +(1|50|100|200|300|400|500|600|800|1000)/|validation"
mapfile -t HELD < "$W/held.txt"
PROMPTS=()
for w in "${HELD[@]}"; do PROMPTS+=("<|im_start|>user"$'\n'"$w<|im_end|>"$'\n'"<|im_start|>assistant"$'\n'); done
for ck in before after; do
  echo "== $ck"
  "$T" eval --sft --load "$W/$ck" --split-name valid --micro-batch-size 16 | grep -E "eval( --sft)?:"
  "$T" generate --load "$W/$ck" "${TOK[@]}" --greedy --max-new-tokens 10 --prompt "${PROMPTS[@]}" 2>/dev/null > "$W/$ck.gen"
  # each answer: the text after the prompt up to <|im_end|>
  python3 - "$W/$ck.gen" "${HELD[@]}" <<'EOF'
import re, sys
text, words = open(sys.argv[1], errors="replace").read(), sys.argv[2:]
parts = re.split(r"^--- \d+ ---\n", text, flags=re.M)[1:]
right = 0
for w, p in zip(words, parts):
    a = p.split("<|im_start|>assistant\n", 1)[-1].split("<|im_end|>")[0]
    right += a == w[::-1]
    print("  %-8s -> %-12r %s" % (w, a, "reversed" if a == w[::-1] else "wrong"))
print("  %d of %d held-out words reversed" % (right, len(words)))
EOF
done
