#!/usr/bin/env bash
# BERT end to end (--model bert, docs/bert.md), on tinyshakespeare preprocessed with
# --split-sentences under bert-base-uncased's WordPiece:
#  - exact resume: 6 iterations straight, and 3 + 3 through a checkpoint, write bit-identical
#    metrics (masked-LM and sentence-order losses included) and parameters, on one rank and in
#    tp2 x pp2 with sequence parallelism;
#  - resharding: a tp2 x pp2 checkpoint continues on one rank and in dp2 within 1e-5 of the run
#    that never stopped;
#  - convert: to Hugging Face's MegatronBertForPreTraining and back, bit-identical (`checkpoint
#    compare`);
#  - generate and eval refuse a BERT checkpoint with one line (exit 2), and bad BERT flags exit 2
#    once on every rank;
#  - the masked LM learns from context: on synthetic one-word documents whose masked words
#    token frequencies cannot predict, 600 iterations of a small BERT end 2 nats below the token
#    entropy (e2e/ngram_loss.py), on the validation split and in training, with an accuracy far
#    above the most frequent token's share, and the sentence-order head learns the order their
#    "then" shows; a model without context (checked by cutting the attention to each query's own
#    key) stays at the entropy.
# Needs bert-base-uncased's vocab.txt (VOCAB, made by scripts/test-deps.sh): without it, says so and
# exits 77 (skipped).
[ -f "$VOCAB" ] || { echo "$VOCAB is missing (BERT WordPiece vocabulary): run scripts/test-deps.sh ${VOCAB%/node/bert/vocab.txt} (make test does): skipped"; exit 77; }
. "$(dirname "$0")/checkpoint_lib.sh"
"$(dirname "$0")/../../scripts/text-to-jsonl.sh" "$SHAKESPEARE" ts.jsonl 3000
"$TRIDENT" preprocess --input ts.jsonl --output-prefix ts --split-sentences --tokenizer-type BertWordPieceLowerCase \
  --vocab-file "$VOCAB" >prep.log 2>&1 || { bad "preprocess"; cat prep.log; finish; exit; }
BASE=(--model bert --data-path ts_text_sentence --tokenizer-type BertWordPieceLowerCase --vocab-file "$VOCAB"
      --split 90,10,0 --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 32
      --max-position-embeddings 32 --hidden-dropout 0.1 --attention-dropout 0.1 --global-batch-size 8 --lr 1e-3
      --lr-warmup-iters 1 --lr-decay-style cosine --eval-interval 2 --eval-iters 1 --clip-grad 1.0 --seed 7
      --peak-tflops 1 --log-interval 100 --micro-batch-size 1)

resume() { # name np tp flags...
  local name=$1 np=$2 tp=$3; shift 3
  rm -rf "$name" && mkdir "$name"
  train "$np" "$tp" --train-iters 6 --metrics-file "$name/full.jsonl" --dump-params "$name/full.params" "$@" ||
    { bad "$name: uninterrupted run failed"; cat "$last_log"; return; }
  train "$np" "$tp" --train-iters 6 --exit-interval 3 --save "$name/ckpt" --metrics-file "$name/split.jsonl" "$@" &&
    train "$np" "$tp" --train-iters 6 --load "$name/ckpt" --save "$name/ckpt" --metrics-file "$name/split.jsonl" \
      --dump-params "$name/split.params" "$@" || { bad "$name: the stopped and resumed runs failed"; cat "$last_log"; return; }
  if diff <(untimed "$name/full.jsonl") <(untimed "$name/split.jsonl") >/dev/null && grep -q sop_loss "$name/full.jsonl" &&
     cmp -s "$name/full.params" "$name/split.params"; then
    ok "$name: resumed at 3, metrics (masked-LM and sentence-order losses) and parameters bit-identical"
  else
    bad "$name: the resumed run differs"; diff <(untimed "$name/full.jsonl") <(untimed "$name/split.jsonl")
  fi
}
resume one_rank 1 1
resume sp_tp2_pp2 4 2 --pipeline-model-parallel-size 2 --sequence-parallel

# resharding: tp2 x pp2 saved at 2, continued elsewhere to 4
train 4 2 --pipeline-model-parallel-size 2 --train-iters 4 --save src --save-interval 2 --metrics-file src.jsonl \
  --dump-params src.params || { bad "tp2 x pp2 source run failed"; cat "$last_log"; }
tail -n 2 src.jsonl >src_tail.jsonl
for layout in "one_rank 1 1" "dp2 2 1" "tp2_dp2 4 2"; do
  set -- $layout
  name=$1
  if train "$2" "$3" --train-iters 4 --load src/iter_0000002 --metrics-file "$name.jsonl" --dump-params "$name.params" &&
     out=$("$COMPARE_RUNS" src_tail.jsonl "$name.jsonl" src.params "$name.params" 1e-5); then
    ok "tp2 x pp2 -> $name: iterations 3-4 and the final parameters within 1e-5 ($(grep -o 'relative norm of the difference [^ ]*' <<<"$out"))"
  else bad "tp2 x pp2 -> $name"; cat "$last_log"; echo "${out:-}"; fi
done

# Hugging Face and back
if "$TRIDENT" convert --from trident src/iter_0000004 --to hf hf >conv.log 2>&1 &&
   grep -q '"MegatronBertForPreTraining"' hf/config.json && grep -q '"gelu_new"' hf/config.json &&
   "$TRIDENT" convert --from hf hf --to trident back >back.log 2>&1 &&
   "$TRIDENT" checkpoint compare src/iter_0000004 back >cmp.log 2>&1; then
  ok "convert to MegatronBertForPreTraining and back: $(tail -n 1 cmp.log)"
else bad "convert round trip"; cat conv.log back.log cmp.log 2>/dev/null; fi

# commands that need a left-to-right model
for cmd in "generate --prompt hello" "eval --data-path ts_text_sentence"; do
  "$TRIDENT" $cmd --load src --tokenizer-type BertWordPieceLowerCase --vocab-file "$VOCAB" >refuse.log 2>&1
  rc=$?
  if [ $rc = 2 ] && [ "$(grep -c "^error: .*holds a --model bert checkpoint, not a causal decoder" refuse.log)" = 1 ] &&
     { [ "${cmd%% *}" = eval ] && grep -q "trident train --model bert --eval-iters N" refuse.log ||
       grep -q "convert it to Hugging Face's MegatronBertForPreTraining" refuse.log; }; then
    ok "${cmd%% *} refuses a BERT: $(grep error refuse.log)"
  else bad "${cmd%% *} on a BERT: exit $rc"; cat refuse.log; fi
done

# bad flags: exit 2 on every rank, once, before anything is allocated
bad_flags() { # want flags...
  local want=$1; shift
  timeout $((60 * ${TD_TIME_SCALE:-1})) "${MPIRUN[@]}" -np 2 "$TRIDENT" train --model bert --data-path ts_text_sentence --train-iters 1 "$@" \
    >bad.log 2>&1
  local rc=$?
  if [ $rc = 2 ] && [ "$(grep -c "error: trident train: .*$want" bad.log)" = 1 ] && ! grep -q "parameters" bad.log; then
    ok "$*: exit 2, once: $(grep error bad.log)"
  else bad "$*: exit $rc"; cat bad.log; fi
}
bad_flags "needs BERT's WordPiece tokenizer" --vocab-file "$VOCAB"
bad_flags "leave out --swiglu" --tokenizer-type BertWordPieceLowerCase --vocab-file "$VOCAB" --swiglu
bad_flags "not a blend" --tokenizer-type BertWordPieceLowerCase --vocab-file "$VOCAB" --data-path 1 a 1 b
bad_flags "leave out --reset-attention-mask" --tokenizer-type BertWordPieceLowerCase --vocab-file "$VOCAB" \
  --reset-attention-mask

# The masked LM learns from context, not just token frequencies, and the sentence-order head
# learns. Synthetic documents (made here, seed 1): one word drawn uniformly from 64, repeated in
# two sentences of 5-9 words, the second opening with "then" ("Road road road. Then road road
# road."): a masked word is any visible word of its sample, but its frequency is about 1/64, and
# the order of the two segments shows in where "then" stands. Vocabulary: those words, "then", "."
# and BERT's special tokens (small, so 600 iterations take seconds; tinyshakespeare needs hundreds
# of iterations of a larger model to leave the unigram's loss, docs/bert.md).
# e2e/ngram_loss.py computes from the preprocessed files what frequencies reach on each split: the
# token entropy H (about 4), the least loss of any fixed distribution, and the most frequent
# token's share (".", 0.12), the best accuracy of a fixed guess. A model without context does
# little better: it can copy the 10% of masked tokens left in place and learn where "." and "then"
# fall from the positions (at most the 0.6 nats of which of the three kinds a token is), so its loss
# stays above 0.9 (H - 0.6), about 3, and its accuracy near 0.12 + 0.1. Required: the validation
# loss (masked LM + sentence order, the latter at least 0) and the mean masked-LM loss of the last
# 20 iterations each 2 nats below their split's H; the masked-LM accuracy above the most frequent
# share + 0.1 + 0.3; the sentence-order loss below 0.35 (chance: ln 2 = 0.69), its accuracy above
# 0.8 (chance: 0.5).
python3 - <<'PY' || bad "generating the one-word documents"
import json, random
rng = random.Random(1)
words = ("time world year school city house water music river night church party field paper story money "
         "light road army horse table garden king ship film island forest game book door window bridge tower "
         "song village market doctor letter summer winter mountain camp coast valley farm hotel lake prince "
         "stone station street wall bank plant cloud dream glass chair bread apple tree bird fish star").split()
assert len(set(words)) == 64
with open("words_vocab.txt", "w") as f:
    f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "then"] + words) + "\n")
with open("words.jsonl", "w") as f:
    for _ in range(3000):
        w = rng.choice(words)
        text = w.capitalize() + (" " + w) * rng.randint(4, 8) + ". Then" + (" " + w) * rng.randint(4, 8) + "."
        f.write(json.dumps({"text": text}) + "\n")
PY
if "$TRIDENT" preprocess --input words.jsonl --output-prefix words --split-sentences --tokenizer-type BertWordPieceLowerCase \
     --vocab-file words_vocab.txt >words_prep.log 2>&1 &&
   freq=$(python3 "$(dirname "$0")/ngram_loss.py" words_text_sentence 90,10,0 0 bert) &&
   BASE=(--model bert --data-path words_text_sentence --tokenizer-type BertWordPieceLowerCase --vocab-file words_vocab.txt
         --split 90,10,0 --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
         --max-position-embeddings 32 --hidden-dropout 0 --attention-dropout 0 --micro-batch-size 16 --global-batch-size 16
         --lr 3e-3 --lr-warmup-iters 5 --lr-decay-style cosine --clip-grad 1.0 --seed 7 --peak-tflops 1 --log-interval 100) &&
   train 1 1 --train-iters 600 --eval-interval 200 --eval-iters 10 --metrics-file words.jsonl; then
  read -r h_train top_train h_valid < <(awk '/^training/ {h = $(NF - 3); t = $NF} /^validation/ {v = $(NF - 3)}
                                             END {print h, t, v}' <<<"$freq")
  val=$(grep -o '"val_loss": [0-9.e+-]*' words.jsonl | tail -n 1 | awk '{printf "%.3f", $2}')
  last() { tail -n 20 words.jsonl | grep -o "\"$1\": [0-9.e+-]*" | awk '{s += $2} END {if (NR) printf "%.3f", s / NR}'; }
  loss=$(last lm_loss) acc=$(last lm_acc) sop=$(last sop_loss) sop_acc=$(last sop_acc)
  what="validation loss ${val:-none} (token entropy $h_valid); last 20 iterations: masked-LM loss $loss (token entropy $h_train), accuracy $acc (most frequent token $top_train), sentence-order loss $sop, accuracy $sop_acc"
  if awk -v v="${val:-99}" -v hv="$h_valid" -v l="${loss:-99}" -v ht="$h_train" -v a="${acc:-0}" -v t="$top_train" \
       -v s="${sop:-99}" -v sa="${sop_acc:-0}" \
       'BEGIN {exit !(hv > 3 && ht > 3 && v < hv - 2 && l < ht - 2 && a > t + 0.1 + 0.3 && s < 0.35 && sa > 0.8)}'; then
    ok "one-word documents, 600 iterations: $what"
  else bad "the masked LM or the sentence-order head did not learn from context: $what"; echo "$freq"; fi
else bad "preprocessing or training on the one-word documents failed"; cat words_prep.log "${last_log:-/dev/null}"; fi
finish
