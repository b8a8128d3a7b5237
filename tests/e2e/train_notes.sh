#!/usr/bin/env bash
# What the training log tells a user (issue 21's friction items), on a tiny GPT-2 and the Llama
# example of docs/models.md:
#  1. every iteration line ends with "time left: H:MM:SS" (the mean iteration time so far times the
#     iterations left): 0:00:00 on the last;
#  2. --train-iters 3 on an iteration-4 checkpoint: exit 0, a note that the checkpoint is already
#     past --train-iters, and "done: 0 iterations ... (none trained ...)";
#  3. resuming with another --global-batch-size or --seq-length: one note each naming the old and
#     new values (both allowed, as in Megatron); the resumed run's last line counts the iterations
#     it ran ("done: 1 iteration (5 to 5, resumed from iteration 4)", not the checkpoint's 4 + 1), and
#     its "loaded" line names the layout that wrote the checkpoint, expert parallelism included;
#  4. the Llama example's peak memory (its 9 MB tokenizer.json, an embedding of 128256 x 64) at
#     tp 2 is within 9% of the prediction (it was 60-69% over: the heap the tokenizer's parse and
#     the initialization left resident).
# Environment: TRIDENT, DATA (tinyshakespeare preprocessed with GPT-2's BPE), VOCAB, MERGES,
# TOKENIZER (Llama 3's tokenizer.json), TEXT, WORK; MPIRUN is mpirun --oversubscribe.
set -u
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
export OMP_NUM_THREADS=1
GPT=(--data-path "$DATA" --vocab-file "$VOCAB" --merge-file "$MERGES" --split 949,50,1 --num-layers 1
     --hidden-size 32 --num-attention-heads 2 --max-position-embeddings 64 --micro-batch-size 2 --lr 1e-3
     --eval-iters 0 --log-interval 1 --seed 1)
# --peak-tflops where the run does not hold the MFU: the GEMM peak trident would otherwise measure at
# a run's start and end (half a second each) is what only 5. looks at
PEAK=(--peak-tflops 1)

# 1. time left
"$TRIDENT" train "${GPT[@]}" "${PEAK[@]}" --seq-length 32 --global-batch-size 2 --train-iters 4 --save ck >first.log 2>&1 ||
  { bad "first run failed"; tail -3 first.log; }
n=$(grep -c '^ iteration .* | time left: [0-9]*:[0-5][0-9]:[0-5][0-9] |$' first.log)
[ "$n" -eq 4 ] && grep -q "iteration        4/       4 .*time left: 0:00:00 |$" first.log &&
  ok "4 lines with the time left, the last $(grep -o 'time left: [0-9:]*' first.log | tail -1)" ||
  bad "time left in $n of 4 lines: $(grep -m1 '^ iteration' first.log)"

# 2. already past --train-iters
"$TRIDENT" train "${GPT[@]}" "${PEAK[@]}" --seq-length 32 --global-batch-size 2 --train-iters 3 --load ck >past.log 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "note: the checkpoint is at iteration 4, already at or past --train-iters 3: nothing to train; raise --train-iters to continue" past.log &&
   grep -q "done: 0 iterations in .* (none trained: the checkpoint was already there)" past.log; then
  ok "past --train-iters: exit 0, $(grep -o 'note: the checkpoint.*' past.log)"
else bad "past --train-iters: exit $rc: $(grep -E 'note|done' past.log)"; fi

# 3. another batch size and sequence length on resume
"$TRIDENT" train "${GPT[@]}" "${PEAK[@]}" --seq-length 16 --global-batch-size 4 --train-iters 5 --load ck >changed.log 2>&1 ||
  { bad "resume with changes failed"; tail -3 changed.log; }
grep -q "note: --seq-length 16 differs from the checkpoint's 32" changed.log &&
  ok "$(grep -o 'note: --seq-length.*' changed.log)" || bad "no --seq-length note: $(grep note changed.log)"
grep -q "note: the global batch size is 4, the checkpoint's was 2: the run continues from its 8 consumed samples" changed.log &&
  ok "$(grep -o 'note: the global batch.*' changed.log)" || bad "no batch-size note: $(grep note changed.log)"
"$TRIDENT" train "${GPT[@]}" "${PEAK[@]}" --seq-length 32 --global-batch-size 2 --train-iters 5 --load ck >same.log 2>&1
grep -q "note: .*\(seq-length\|global batch\)" same.log && bad "a note without a change: $(grep note same.log)" ||
  ok "no note when nothing changed"
grep -q "^done: 1 iteration (5 to 5, resumed from iteration 4) in " same.log &&
  ok "resumed: $(grep -o '^done: [^;]*' same.log)" || bad "resumed run's last line: $(grep '^done' same.log)"
grep -q "^loaded checkpoint .* (iteration 4, written by tp 1 x pp 1 x dp 1, ep 1, 1 virtual stage) in " same.log &&
  ok "$(grep -o '^loaded checkpoint .*(iteration.*)' same.log)" || bad "the loaded line: $(grep '^loaded' same.log)"

# 5. a peak below the rate reached: raised, said, and no MFU above 1
"$TRIDENT" train "${GPT[@]}" --seq-length 32 --global-batch-size 2 --train-iters 3 --peak-tflops 1e-6 \
  --metrics-file mfu.jsonl >mfu.log 2>&1 || { bad "--peak-tflops 1e-6 run failed"; tail -3 mfu.log; }
over=$(grep -o '"mfu": [^,}]*' mfu.jsonl | awk '$2 > 1' | wc -l)
if [ "$over" -eq 0 ] && [ "$(grep -c '"mfu": ' mfu.jsonl)" -eq 3 ] &&
   grep -q "peak for MFU: .* TFLOP/s per rank (raised from 1e-06: iteration 1 ran the model at this rate)" mfu.log &&
   gemm=$(grep -o 'GFLOP/s = [0-9]*% of the --peak-tflops peak' mfu.log | grep -o '[0-9]*%' | tr -d %) &&
   [ -n "$gemm" ] && [ "$gemm" -le 100 ]; then
  ok "MFU at most 1 against --peak-tflops 1e-6, GEMMs at $gemm% of the peak: $(grep -o 'peak for MFU: .*' mfu.log | sed -n 2p)"
else bad "MFU above 1 or not said: $(grep -o '"mfu": [^,}]*' mfu.jsonl | tr '\n' ' ') $(grep -E 'peak for MFU|GEMMs' mfu.log)"; fi

# 4. the Llama example's memory at tp 2
head -c 200000 "$TEXT" >ts.txt
"$(dirname "$0")/../../scripts/text-to-jsonl.sh" ts.txt ts.jsonl 400 || exit 1
TOK=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$TOKENIZER")
"$TRIDENT" preprocess --input ts.jsonl --output-prefix llama "${TOK[@]}" --append-eod >prep.log 2>&1 || { bad "preprocess"; cat prep.log; }
mpirun --oversubscribe --bind-to none -np 2 "$TRIDENT" train --data-path llama_text_document "${TOK[@]}" \
  --num-layers 4 --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2 \
  --normalization RMSNorm --position-embedding-type rope --rotary-base 500000 --swiglu --ffn-hidden-size 128 \
  --disable-bias-linear --untie-embeddings-and-output-weights --seq-length 32 --micro-batch-size 2 \
  --global-batch-size 8 --lr 1e-3 --train-iters 4 --split 95,5,0 --eval-interval 2 --eval-iters 1 \
  --peak-tflops 1 --make-vocab-size-divisible-by 64 --tensor-model-parallel-size 2 >llama.log 2>&1 ||
  { bad "Llama run failed"; tail -3 llama.log; }
line=$(grep -o 'peak memory (RSS), stage 0: .*' llama.log)
pct=$(grep -o '[-+][0-9.]*%$' <<<"$line" | tr -d '+%')
if ldd "$TRIDENT" | grep -q libasan; then
  echo "skipped: the Llama memory check under ASan (its shadow memory and quarantine are not the model's): $line"
elif [ -n "$pct" ] && awk -v p="$pct" 'BEGIN { exit !(p <= 9 && p >= -9) }'; then ok "Llama at tp 2: $line"
else bad "Llama at tp 2, memory against the prediction: ${line:-no line}"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
