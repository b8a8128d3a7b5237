#!/usr/bin/env bash
# Fine-tuning side by side in one run (docs/finetune.md, "Measured"). Two parts:
#   lora:   LoRA rank 8 (q_proj, v_proj; and all-linear) against full fine-tuning of the same
#           Llama-shaped model (8 layers x 512, 8 heads in 2 groups, SwiGLU 1408, untied), from the
#           same initial weights, on the same SFT chats ("reverse the word", ChatML over a
#           byte-level tokenizer), answer-only loss, N iterations each: memory predicted and
#           measured (peak RSS), tokens/s, the loss after N iterations and eval --sft on the
#           held-out split.
#   packed: SFT samples of a long-tailed length mix (log-normal, median ~180 tokens, cut at
#           seq-length 512) trained padded (one sample a row) and packed (--reset-attention-mask
#           --reset-position-ids) for one epoch each at lr 0 (the compute of training, the weights
#           fixed): the epoch's answer-only loss (the iterations' losses weighted by their counted
#           targets) the same both ways, and the samples' tokens per second.
# Usage: bench/finetune.sh [lora|packed|all] [ITERS] (default all, 40). Environment: BUILD (default
# build), WORK (default $BUILD/bench/finetune), THREADS (OMP_NUM_THREADS, default nproc; 1 on a machine shared with
# other jobs, where OpenMP's barriers wait on descheduled threads).
# Compare only within one run: every figure moves with the machine's load, printed first.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
part=${1:-all} iters=${2:-40}
case $part in lora|packed|all) ;; *) echo "finetune.sh: unknown part $part (lora, packed or all)" >&2; exit 2 ;; esac
build=${BUILD:-$root/build}
T=$build/trident
[ -x "$T" ] || { echo "finetune.sh: $T not built (cmake --build $build --target trident)" >&2; exit 1; }
work=${WORK:-$build/bench/finetune}
py=/usr/bin/python3; [ -x "$py" ] || py=python3 # the one with numpy (tests/e2e/llama_reader.py)
export OMP_NUM_THREADS=${THREADS:-$(nproc)}
rm -rf "$work"; mkdir -p "$work"
echo "machine: $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); load average $(cut -d' ' -f1-3 /proc/loadavg); OMP_NUM_THREADS $OMP_NUM_THREADS"

"$py" - "$work" "$root/tests/e2e" <<'EOF'
import json, math, random, sys
sys.path.insert(0, sys.argv[2])
import llama_reader as lr
d = sys.argv[1]
lr.write_tokenizer(d)
lr.write_reverse_chats(d + "/rev.jsonl", 2000, seed=11)
# the length mix: a user message of words whose total length is log-normal (median 80 characters,
# sigma 0.9, at most 480), the answer its words in reverse order
rng = random.Random(7)
rows = []
for _ in range(160):
    n = max(3, min(480, int(rng.lognormvariate(math.log(80), 0.9))))
    words, size = [], 0
    while size < n:
        w = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
        words.append(w); size += len(w) + 1
    rows.append({"messages": [{"role": "user", "content": " ".join(words)},
                              {"role": "assistant", "content": " ".join(reversed(words))}]})
open(d + "/mix.jsonl", "w").write("".join(json.dumps(r) + "\n" for r in rows))
EOF
TOK=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$work/tokenizer.json")
for f in rev mix; do
  "$T" preprocess --sft --sft-format chat --chat-template "$work" "${TOK[@]}" --input "$work/$f.jsonl" \
    --output-prefix "$work/$f" > "$work/$f.prep.log"
done

# field LOG REGEX: the first match's last number-ish word
grab() { grep -oE "$2" "$1" | head -1 | grep -oE '[0-9][0-9.,]*' | tail -1; }

if [ "$part" != packed ]; then
  MODEL=(--num-layers 8 --hidden-size 512 --num-attention-heads 8 --group-query-attention --num-query-groups 2
         --ffn-hidden-size 1408 --normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
         --untie-embeddings-and-output-weights --seq-length 64 --max-position-embeddings 64)
  COMMON=(--sft --data-path "$work/rev_sft_document" "${TOK[@]}" "${MODEL[@]}" --micro-batch-size 4
          --global-batch-size 8 --split 95,5,0 --seed 5 --log-interval 1 --eval-iters 0 --peak-tflops 1)
  "$T" train "${COMMON[@]}" --train-iters 1 --lr 0 --save "$work/init" > "$work/init.log" 2>&1
  echo
  echo "== LoRA against full fine-tuning: $iters iterations of 8 samples x 64 positions, lr 1e-3 constant, from the same initial weights"
  printf '%-10s %10s %24s %10s %10s %9s %9s %8s %8s\n' run trained "pred params+grads+optim" "RSS pred" "RSS meas" tokens/s tok/cpu-s "loss@1" "loss@$iters"
  for run in full lora_qv lora_all; do
    case $run in
      full) extra=() ;;
      lora_qv) extra=(--lora-rank 8 --lora-alpha 16) ;;
      lora_all) extra=(--lora-rank 8 --lora-alpha 16 --lora-target-modules all-linear) ;;
    esac
    /usr/bin/time -f '%U %S' -o "$work/$run.cpu" "$T" train "${COMMON[@]}" --load "$work/init" --finetune \
      --train-iters "$iters" --lr 1e-3 --lr-decay-style constant --metrics-file "$work/$run.jsonl" --save "$work/$run" \
      "${extra[@]}" > "$work/$run.log" 2>&1
    log=$work/$run.log
    trained=$(grep -oE 'both moments of [0-9,]+' "$log" | head -1 | grep -oE '[0-9,]+$' || true)
    pg=$(grep -m1 'memory per rank (predicted)' "$log" | grep -oE 'params [0-9.]+|grads [0-9.]+|optimizer [0-9.]+' |
      grep -oE '[0-9.]+' | paste -sd+ - || true)
    meas=$(grep -oE 'peak memory \(RSS\), stage 0: [0-9.]+ MiB measured, [0-9.]+ MiB predicted' "$log" | grep -oE '[0-9.]+ MiB' | tr -d ' MiB' | paste -sd' ' -)
    read -r rss pred <<<"$meas"
    tps=$(python3 -c 'import json,statistics,sys; r=[json.loads(l)["tokens_per_s"] for l in open(sys.argv[1])][1:]; print(f"{statistics.median(r):.0f}")' "$work/$run.jsonl")
    l1=$(python3 -c 'import json,sys; r=[json.loads(l)["lm_loss"] for l in open(sys.argv[1])]; print(f"{r[0]:.3f} {sum(r[-3:])/3:.3f}")' "$work/$run.jsonl")
    read -r first last <<<"$l1"
    cpu=$(awk -v n=$((iters * 8 * 64)) '{ printf "%.0f", n / ($1 + $2) }' "$work/$run.cpu")
    printf '%-10s %10s %24s %10s %10s %9s %9s %8s %8s\n' "$run" "$trained" "$pg MiB" "$pred MiB" "$rss MiB" "$tps" "$cpu" "$first" "$last"
    "$T" eval --sft --load "$work/$run" --split-name valid --micro-batch-size 8 --metrics-file "$work/$run.eval.jsonl" > "$work/$run.eval.log" 2>&1
  done
  echo "(loss@$iters: the mean of the last 3 iterations' answer-only losses; tokens/s: positions per second, the median of the iterations after the first;"
  echo " tok/cpu-s: the run's positions over the process's CPU seconds, start-up included: steadier than tokens/s beside other jobs)"
  for run in full lora_qv lora_all; do
    python3 -c 'import json,sys; m=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print("eval --sft valid, %s: loss %.4f over %d answer targets of %d samples" % (sys.argv[2], m["loss"], m["tokens"], m["samples"]))' \
      "$work/$run.eval.jsonl" "$run"
  done
  grep -m1 'memory per rank (predicted)' "$work/full.log" | sed 's/^/full:     /'
  grep -m1 'memory per rank (predicted)' "$work/lora_qv.log" | sed 's/^/lora_qv:  /'
fi

if [ "$part" != lora ]; then
  MODEL=(--num-layers 4 --hidden-size 256 --num-attention-heads 4 --group-query-attention --num-query-groups 2
         --ffn-hidden-size 704 --normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
         --untie-embeddings-and-output-weights --seq-length 512 --max-position-embeddings 512)
  COMMON=(--sft --data-path "$work/mix_sft_document" "${TOK[@]}" "${MODEL[@]}" --micro-batch-size 1
          --global-batch-size 1 --split 100,0,0 --seed 5 --log-interval 1000 --eval-iters 0 --peak-tflops 1
          --lr 0 --min-lr 0 --lr-warmup-iters 0 --hidden-dropout 0 --attention-dropout 0)
  read -r nsamp ntok ncut mean median <<<"$("$py" - "$work/mix_sft_document" "$root/tests/e2e" <<'EOF'
import sys
sys.path.insert(0, sys.argv[2])
import llama_reader as lr
n = [len(t) for t in lr.read_indexed(sys.argv[1])]
c = [min(x, 513) for x in n]
print(len(n), sum(c), sum(x > 513 for x in n), f"{sum(n) / len(n):.0f}", sorted(n)[len(n) // 2])
EOF
)"
  echo
  echo "== packed against padded SFT: $nsamp samples (mean $mean tokens, median $median, $ncut cut to 513), $ntok tokens after the cut; 4 x 256 Llama, seq 512, one row an iteration, one epoch at lr 0"
  "$T" train "${COMMON[@]}" --train-iters 1 --reset-attention-mask --reset-position-ids > "$work/rows.log" 2>&1
  rows=$(grep -oE 'training samples packed into [0-9]+ rows' "$work/rows.log" | grep -oE '[0-9]+ rows' | grep -oE '[0-9]+')
  /usr/bin/time -f '%U %S' -o "$work/padded.cpu" "$T" train "${COMMON[@]}" --train-iters "$nsamp" \
    --metrics-file "$work/padded.jsonl" > "$work/padded.log" 2>&1
  /usr/bin/time -f '%U %S' -o "$work/packed.cpu" "$T" train "${COMMON[@]}" --train-iters "$rows" --reset-attention-mask \
    --reset-position-ids --metrics-file "$work/packed.jsonl" > "$work/packed.log" 2>&1
  python3 - "$work/padded.jsonl" "$work/packed.jsonl" "$ntok" <<'EOF'
import json, sys
ntok = int(sys.argv[3])
res = {}
for name, p in (("padded", sys.argv[1]), ("packed", sys.argv[2])):
    r = [json.loads(l) for l in open(p)]
    cpu = sum(float(x) for x in open(p.replace(".jsonl", ".cpu")).read().split()[-2:])
    cnt = sum(x["sft_loss_tokens"] for x in r)
    loss = sum(x["lm_loss"] * x["sft_loss_tokens"] for x in r) / cnt
    secs = sum(x["elapsed_ms"] for x in r) / 1000
    res[name] = (len(r), cnt, loss, secs, ntok / secs, ntok / cpu)
    print(f"{name}: {len(r):4d} rows of 512, {cnt} answer targets, epoch loss {loss:.7f}, {secs:.1f} s, "
          f"{ntok / secs:.0f} sample tokens/s, {ntok / cpu:.0f} per CPU second (start-up included)")
a, b = res["padded"], res["packed"]
print(f"packed / padded: loss differs by {abs(a[2] - b[2]) / a[2]:.1e} (relative), {b[4] / a[4]:.2f}x sample tokens per second "
      f"({b[5] / a[5]:.2f}x per CPU second), {a[0] / b[0]:.2f}x fewer rows")
EOF
fi
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
