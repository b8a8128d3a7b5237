#!/usr/bin/env bash
# Mixed precision end to end (docs/mixed-precision.md), on the model of e2e/train_shakespeare_val_loss:
#  1. 300 iterations in fp32, --bf16 and --fp16 (dynamic loss scale from 2^32, as Megatron's
#     defaults): the validation loss of each low-precision run within 1.5% of the fp32 run's;
#     the fp16 run skipped its first steps (the scale too large) and at most 5% of the later ones
#     (measured: 10, then 5 as the scale settled).
#  2. A forced overflow (TRIDENT_TEST_OVERFLOW_ITER: an Inf in one gradient of the last rank) in
#     --fp16 with --hysteresis 1 skips exactly that step and halves the scale; with the default
#     --hysteresis 2 it skips the step and keeps the scale.
# Environment: TRIDENT, DATA (tinyshakespeare preprocessed), VOCAB, MERGES, WORK.
set -u
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
export OMP_NUM_THREADS=2
MODEL=(--data-path "$DATA" --vocab-file "$VOCAB" --merge-file "$MERGES" --split 949,50,1 --num-layers 2
       --hidden-size 64 --num-attention-heads 4 --seq-length 64 --micro-batch-size 8 --global-batch-size 8
       --lr 4e-3 --min-lr 4e-4 --lr-decay-style cosine --lr-warmup-iters 15 --weight-decay 0.1 --hidden-dropout 0
       --attention-dropout 0 --log-interval 100 --seed 1)
field() { grep -o "\"$2\": [^,}]*" "$1" | cut -d' ' -f2; } # field FILE KEY: one value per line

for mode in fp32 bf16 fp16; do
  flag=(); [ "$mode" != fp32 ] && flag=(--$mode)
  "$TRIDENT" train "${MODEL[@]}" "${flag[@]}" --train-iters 300 --eval-interval 300 --eval-iters 40 \
    --metrics-file $mode.jsonl >$mode.log 2>&1 || { bad "$mode run failed"; tail -5 $mode.log; }
done
v32=$(field fp32.jsonl val_loss | grep -v nan | tail -1)
for mode in bf16 fp16; do
  v=$(field $mode.jsonl val_loss | grep -v nan | tail -1)
  if awk -v a="$v" -v b="$v32" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; printf "%.3f%% ", 100 * d; exit !(a > 0 && d <= 0.015) }'; then
    ok "$mode validation loss $v against fp32 $v32 (within 1.5%)"
  else bad "$mode validation loss $v against fp32 $v32: more than 1.5% apart"; fi
done
skips=$(field fp16.jsonl skipped | tr -d '\n')
first=$(field fp16.jsonl skipped | grep -n 0 | head -1 | cut -d: -f1)
later=$(field fp16.jsonl skipped | tail -n +"$first" | grep -c 1)
scale=$(field fp16.jsonl loss_scale | tail -1)
if [ "$first" -gt 1 ] && [ "$later" -le 15 ]; then
  ok "fp16: the first $((first - 1)) steps skipped (scale 2^32 overflows), then $later of the next $((301 - first)) as the scale settles; final scale $scale"
else bad "fp16: skipped steps ${skips:0:60}...: expected a run at the start and at most 5% after"; fi

# 2. forced overflow at iteration 4
overflow() { # hysteresis
  TRIDENT_TEST_OVERFLOW_ITER=4 "$TRIDENT" train "${MODEL[@]}" --fp16 --initial-loss-scale 1024 --hysteresis "$1" \
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

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
