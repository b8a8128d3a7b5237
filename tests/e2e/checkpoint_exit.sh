#!/usr/bin/env bash
# Stopping a run cleanly: --exit-interval, --exit-duration-in-mins and --exit-signal-handler
# (SIGTERM to one rank, as a scheduler sends it) each save and exit 0 on every rank, with latest
# naming the last iteration done; and --keep-last prunes.
CKPT_TOKENS=bytes . "$(dirname "$0")/checkpoint_lib.sh"
latest() { cat "$1/latest_checkpointed_iteration.txt" 2>/dev/null; }

if train 2 1 --pipeline-model-parallel-size 2 --train-iters 10 --exit-interval 3 --save ei --metrics-file ei.jsonl &&
   [ "$(latest ei)" = 3 ] && [ "$(wc -l <ei.jsonl)" = 3 ] && grep -q "exiting after iteration 3 (--exit-interval)" "$last_log"; then
  ok "--exit-interval 3: exit 0 after iteration 3, saved"
else bad "--exit-interval"; cat "$last_log"; fi

# 1e-7 minutes (6 us) is past by the end of any first iteration; 1e-4 (6 ms) was not, on a fast CPU
if train 1 1 --train-iters 1000 --exit-duration-in-mins 0.0000001 --save ed --metrics-file ed.jsonl &&
   [ "$(latest ed)" = 1 ] && grep -q "exiting after iteration 1 (--exit-duration-in-mins)" "$last_log"; then
  ok "--exit-duration-in-mins: exit 0 after the first iteration past the limit, saved"
else bad "--exit-duration-in-mins"; cat "$last_log"; fi

# SIGTERM to one rank of tp2 x pp2: the flag is agreed by all-reduce, every rank saves and exits 0
log=$WORK/sig.log
OMPI_MCA_orte_tmpdir_base=$(session_base) timeout $((120 * ${TD_TIME_SCALE:-1})) "${MPIRUN[@]}" -np 4 "$TRIDENT" train "${BASE[@]}" \
  --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 256 --pipeline-model-parallel-size 2 --train-iters 100000 --exit-signal-handler --save sig --metrics-file sig.jsonl >"$log" 2>&1 &
job=$!
for _ in $(seq 1 600); do [ -f sig.jsonl ] && [ "$(wc -l <sig.jsonl)" -ge 3 ] && break; sleep 0.05; done
victim=$(ranks_of "$job" | sed -n 2p)
kill -TERM "$victim"
for _ in $(seq 1 600); do kill -0 "$job" 2>/dev/null || break; sleep 0.05; done
if kill -0 "$job" 2>/dev/null; then bad "SIGTERM: still running after 30 s"; kill -9 "$job"
else
  wait "$job"; rc=$?
  n=$(wc -l <sig.jsonl)
  if [ "$rc" = 0 ] && [ "$(latest sig)" = "$n" ] && grep -q "exiting after iteration $n (SIGTERM received)" "$log" &&
     "$TRIDENT" checkpoint info sig >/dev/null; then
    ok "SIGTERM to rank pid $victim: every rank saved iteration $n and exited 0"
  else bad "SIGTERM: exit $rc, latest $(latest sig), $n metrics lines"; tail -5 "$log"; fi
fi

if train 1 1 --train-iters 5 --save kl --save-interval 1 --keep-last 2 >/dev/null &&
   [ "$(ls -d kl/iter_* | tr '\n' ' ')" = "kl/iter_0000004 kl/iter_0000005 " ]; then
  ok "--keep-last 2: $(ls kl | tr '\n' ' ')"
else bad "--keep-last 2: $(ls kl | tr '\n' ' ')"; fi

# loading iteration 5 and saving into the same folder replaces iter_0000005 (atomic exchange)
cp -r kl/iter_0000005 kl_before
if train 1 1 --train-iters 5 --load kl --save kl >/dev/null && [ ! -e kl/iter_0000005.tmp ] &&
   out=$("$TRIDENT" checkpoint compare kl_before kl) && "$TRIDENT" checkpoint info kl >/dev/null; then
  ok "re-saving a loaded iteration in place: $(tail -1 <<<"$out")"
else bad "re-saving a loaded iteration in place"; cat "$last_log"; echo "${out:-}"; fi

# --finetune: weights only, iteration 0, fresh optimizer; --no-load-optim keeps the iteration
if train 1 1 --train-iters 2 --load kl --finetune --metrics-file ft.jsonl &&
   [ "$(jq -s '.[0].iteration' ft.jsonl)" = 1 ] && grep -q "weights only" "$last_log"; then
  ok "--finetune: starts at iteration 1 from the weights of iteration 5"
else bad "--finetune"; cat "$last_log"; fi
if train 1 1 --train-iters 7 --load kl --no-load-optim --metrics-file nlo.jsonl &&
   [ "$(jq -s '.[0].iteration' nlo.jsonl)" = 6 ] && grep -q "no optimizer state" "$last_log"; then
  ok "--no-load-optim: continues at iteration 6 with fresh moments"
else bad "--no-load-optim"; cat "$last_log"; fi
if train 1 1 --train-iters 6 --load kl --seed 99 --metrics-file seed.jsonl && grep -q "using the checkpoint's seed 7" "$last_log"; then
  ok "the checkpoint's seed wins over --seed (with a warning)"
else bad "seed from the checkpoint"; cat "$last_log"; fi
finish
