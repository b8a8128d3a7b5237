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
#  - the losses fall: 60 iterations of a small BERT lower the masked-LM loss by more than 1.5,
#    down to within 0.75 of the entropy of the training split's tokens (e2e/ngram_loss.py: what a
#    model of token frequencies reaches, 6.24 here; the run ends at about 6.8), and raise its
#    accuracy. Beating that entropy takes hundreds of iterations of a larger model (docs/bert.md:
#    400 iterations at hidden 128 still sit at 6.3), more than this test's time.
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
  if [ $rc = 2 ] && [ "$(grep -c "^error: .*BERT" refuse.log)" = 1 ]; then ok "${cmd%% *} refuses a BERT: $(grep error refuse.log)"
  else bad "${cmd%% *} on a BERT: exit $rc"; cat refuse.log; fi
done

# bad flags: exit 2 on every rank, once, before anything is allocated
bad_flags() { # want flags...
  local want=$1; shift
  timeout 60 "${MPIRUN[@]}" -np 2 "$TRIDENT" train --model bert --data-path ts_text_sentence --train-iters 1 "$@" \
    >bad.log 2>&1
  local rc=$?
  if [ $rc = 2 ] && [ "$(grep -c "error: trident train: .*$want" bad.log)" = 1 ] && ! grep -q "parameters" bad.log; then
    ok "$*: exit 2, once: $(grep error bad.log)"
  else bad "$*: exit $rc"; cat bad.log; fi
}
bad_flags "needs BERT's WordPiece tokenizer" --vocab-file "$VOCAB"
bad_flags "leave out --swiglu" --tokenizer-type BertWordPieceLowerCase --vocab-file "$VOCAB" --swiglu
bad_flags "not a blend" --tokenizer-type BertWordPieceLowerCase --vocab-file "$VOCAB" --data-path 1 a 1 b

# the losses fall
if train 1 1 --train-iters 60 --hidden-dropout 0 --attention-dropout 0 --lr 3e-3 --lr-warmup-iters 5 --eval-iters 0 \
     --hidden-size 64 --num-layers 2 --micro-batch-size 8 --global-batch-size 16 --metrics-file fall.jsonl; then
  first=$(head -n 5 fall.jsonl | grep -o '"lm_loss": [0-9.]*' | awk '{s += $2} END {print s / NR}')
  last=$(tail -n 5 fall.jsonl | grep -o '"lm_loss": [0-9.]*' | awk '{s += $2} END {print s / NR}')
  acc0=$(head -n 5 fall.jsonl | grep -o '"lm_acc": [0-9.]*' | awk '{s += $2} END {print s / NR}')
  acc1=$(tail -n 5 fall.jsonl | grep -o '"lm_acc": [0-9.]*' | awk '{s += $2} END {print s / NR}')
  uni=$(python3 "$(dirname "$0")/ngram_loss.py" ts_text_sentence 90,10,0 0 bert | tail -n 1 | cut -d' ' -f2)
  if awk -v a="$first" -v b="$last" -v c="$acc0" -v d="$acc1" -v u="${uni:-0}" \
       'BEGIN {exit !(u > 0 && b < a - 1.5 && b < u + 0.75 && d > c)}'; then
    ok "60 iterations: masked-LM loss $first -> $last (token frequencies alone: $uni), accuracy $acc0 -> $acc1 (means of the first and last 5)"
  else bad "the masked-LM loss did not fall enough: $first -> $last (token frequencies alone: ${uni:-not computed}), accuracy $acc0 -> $acc1"; fi
else bad "the 60-iteration run failed"; cat "$last_log"; fi
finish
