#!/usr/bin/env bash
# trident generate end to end (docs/generate.md) on the small GPT-2 and Llama-style models of the
# e2e/gen_models fixture (tests/e2e/gen_models.sh, in $MODELS):
#  - greedy and sampled text with the key/value cache equal to the text by full recomputation
#    (--no-kv-cache), token for token;
#  - the same seed's sampled text in tp 2, pp 2 and tp 2 x pp 2 as on one rank;
#  - three prompts of different lengths batched: each the text it gets alone (greedy);
#  - the default --max-new-tokens (64) on a 64-position model shortened to what fits, with a note;
#  - stdout holds the generated text alone, the log lines go to stderr.
# Environment: TRIDENT, DATA (tinyshakespeare preprocessed), VOCAB, MERGES, MODELS, WORK.
set -u
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TOK=(--vocab-file "$VOCAB" --merge-file "$MERGES")
# gen NP TP PP OUT flags...: the generated text (stdout without the log lines) in OUT
# (one rank without mpirun, a singleton, as the user runs it: 0.1-0.4 s less a start)
gen() {
  local np=$1 tp=$2 pp=$3 out=$4 launch=(mpirun --oversubscribe --bind-to none -np "$1"); shift 4
  [ "$np" = 1 ] && launch=()
  OMP_NUM_THREADS=1 timeout $((120 * ${TD_TIME_SCALE:-1})) "${launch[@]}" "$TRIDENT" generate "${TOK[@]}" \
    --tensor-model-parallel-size "$tp" --pipeline-model-parallel-size "$pp" --ignore-eod "$@" >"$out.raw" 2>"$out.err" ||
    { bad "generate $out failed"; tail -3 "$out.err"; }
  grep -v -E '^(\[rank [0-9]+\] )?generate: ' "$out.raw" >"$out"
}
same() { # what a b
  if [ -s "$2" ] && cmp -s "$2" "$3"; then ok "$1 ($(wc -c <"$2") bytes)"; else bad "$1: $2 and $3 differ"; diff "$2" "$3" | head -5; fi
}
P="First Citizen: Before we proceed any further, hear me speak."
for model in gpt2 llama; do
  L=(--load "$MODELS/$model" --prompt "$P")
  gen 1 1 1 $model.greedy "${L[@]}" --max-new-tokens 48 --greedy
  gen 1 1 1 $model.greedy.nocache "${L[@]}" --max-new-tokens 48 --greedy --no-kv-cache
  same "$model greedy: the cache's text equals full recomputation's" $model.greedy $model.greedy.nocache
  S=(--max-new-tokens 48 --temperature 0.9 --top-k 40 --top-p 0.95 --seed 11)
  gen 1 1 1 $model.sampled "${L[@]}" "${S[@]}"
  gen 1 1 1 $model.sampled.nocache "${L[@]}" "${S[@]}" --no-kv-cache
  same "$model sampled: the cache's text equals full recomputation's" $model.sampled $model.sampled.nocache
  gen 2 2 1 $model.tp2 "${L[@]}" "${S[@]}"
  same "$model sampled, tp 2 = one rank" $model.sampled $model.tp2
  gen 2 1 2 $model.pp2 "${L[@]}" "${S[@]}"
  same "$model sampled, pp 2 = one rank" $model.sampled $model.pp2
  gen 4 2 2 $model.tp2pp2 "${L[@]}" "${S[@]}"
  same "$model sampled, tp 2 x pp 2 = one rank" $model.sampled $model.tp2pp2
done
# batching: prompts of 3, 12 and 1 tokens together, each as it comes alone
A="ROMEO: I will" B="KING HENRY: My lords, the time is come that we must part" C="O"
gen 1 1 1 batch --load "$MODELS/gpt2" --prompt "$A" "$B" "$C" --max-new-tokens 20 --greedy
i=0
for p in "$A" "$B" "$C"; do
  i=$((i + 1))
  gen 1 1 1 alone$i --load "$MODELS/gpt2" --prompt "$p" --max-new-tokens 20 --greedy
  awk -v n=$i '/^--- [0-9]+ ---$/ { on = ($2 == n); next } on' batch >batch$i
  if [ "$(cat batch$i)" = "$(cat alone$i)" ]; then ok "batched prompt $i = alone"; else bad "batched prompt $i differs"; diff batch$i alone$i | head -4; fi
done
grep -q "tokens/s" batch.err && ok "tokens/s reported: $(grep -o '[0-9.]* tokens/s' batch.err | head -1)" || bad "no tokens/s line"
# stdout holds the text alone (a prompt and its continuation, or the batch's sections); the log lines are on stderr
if cmp -s batch.raw batch && cmp -s gpt2.greedy.raw gpt2.greedy && [ "$(head -c ${#P} gpt2.greedy.raw)" = "$P" ] &&
   [ "$(head -1 batch.raw)" = "--- 1 ---" ] && grep -q '^generate: ' gpt2.greedy.err; then
  ok "stdout holds the generated text alone, the log lines go to stderr"
else bad "log lines on stdout: $(grep -E '^(\[rank [0-9]+\] )?generate: ' gpt2.greedy.raw batch.raw | head -2)"; fi
# the default --max-new-tokens (64) on a model of 64 positions: shortened to what fits, with a note
"$TRIDENT" train --data-path "$DATA" "${TOK[@]}" --split 949,50,1 --num-layers 1 --hidden-size 32 \
  --num-attention-heads 2 --seq-length 64 --max-position-embeddings 64 --micro-batch-size 2 --train-iters 1 \
  --eval-iters 0 --log-interval 1000 --make-vocab-size-divisible-by 256 --peak-tflops 1 --save p64 >p64.log 2>&1 || bad "training p64"
"$TRIDENT" generate "${TOK[@]}" --load p64 --prompt "ROMEO: I will" --greedy --ignore-eod >p64.out 2>p64.err
rc=$?
n=$(grep -v '^generate: ' p64.out | wc -l)
# "ROMEO: I will" is 5 tokens (ROM, EO, :, " I", " will"): 64 - 5 = 59 new tokens fit
if [ $rc -eq 0 ] && grep -q "note: --max-new-tokens 64 (the default) shortened to 59: the longest prompt is 5 tokens of the model's 64 positions" p64.err p64.out &&
   grep -q "generate: 59 tokens for 1 prompt" p64.err p64.out; then ok "default --max-new-tokens shortened to 59 on a 64-position model"
else bad "default --max-new-tokens on a 64-position model: exit $rc"; cat p64.err | tail -3; fi
"$TRIDENT" generate "${TOK[@]}" --load p64 --prompt "ROMEO: I will" --max-new-tokens 64 >/dev/null 2>p64.err2
[ $? -eq 2 ] && grep -q "more than the model's 64" p64.err2 && ok "an explicit --max-new-tokens 64 that does not fit is refused" ||
  bad "explicit --max-new-tokens 64: $(cat p64.err2)"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
