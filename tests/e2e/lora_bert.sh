#!/usr/bin/env bash
# LoRA on BERT (--model bert --lora-rank, docs/finetune.md), on tinyshakespeare under
# bert-base-uncased's WordPiece (the data of e2e/bert, smaller):
# - Hugging Face BERT's names (query, value) with trident's down_proj: the trained count is the
#   hand count, and after training every base tensor (embeddings, norms, the masked-LM and
#   sentence-order heads, the pooler) is bitwise the initial one (a plain run at lr 0);
# - convert --to peft writes MegatronBert's module paths, target_modules a regular expression that
#   names exactly the targeted modules (output.dense, not attention.output.dense); applied to the
#   base's --to hf export as PEFT computes it (float64, tests/e2e/lora_peft.py) it is the merged
#   --to hf export bit for bit; the merged export imported back scores as the LoRA checkpoint;
# - that export loaded back with train --lora-load trains as the LoRA checkpoint (1 rank, tp 2).
# Needs bert-base-uncased's vocab.txt (VOCAB, made by scripts/test-deps.sh): without it, says so and
# exits 77 (skipped).
[ -f "$VOCAB" ] || { echo "$VOCAB is missing (BERT WordPiece vocabulary): run scripts/test-deps.sh ${VOCAB%/node/bert/vocab.txt} (make test does): skipped"; exit 77; }
PEFT_PY=$(cd "$(dirname "$0")" && pwd)/lora_peft.py
. "$(dirname "$0")/checkpoint_lib.sh"
"$(dirname "$0")/../../scripts/text-to-jsonl.sh" "$SHAKESPEARE" ts.jsonl 1000
"$TRIDENT" preprocess --input ts.jsonl --output-prefix ts --split-sentences --tokenizer-type BertWordPieceLowerCase \
  --vocab-file "$VOCAB" >prep.log 2>&1 || { bad "preprocess"; cat prep.log; finish; exit; }
BASE=(--model bert --data-path ts_text_sentence --tokenizer-type BertWordPieceLowerCase --vocab-file "$VOCAB"
      --split 90,10,0 --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
      --max-position-embeddings 32 --hidden-dropout 0.1 --attention-dropout 0.1 --global-batch-size 8 --lr 1e-2
      --lr-warmup-iters 1 --lr-decay-style cosine --eval-interval 100 --eval-iters 1 --clip-grad 1.0 --seed 7
      --peak-tflops 1 --log-interval 1 --micro-batch-size 4)
LORA=(--lora-rank 4 --lora-alpha 16 --lora-target-modules query,value,down_proj)
losses() { grep -o '\(lm\|sop\) loss: [0-9.E+-]*' "$1" | head -2 | tr '\n' ' '; }

train 1 1 --train-iters 4 --save lora "${LORA[@]}" || { bad "BERT LoRA run failed"; cat "$last_log"; }
# per layer (hidden 32, ffn 128): query and value 4x32 + 32x4 each, down_proj 4x128 + 32x4 = 1152; 2 layers
if grep -q "both moments of 2304 of its 2304 parameters" "$last_log"; then ok "optimizer state: the 2304 adapter elements only"
else bad "BERT LoRA optimizer state: $(grep 'optimizer:' "$last_log")"; fi
train 1 1 --train-iters 1 --lr 0 --min-lr 0 --lr-warmup-iters 0 --save init || { bad "lr 0 run failed"; cat "$last_log"; }
"$TRIDENT" checkpoint compare init lora >cmp.txt 2>&1
frozen=$(grep -c "frozen (LoRA's base)" cmp.txt)
heads=$(grep "frozen (LoRA's base)" cmp.txt | grep -c -e lm_head -e binary_head -e pooler -e tokentype)
if [ "$(grep -c "values differ" cmp.txt)" = 0 ] && [ "$heads" -ge 5 ]; then
  ok "after training the $frozen base tensors ($heads of the heads, pooler and token types) are bitwise the initial ones"
else bad "the BERT base moved: $(grep -c "values differ" cmp.txt) differ, $frozen frozen, $heads heads"; cat cmp.txt; fi

rm -rf base_hf merged peft imported
"$TRIDENT" convert --from trident init --to hf base_hf >conv.log 2>&1 &&
  "$TRIDENT" convert --from trident lora --to hf merged >>conv.log 2>&1 &&
  "$TRIDENT" convert --from trident lora --to peft peft >>conv.log 2>&1 &&
  "$TRIDENT" convert --from hf merged --to trident imported >>conv.log 2>&1 || { bad "BERT exports failed"; cat conv.log; }
if python3 "$PEFT_PY" apply peft base_hf merged >apply.log 2>&1; then ok "--to peft: $(cat apply.log)"
else bad "--to peft: PEFT's delta on the base is not the merged export: $(cat apply.log)"; fi
if python3 - peft/adapter_config.json >re.log 2>&1 <<'PY'
import json, re, sys
t = json.load(open(sys.argv[1]))["target_modules"]
p = "bert.encoder.layer.%d."
want = {"attention.self.query": True, "attention.self.value": True, "output.dense": True,
        "attention.self.key": False, "attention.output.dense": False, "intermediate.dense": False}
bad = [m for m, w in want.items() for l in (0, 1) if bool(re.fullmatch(t, p % l + m)) != w]
bad += [m for m in ("bert.pooler.dense", "cls.predictions.transform.dense") if re.fullmatch(t, m)]
print("target_modules %r: %s" % (t, "names exactly the targeted modules" if not bad else "wrong for %s" % bad))
sys.exit(1 if bad else 0)
PY
then ok "$(cat re.log)"; else bad "$(cat re.log)"; fi
train 1 1 --train-iters 1 --lr 0 --min-lr 0 --lr-warmup-iters 0 --load lora --finetune || { bad "LoRA finetune failed"; cat "$last_log"; }
ll=$(losses "$last_log")
train 1 1 --train-iters 1 --lr 0 --min-lr 0 --lr-warmup-iters 0 --load imported --finetune || { bad "imported run failed"; cat "$last_log"; }
li=$(losses "$last_log")
if [ -n "$ll" ] && [ "$ll" = "$li" ]; then ok "the merged export, imported back, scores as the LoRA checkpoint ($ll)"
else bad "merged export imported: '$li', the LoRA checkpoint '$ll'"; fi
# the PEFT export loaded back (train --lora-load, MegatronBert's keys) onto the base trains as the
# LoRA checkpoint loaded with --finetune: metrics bit-identical, on one rank and on tp 2
for tp in 1 2; do
  train "$tp" "$tp" --train-iters 3 --load lora --finetune --metrics-file "ckpt$tp.jsonl" ||
    { bad "tp $tp: --finetune of the LoRA checkpoint failed"; cat "$last_log"; continue; }
  train "$tp" "$tp" --train-iters 3 --load init --finetune --lora-load peft --metrics-file "peft$tp.jsonl" ||
    { bad "tp $tp: --lora-load of BERT's adapter failed"; cat "$last_log"; continue; }
  if diff <(untimed "ckpt$tp.jsonl") <(untimed "peft$tp.jsonl") >/dev/null && grep -q sop_loss "peft$tp.jsonl"; then
    ok "tp $tp: --lora-load of the BERT export trains as the LoRA checkpoint (metrics bit-identical)"
  else bad "tp $tp: --lora-load of the BERT export differs from the LoRA checkpoint"; diff <(untimed "ckpt$tp.jsonl") <(untimed "peft$tp.jsonl") | head -4; fi
done
finish
