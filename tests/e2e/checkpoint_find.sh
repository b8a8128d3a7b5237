#!/usr/bin/env bash
# Which checkpoint a folder holds when latest_checkpointed_iteration.txt does not say (ckpt_find,
# shared by train --load, eval, generate, convert and checkpoint info), and that a run never overwrites a
# checkpoint it did not load.
#  1. No latest file: the newest iter_* folder that verifies is used, and each command says so on
#     stderr; train --load resumes from it exactly and leaves it untouched.
#  2. No latest file and the newest folder corrupt: the older one is used (the reason named);
#     saving into that folder is refused (it would replace the corrupt iter_0000004); with all
#     folders corrupt every command refuses.
#  3. A folder newer than latest (a save interrupted between its rename and the latest update):
#     it is complete, so it is loaded, with a note.
#  4. A run from scratch (or from an older checkpoint) saving into a folder of checkpoints is
#     refused, so is `convert --to trident` into one, and a --load path holding no checkpoint
#     (unless it is also --save).
CKPT_TOKENS=bytes . "$(dirname "$0")/checkpoint_lib.sh"
train 1 1 --train-iters 6 --metrics-file full.jsonl >/dev/null || { bad "reference run failed"; cat "$last_log"; }
train 1 1 --train-iters 6 --exit-interval 4 --save src --save-interval 2 >/dev/null ||
  { bad "source run failed"; cat "$last_log"; }
flip() { printf '\x55' | dd of="$1" bs=1 seek=$(($(stat -c %s "$1") - 1)) conv=notrunc status=none; }

# 1. no latest file
cp -r src nl && rm nl/latest_checkpointed_iteration.txt
note="nl has no latest_checkpointed_iteration.txt: using nl/iter_0000004, the newest checkpoint there that verifies"
out=$("$TRIDENT" checkpoint info nl 2>&1) && grep -q "^iteration 4;" <<<"$out" && grep -qF "$note" <<<"$out" &&
  ok "checkpoint info: $(grep warning <<<"$out")" || { bad "checkpoint info without latest:"; echo "$out" | head -3; }
out=$("$TRIDENT" convert --from trident nl --to hf hf_nl 2>&1) && grep -qF "$note" <<<"$out" && [ -f hf_nl/config.json ] &&
  ok "convert finds iteration 4 the same way" || { bad "convert without latest:"; echo "$out" | tail -3; }
out=$("$TRIDENT" eval --load nl --data-path "$BYTES_DATA" --split 99,1,0 --seq-length 16 2>&1) && grep -qF "$note" <<<"$out" &&
  grep -q "eval: loss" <<<"$out" && ok "eval finds iteration 4 the same way" || { bad "eval without latest:"; echo "$out" | tail -3; }
out=$("$TRIDENT" generate --load nl --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$BYTES_TOKENIZER" --prompt Hi --max-new-tokens 2 2>&1) &&
  grep -qF "$note" <<<"$out" && grep -q "iteration 4)" <<<"$out" && ok "generate finds iteration 4 the same way, and says so" ||
  { bad "generate without latest:"; echo "$out" | tail -3; }
before=$(tree_sums nl/iter_0000004)
if train 1 1 --train-iters 6 --load nl --save nl --save-interval 2 --metrics-file nl.jsonl && grep -qF "$note" "$last_log" &&
   diff <(untimed full.jsonl | tail -n 2) <(untimed nl.jsonl) >/dev/null && [ "$before" = "$(tree_sums nl/iter_0000004)" ] &&
   [ "$(cat nl/latest_checkpointed_iteration.txt)" = 6 ]; then
  ok "train --load: resumed from iteration 4 (said on stderr), iterations 5-6 identical, iter_0000004 untouched"
else bad "train --load without latest"; tail -3 "$last_log"; fi

# 2. no latest file, the newest folder corrupt
cp -r src nc && rm nc/latest_checkpointed_iteration.txt && flip nc/iter_0000004/model_tp000_pp000.safetensors
out=$("$TRIDENT" checkpoint info nc 2>&1) && grep -q "^iteration 2;" <<<"$out" &&
  grep -q "using nc/iter_0000002, the newest checkpoint there that verifies (skipped, the newest: .*iter_0000004/model_tp000_pp000.safetensors: entry .*CRC32 mismatch" <<<"$out" &&
  ok "newest corrupt: checkpoint info uses iteration 2 and names why" || { bad "newest corrupt: info:"; echo "$out" | head -3; }
before=$(tree_sums nc)
train 1 1 --train-iters 6 --load nc --save nc; rc=$?
line=$(grep -m1 "error: " "$last_log")
[ "$rc" = 1 ] && grep -q "already holds nc/iter_0000004, which this run did not load" <<<"$line" && [ "$before" = "$(tree_sums nc)" ] &&
  ok "newest corrupt: saving into the folder is refused, nothing changed: $line" || { bad "newest corrupt: train --save: exit $rc"; tail -3 "$last_log"; }
if train 1 1 --train-iters 6 --exit-interval 4 --load nc --metrics-file nc.jsonl && grep -q "loaded checkpoint nc/iter_0000002" "$last_log" &&
   diff <(untimed full.jsonl | sed -n 3,4p) <(untimed nc.jsonl) >/dev/null; then
  ok "newest corrupt: train --load (no --save) continues from iteration 2 exactly"
else bad "newest corrupt: train --load"; tail -3 "$last_log"; fi
flip nc/iter_0000002/optim_tp000_pp000.safetensors
for cmd in info train; do
  if [ $cmd = info ]; then out=$("$TRIDENT" checkpoint info nc 2>&1); rc=$?
  else train 1 1 --train-iters 6 --load nc --save nc; rc=$?; out=$(cat "$last_log"); fi
  [ "$rc" = 1 ] && grep -q "nc has no latest_checkpointed_iteration.txt and none of its 2 checkpoint folders verifies" <<<"$out" &&
    ok "all corrupt: $cmd refuses (exit 1)" || { bad "all corrupt: $cmd: exit $rc"; echo "$out" | tail -3; }
done

# 3. a folder newer than latest: loaded
cp -r src orph && echo 2 >orph/latest_checkpointed_iteration.txt
if train 1 1 --train-iters 6 --load orph --save orph --metrics-file orph.jsonl &&
   grep -q "orph/latest_checkpointed_iteration.txt names iteration 2 but orph/iter_0000004 is newer and verifies" "$last_log" &&
   diff <(untimed full.jsonl | tail -n 2) <(untimed orph.jsonl) >/dev/null; then
  ok "a folder newer than latest is loaded (with a note) and the run continues exactly"
else bad "folder newer than latest"; tail -3 "$last_log"; fi

# 4. saving over checkpoints not loaded; --load holding nothing
cp -r src scratch; before=$(tree_sums scratch)
train 1 1 --train-iters 2 --save scratch; rc=$?; line=$(grep -m1 "error: " "$last_log")
[ "$rc" = 1 ] && grep -q "already holds scratch/iter_0000004 and this run starts from scratch" <<<"$line" && [ "$before" = "$(tree_sums scratch)" ] &&
  ok "from scratch into a folder of checkpoints: refused: $line" || { bad "from scratch over checkpoints: exit $rc"; tail -3 "$last_log"; }
train 1 1 --train-iters 4 --load scratch/iter_0000002 --save scratch; rc=$?; line=$(grep -m1 "error: " "$last_log")
[ "$rc" = 1 ] && grep -q "already holds scratch/iter_0000004, which this run did not load" <<<"$line" && [ "$before" = "$(tree_sums scratch)" ] &&
  ok "from iteration 2 into a folder holding iteration 4: refused" || { bad "older load over newer: exit $rc"; tail -3 "$last_log"; }
out=$("$TRIDENT" convert --from hf hf_nl --to trident scratch 2>&1); rc=$?
[ "$rc" = 1 ] && grep -q "to trident scratch already holds a checkpoint" <<<"$out" && [ "$before" = "$(tree_sums scratch)" ] &&
  ok "convert --from hf into a folder of checkpoints: refused" || { bad "convert --to trident over checkpoints: exit $rc"; echo "$out" | tail -2; }
train 1 1 --train-iters 2 --load no_such_folder --save elsewhere; rc=$?; line=$(grep -m1 "error: " "$last_log")
[ "$rc" = 1 ] && grep -q "load no_such_folder holds no checkpoint" <<<"$line" && [ ! -e elsewhere ] &&
  ok "--load of a path holding no checkpoint: refused: $line" || { bad "--load typo: exit $rc"; tail -3 "$last_log"; }
finish
