#!/usr/bin/env bash
# trident eval through the binary: a checkpoint trained in tp2 x pp2 is scored on a validation
# split of 15 documents (--split 99,1,0: 2341 tokens of tinyshakespeare's bytes, 146 windows at stride
# 16, 465 at 5; in bytes, not GPT-2's tokens: 6.8 against 14.5 CPU-s)
# with stride 16 and 5 in five layouts (one rank, tp2, pp2, dp2 with micro-batches of 2,
# tp2 x pp2): the same token count and loss within 1e-6 of the one-rank run; the metrics line;
# a dataset with ids outside the vocabulary is refused (exit 1);
# stride = seq-length scores every token of the full windows once; with stride = seq-length it
# equals the trainer's own validation loss over the same windows; bad flags exit 2. (The loss
# against an independent hand computation: tests/unit/test_eval.c.)
CKPT_TOKENS=bytes . "$(dirname "$0")/checkpoint_lib.sh"
DATA=$BYTES_DATA
train 4 2 --pipeline-model-parallel-size 2 --train-iters 3 --save ck >/dev/null || { bad "training run"; cat "$last_log"; }
EV=(--load ck --data-path "$DATA" --split 99,1,0 --split-name valid --seq-length 16 --micro-batch-size 3)
evaluate() { # name np K tp pp [flags]
  local name=$1 np=$2 K=$3 tp=$4 pp=$5; shift 5
  timeout $((120 * ${TD_TIME_SCALE:-1})) "${MPIRUN[@]}" -np "$np" "$TRIDENT" eval "${EV[@]}" --eval-stride "$K" --tensor-model-parallel-size "$tp" \
    --pipeline-model-parallel-size "$pp" --metrics-file "$name.jsonl" "$@" >"$name.log" 2>&1
}
for K in 16 5; do
  evaluate one_$K 1 $K 1 1 || { bad "one rank, stride $K"; cat one_$K.log; continue; }
  ref=$(jq .loss one_$K.jsonl) tok=$(jq .tokens one_$K.jsonl)
  win=$(jq .windows one_$K.jsonl) n=$(jq .document_tokens one_$K.jsonl)
  [ "$tok" = $((16 + (win - 1) * K)) ] && [ "$win" = $(((n - 17) / K + 1)) ] &&
    ok "stride $K: $n tokens, $win windows, $tok scored, loss $ref" || bad "stride $K: counts $n $win $tok"
  for lay in "tp2 2 2 1" "pp2 2 1 2" "dp2 2 1 1 --micro-batch-size 2" "tp2_pp2 4 2 2"; do
    set -- $lay; name=$1; shift
    if evaluate ${name}_$K "$1" $K "$2" "$3" "${@:4}"; then
      got=$(jq .loss ${name}_$K.jsonl) t=$(jq .tokens ${name}_$K.jsonl)
      if [ "$t" = "$tok" ] && awk -v a="$ref" -v b="$got" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-6 * a) }'; then
        ok "stride $K, $name: loss $got, $t tokens"
      else bad "stride $K, $name: loss $got vs $ref, tokens $t vs $tok"; fi
    else bad "stride $K, $name"; cat ${name}_$K.log; fi
  done
done
grep -q "eval: loss .* | perplexity .* | tokens" one_16.log && ok "prints loss, perplexity and tokens" || bad "printed line"

# The documents from the checkpoint: ck was trained with --split 90,10,0 (eval's default is
# 969,30,1). Without --data-path, --split and --seq-length, eval scores the documents the training
# held out, 1500 x 0.10 = 150 from document 1350 (Megatron's split: round(0.9 x 1500)), with the
# loss of the explicit flags, and says what it took; flags given win.
own() { # name [flags]: one rank, the valid split
  local name=$1; shift
  timeout $((120 * ${TD_TIME_SCALE:-1})) "$TRIDENT" eval --load ck --split-name valid --micro-batch-size 8 --metrics-file "$name.jsonl" "$@" \
    >"$name.log" 2>&1
}
docs() { echo "$(jq .documents "$1.jsonl") $(jq .first_document "$1.jsonl") $(jq -r .split "$1.jsonl")"; }
if own explicit --data-path "$DATA" --split 90,10,0 --seq-length 16 && own taken && own path_only --data-path "$DATA" &&
   own given --split 98,2,0; then
  note=$(grep "from the checkpoint's meta.json" taken.log)
  if [ "$(docs taken)" = "150 1350 90,10,0" ] && [ "$(jq .loss taken.jsonl)" = "$(jq .loss explicit.jsonl)" ] &&
     grep -qF -- "--data-path $DATA, --split 90,10,0, --seq-length 16" <<<"$note" &&
     ! grep -q "from the checkpoint's meta.json" explicit.log; then
    ok "nothing given: the checkpoint's valid split (150 documents from 1350), loss $(jq .loss taken.jsonl) as with the flags: $note"
  else bad "nothing given: $(docs taken), loss $(jq .loss taken.jsonl) vs $(jq .loss explicit.jsonl): $note"; fi
  [ "$(docs path_only)" = "150 1350 90,10,0" ] && [ "$(jq .loss path_only.jsonl)" = "$(jq .loss explicit.jsonl)" ] &&
    ok "--data-path given: the checkpoint's --split still" || bad "--data-path given: $(docs path_only)"
  [ "$(docs given)" = "30 1470 98,2,0" ] && ! grep "from the checkpoint's" given.log | grep -q -- "--split" &&
    ok "--split 98,2,0 given wins: 30 documents from 1470" || bad "--split given: $(docs given)"
else bad "eval with the checkpoint's data settings"; tail -3 explicit.log taken.log path_only.log given.log; fi

# Against the trainer: with a validation split of one document (--split 1028,1,471: document
# 1028, 2306 bytes) and --eval-iters equal to its window count, the trainer's one validation
# pass scores one epoch of samples, which are exactly the stride-16 windows (in another order);
# trident eval of the checkpoint saved right after must give the same loss.
one=(--split 1028,1,471 --split-name valid --seq-length 16)
if timeout $((60 * ${TD_TIME_SCALE:-1})) "$TRIDENT" eval --load ck --data-path "$DATA" "${one[@]}" --metrics-file win.jsonl >win.log 2>&1; then
  nwin=$(jq .windows win.jsonl)
  if train 1 1 --split 1028,1,471 --train-iters 1 --eval-interval 1000 --eval-iters "$nwin" --global-batch-size 1 \
       --save tv --metrics-file tv.jsonl &&
     timeout $((60 * ${TD_TIME_SCALE:-1})) "$TRIDENT" eval --load tv --data-path "$DATA" "${one[@]}" --metrics-file tve.jsonl >tve.log 2>&1; then
    a=$(jq .val_loss tv.jsonl) b=$(jq .loss tve.jsonl)
    if awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-6 * a) }'; then
      ok "one document, $nwin windows: the trainer's validation loss $a = eval's $b"
    else bad "trainer validation $a vs eval $b"; fi
  else bad "trainer vs eval runs"; cat "$last_log" tve.log 2>/dev/null | tail -5; fi
else bad "window count"; cat win.log; fi

# Token ids outside the checkpoint's vocabulary: a .bin of 0xFF bytes (every id 65535) is refused
# before anything is scored, once (rank 0), exit 1, naming the file, the position, the id and the size.
cp "$DATA.idx" ff.idx && head -c "$(stat -c %s "$DATA.bin")" /dev/zero | tr '\0' '\377' >ff.bin
timeout $((60 * ${TD_TIME_SCALE:-1})) "${MPIRUN[@]}" -np 2 "$TRIDENT" eval --load ck --data-path ff --seq-length 16 \
  --tensor-model-parallel-size 2 >ff.log 2>&1; rc=$?
if [ "$rc" = 1 ] && grep -q "ff.bin: token id 65535 at document 0, token 0 (byte 0 of the file) is outside the vocabulary of 257 ids" ff.log &&
   [ "$(grep -c 'token id 65535' ff.log)" = 1 ]; then ok "ids outside the vocabulary: exit 1: $(grep -m1 'token id' ff.log)"
else bad "ids outside the vocabulary: exit $rc"; cat ff.log; fi

check_fail() { # name text flags...
  local name=$1 text=$2; shift 2
  out=$("$TRIDENT" eval "$@" 2>&1); rc=$?
  if [ "$rc" = 2 ] && grep -qF -- "$text" <<<"$out"; then ok "$name: exit 2: $out"; else bad "$name: exit $rc: $out"; fi
}
check_fail "stride longer than the window" "--eval-stride 17 is longer than --seq-length 16" "${EV[@]}" --eval-stride 17
check_fail "no checkpoint" "--load DIR (a checkpoint) is required" --data-path "$DATA" --seq-length 16
# the checkpoint's data path missing, or not there from here: --data-path is asked for
for edit in "del(.args.data_path)|records no data path of its own" \
            ".args.data_path = [\"elsewhere/ts\"]|records the training run's elsewhere/ts, but elsewhere/ts.idx cannot be read here" \
            ".args.data_path = [\"0.5\", \"a\", \"0.5\", \"b\"]|records a blend (eval scores one dataset prefix"; do
  rm -rf ck_edit && cp -r ck ck_edit && it=$(ls -d ck_edit/iter_*) &&
    jq "${edit%%|*}" "$it/meta.json" >m && mv m "$it/meta.json"
  check_fail "the checkpoint's data path: ${edit%%|*}" "--data-path PREFIX is needed: $it/meta.json ${edit#*|}" \
    --load ck_edit --split-name valid
done
check_fail "window longer than the positions" "--seq-length 32 is longer than the checkpoint's 16 positions" \
  --load ck --data-path "$DATA" --seq-length 32
finish
