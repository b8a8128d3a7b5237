#!/usr/bin/env bash
# Mixed precision end to end (docs/mixed-precision.md), on the model of e2e/train_shakespeare_val_loss.
# The loss scaler's arithmetic and fp16 gradient unscaling are held by unit/test_optim against
# plain arithmetic; this test holds what only a real run shows:
#  1. 100 iterations of 8 x 64 tokens in fp32, --bf16 and --fp16 (from --initial-loss-scale 65536,
#     so that no step is skipped and the three runs take the same steps), in bytes (BYTES_DATA, the
#     checkpoint tests' byte-level tokenizer: a 384-row output layer, where GPT-2's 50257 words made
#     the cross-entropy most of each iteration; 30 CPU-seconds of the AVX2 machine became 6): each
#     low-precision run's validation loss within three times the largest difference from fp32's
#     measured over seeds 1-6 (10 validation batches): bf16 -0.35%, +0.02%, -0.09%, -0.01%, -0.00%,
#     +0.00% (TOL_BF16 1.1%); fp16 +0.02%, -0.00%, +0.00%, -0.00%, +0.00%, -0.00% (TOL_FP16 0.07%).
#     The GPT-2 version this replaces (50 iterations of 4 x 64 tokens, 0.5%) held bf16 to the same
#     noise; the 300-iteration one before it (1.5%) timed out under ASan.
#  2. A forced overflow (--debug-overflow-iteration: an Inf in one gradient of the last rank) in
#     --fp16 with --hysteresis 1 skips exactly that step and halves the scale; with the default
#     --hysteresis 2 it skips the step and keeps the scale.
#  3. Divergence (issue 21): --fp16 --lr 1000 --clip-grad 0 (2 x 64 tokens) from Megatron's
#     default scale 2^32 skips its first 12 steps (hysteresis 2: the scale kept once, then halved
#     at each), takes the 13th, and its loss turns NaN at iteration 14: exit 1 naming the iteration and the loss,
#     no checkpoint of the diverged model, a metrics file a strict JSON reader accepts (null, not
#     nan). Gradients overflowing 10 steps in a row at the scale's floor (a constant --loss-scale
#     1e30, or --min-loss-scale 1e30) end the run at iteration 10 the same way, naming the scale
#     and the newest checkpoint saved before.
# Environment: TRIDENT, BYTES_DATA and BYTES_TOKENIZER (tinyshakespeare in bytes: with its 512-row output
# layer the runs of 2. and 3. take 1.1 CPU-s, 9.4 in GPT-2's tokens), WORK.
set -u
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
export OMP_NUM_THREADS=1 # as TD_MPI_ENV: the other core runs another test
TRAIN=(--lr 4e-3 --min-lr 4e-4 --lr-decay-style cosine --lr-warmup-iters 15 --weight-decay 0.1 --hidden-dropout 0
       --attention-dropout 0 --log-interval 100)
# --peak-tflops: the GEMM peak each run would otherwise measure at its start and its end (half a
# second each) is not what this test holds; the last run (3.) measures it, in fp16 GEMMs.
BYTES=(--data-path "$BYTES_DATA" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$BYTES_TOKENIZER"
       --split 949,50,1 --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --seed 1)
MODEL=("${BYTES[@]}" --micro-batch-size 8 --global-batch-size 8 --lr 2e-3 --min-lr 2e-4 --lr-decay-style cosine
       --lr-warmup-iters 15 --weight-decay 0.1 --hidden-dropout 0 --attention-dropout 0 --log-interval 100 --peak-tflops 1)
SMALL=("${BYTES[@]}" --micro-batch-size 2 --global-batch-size 2 "${TRAIN[@]}")
TOL_BF16=0.011 TOL_FP16=0.0007
field() { grep -o "\"$2\": [^,}]*" "$1" | cut -d' ' -f2; } # field FILE KEY: one value per line

# 1. close to fp32
for mode in fp32 bf16 fp16; do
  flag=(); [ "$mode" = bf16 ] && flag=(--bf16); [ "$mode" = fp16 ] && flag=(--fp16 --initial-loss-scale 65536)
  "$TRIDENT" train "${MODEL[@]}" "${flag[@]}" --train-iters 100 --eval-interval 100 --eval-iters 10 \
    --metrics-file $mode.jsonl >$mode.log 2>&1 || { bad "$mode run failed"; tail -5 $mode.log; }
done
v32=$(field fp32.jsonl val_loss | tail -1)
for mode in bf16 fp16; do
  v=$(field $mode.jsonl val_loss | tail -1)
  TOL=$TOL_BF16; [ $mode = fp16 ] && TOL=$TOL_FP16
  if awk -v a="$v" -v b="$v32" -v t=$TOL 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; printf "%.3f%% ", 100 * d; exit !(a > 0 && d <= t) }'; then
    ok "$mode validation loss $v against fp32 $v32 (within $TOL)"
  else bad "$mode validation loss $v against fp32 $v32: more than $TOL apart"; fi
done
skips=$(field fp16.jsonl skipped | grep -c 1)
[ "$skips" -eq 0 ] && ok "fp16 from 65536: no step skipped" || bad "fp16 from 65536: $skips steps skipped"

# 2. forced overflow at iteration 4
overflow() { # hysteresis
  "$TRIDENT" train "${SMALL[@]}" --debug-overflow-iteration 4 --peak-tflops 1 --fp16 --initial-loss-scale 1024 --hysteresis "$1" \
    --train-iters 7 --eval-iters 0 --metrics-file h$1.jsonl >h$1.log 2>&1 || { bad "overflow run failed"; tail -5 h$1.log; }
  echo "$(field h$1.jsonl skipped | tr '\n' ' ')| $(field h$1.jsonl loss_scale | tr '\n' ' ')"
}
got=$(overflow 1)
if [ "$got" = "0 0 0 1 0 0 0 | 1024 1024 1024 1024 512 512 512 " ]; then
  ok "hysteresis 1: iteration 4 skipped, the scale halved after it ($got)"
else bad "hysteresis 1: skipped | scale per iteration: $got"; fi
got=$(overflow 2)
if [ "$got" = "0 0 0 1 0 0 0 | 1024 1024 1024 1024 1024 1024 1024 " ]; then
  ok "hysteresis 2: iteration 4 skipped, the scale kept ($got)"
else bad "hysteresis 2: skipped | scale per iteration: $got"; fi
grep -q "number of skipped iterations: 1 |" h2.log && ok "the log line counts the skipped iteration" ||
  bad "no 'number of skipped iterations: 1' in the log"

# 3. divergence
strict_json() { # every line of FILE parses with NaN and Infinity refused
  python3 -c 'import json, sys
for n, line in enumerate(open(sys.argv[1]), 1):
    json.loads(line, parse_constant=lambda c: sys.exit(f"line {n}: {c}"))' "$1"
}
"$TRIDENT" train "${SMALL[@]}" --peak-tflops 1 --fp16 --lr 1000 --clip-grad 0 --train-iters 100 --save ck_nan --eval-iters 0 \
  --metrics-file nan.jsonl >nan.log 2>&1
rc=$?
msg=$(grep error: nan.log)
if [ $rc -eq 1 ] && grep -q "^error: iteration [0-9]*: the loss is -\?nan .*the training diverged; lower --lr, clip the gradients (--clip-grad 1.*; not saved to --save ck_nan$" <<<"$msg"; then
  ok "--lr 1000: exit 1, $msg"
else bad "--lr 1000: exit $rc, expected 1 and 'iteration N: the loss is nan ... diverged': $(tail -2 nan.log)"; fi
# (the folder may exist: the run held its lock file there)
saved=$(ls -A ck_nan 2>/dev/null | grep -v '^\.trident-save\.lock$')
[ -z "$saved" ] && ok "no checkpoint of the diverged model" || bad "a checkpoint was saved: $saved"
strict_json nan.jsonl && ok "nan.jsonl is strict JSON ($(grep -c '"grad_norm": null' nan.jsonl) null grad norms)" ||
  bad "nan.jsonl is not strict JSON: $(head -c 300 nan.jsonl)"
got="$(field nan.jsonl skipped | tr -d '\n') $(field nan.jsonl loss_scale | head -4 | tr '\n' ' ')"
if [ "$got" = "1111111111110 4.2949673e+09 4.2949673e+09 2.14748365e+09 1.07374182e+09 " ]; then
  ok "from 2^32: steps 1-12 skipped, 13 taken; the scale kept once, then halved ($got)"
else bad "from 2^32: skipped, then the first scales: $got"; fi

"$TRIDENT" train "${SMALL[@]}" --peak-tflops 1 --eval-iters 0 --fp16 --loss-scale 1e30 --train-iters 100 --save ck_const --save-interval 4 \
  --metrics-file const.jsonl >const.log 2>&1
rc=$?
msg=$(grep error: const.log)
if [ $rc -eq 1 ] && grep -q "^error: iteration 10: the gradients overflowed in 10 steps in a row with the loss scale at its constant value (--loss-scale) 1e+30 .*not saved: the newest checkpoint in --save ck_const is iteration 8$" <<<"$msg"; then
  ok "--loss-scale 1e30: exit 1, $msg"
else bad "--loss-scale 1e30: exit $rc: $(tail -2 const.log)"; fi
[ "$(cat ck_const/latest_checkpointed_iteration.txt 2>/dev/null)" = 8 ] && ok "the newest checkpoint is still iteration 8" ||
  bad "latest checkpoint: $(ls ck_const)"
"$TRIDENT" train "${SMALL[@]}" --eval-iters 0 --fp16 --initial-loss-scale 1e30 --min-loss-scale 1e30 --train-iters 100 \
  >min.log 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "^error: iteration 10: the gradients overflowed in 10 steps in a row with the loss scale at its minimum (--min-loss-scale) 1e+30" min.log; then
  ok "--min-loss-scale 1e30: exit 1, $(grep error: min.log)"
else bad "--min-loss-scale 1e30: exit $rc: $(tail -2 min.log)"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
