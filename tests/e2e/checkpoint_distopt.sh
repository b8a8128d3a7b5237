#!/usr/bin/env bash
# The distributed optimizer's checkpoints: each data-parallel rank writes its own optimizer
# shard (optim_tpTTT_ppPPP_dpDDD.safetensors: its pieces of the Adam moments, under logical
# tensor names with their element ranges). Exact resume (bit-identical to the run that never
# stopped); a dp 4 checkpoint continued at dp 2 with the distributed optimizer and with the plain
# one (dp 2, one rank), and a plain checkpoint continued with the distributed optimizer, each
# within 1e-5 of the run that never stopped; re-saving a dp 4 sharded checkpoint with the plain
# optimizer changes no bit (`trident checkpoint compare`).
CKPT_TOKENS=bytes . "$(dirname "$0")/checkpoint_lib.sh"
DIST=(--use-distributed-optimizer --ddp-bucket-size 100000)

# exact resume
resume() { # name np tp flags...
  local name=$1 np=$2 tp=$3; shift 3
  mkdir -p "$name"
  train "$np" "$tp" --train-iters 6 --metrics-file "$name/full.jsonl" --dump-params "$name/full.params" "$@" ||
    { bad "$name: uninterrupted run failed"; cat "$last_log"; return; }
  train "$np" "$tp" --train-iters 6 --exit-interval 3 --save "$name/ckpt" --metrics-file "$name/split.jsonl" "$@" ||
    { bad "$name: first half failed"; cat "$last_log"; return; }
  train "$np" "$tp" --train-iters 6 --load "$name/ckpt" --save "$name/ckpt" --metrics-file "$name/split.jsonl" \
    --dump-params "$name/split.params" "$@" || { bad "$name: resumed run failed"; cat "$last_log"; return; }
  if diff <(untimed "$name/full.jsonl") <(untimed "$name/split.jsonl") >/dev/null && [ "$(wc -l <"$name/full.jsonl")" = 6 ] &&
     cmp -s "$name/full.params" "$name/split.params"; then
    ok "$name: resumed at 3, metrics and final parameters bit-identical to the uninterrupted run"
  else bad "$name: the resumed run differs"; diff <(untimed "$name/full.jsonl") <(untimed "$name/split.jsonl") | head -4; fi
}
resume dp2_overlap 2 1 "${DIST[@]}" --overlap-grad-reduce --overlap-param-gather
resume tp2_pp2_dp2 8 2 --pipeline-model-parallel-size 2 "${DIST[@]}" --overlap-grad-reduce

# a dp 4 distributed-optimizer checkpoint at iteration 2 of 4
train 4 1 --train-iters 4 --save d4 --save-interval 2 --metrics-file d4.jsonl --dump-params d4.params "${DIST[@]}" ||
  { bad "dp 4 source run failed"; cat "$last_log"; finish; exit; }
tail -n 2 d4.jsonl >d4_tail.jsonl
n=$(ls d4/iter_0000002/optim_tp000_pp000_dp00*.safetensors 2>/dev/null | wc -l)
if [ "$n" = 4 ] && [ ! -e d4/iter_0000002/optim_tp000_pp000.safetensors ] &&
   [ "$(jq '[.files[] | select(.kind == "optimizer") | .dp_rank] | sort' -c d4/iter_0000002/meta.json)" = "[0,1,2,3]" ] &&
   [ "$(jq .format_version d4/iter_0000002/meta.json)" = 2 ]; then
  ok "dp 4: four optimizer shards, one per data-parallel rank, listed in meta.json (format 2)"
else bad "dp 4: optimizer shards not one per dp rank"; ls d4/iter_0000002; fi
# every shard holds a quarter of the moments: the same bytes of tensor data (its safetensors
# header's offsets; the headers themselves differ, naming the tensors each shard cuts)
sizes=$(python3 - d4/iter_0000002/optim_tp000_pp000_dp00*.safetensors <<'PY'
import json, struct, sys
for f in sys.argv[1:]:
    with open(f, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        h = json.loads(fh.read(n))
    print(sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in h.items() if k != "__metadata__"))
PY
)
if [ "$(sort -u <<<"$sizes" | wc -l)" = 1 ] && [ "$(head -1 <<<"$sizes")" -gt 0 ]; then
  ok "dp 4: optimizer shards of equal size ($(head -1 <<<"$sizes") bytes of tensor data each)"
else bad "dp 4: optimizer shard sizes differ: $(xargs <<<"$sizes")"; fi

continue_from() { # src_prefix name np tp flags...
  local src=$1 name=$2 np=$3 tp=$4; shift 4
  if train "$np" "$tp" --train-iters 4 --load "$src/iter_0000002" --metrics-file "$name.jsonl" --dump-params "$name.params" "$@" &&
     out=$("$COMPARE_RUNS" "${src}_tail.jsonl" "$name.jsonl" "$src.params" "$name.params" 1e-5); then
    ok "$name: iterations 3-4 and final parameters within 1e-5 ($(grep -o 'relative norm of the difference [^ ]*' <<<"$out"))"
  else bad "$name"; tail -3 "$last_log"; echo "${out:-}"; fi
}
continue_from d4 d4_to_dist_dp2 2 1 "${DIST[@]}"
continue_from d4 d4_to_plain_dp2 2 1
continue_from d4 d4_to_plain_one_rank 1 1
continue_from d4 d4_to_dist_tp2_pp2 4 2 --pipeline-model-parallel-size 2 "${DIST[@]}"

# plain -> distributed
train 2 1 --train-iters 4 --save p2 --save-interval 2 --metrics-file p2.jsonl --dump-params p2.params ||
  { bad "plain dp 2 source run failed"; cat "$last_log"; }
tail -n 2 p2.jsonl >p2_tail.jsonl
continue_from p2 p2_to_dist_dp4 4 1 "${DIST[@]}" --overlap-grad-reduce --overlap-param-gather
continue_from p2 p2_to_dist_tp2_dp2 4 2 "${DIST[@]}"

# re-saved by the plain optimizer right after loading: the same moments, bit for bit
train 1 1 --train-iters 2 --load d4/iter_0000002 --save resaved >/dev/null || { bad "re-save run failed"; cat "$last_log"; }
if out=$("$TRIDENT" checkpoint compare d4/iter_0000002 resaved 2>&1); then ok "dp 4 sharded -> one rank plain -> saved again: $(tail -1 <<<"$out")"
else bad "re-saved checkpoint differs:"; echo "$out"; fi

# `checkpoint info` checks every piece; a corrupt or missing data-parallel shard is named
if out=$("$TRIDENT" checkpoint info d4 2>&1) && grep -q "optim_tp000_pp000_dp003.safetensors" <<<"$out"; then
  ok "checkpoint info verifies the dp shards: $(grep -E 'CRC32' <<<"$out" | tail -1)"
else bad "checkpoint info on the dp 4 checkpoint:"; echo "$out" | tail -3; fi
cp -r d4 flipped
f=flipped/iter_0000002/optim_tp000_pp000_dp002.safetensors
printf '\x55' | dd of=$f bs=1 seek=$(($(stat -c %s $f) - 1)) conv=notrunc status=none
if ! out=$("$TRIDENT" checkpoint info flipped/iter_0000002 2>&1) && grep -q "BAD CRC32: .*optim_tp000_pp000_dp002.safetensors" <<<"$out"
then ok "a flipped byte in a dp shard: checkpoint info names it and exits 1"
else bad "flipped dp shard:"; echo "$out" | tail -3; fi
cp -r d4 missing && rm missing/iter_0000002/optim_tp000_pp000_dp001.safetensors
if ! train 2 1 --train-iters 4 --load missing/iter_0000002 "${DIST[@]}" &&
   grep -q "optim_tp000_pp000_dp001.safetensors is missing" "$last_log"; then ok "a missing dp shard: the load names it"
else bad "missing dp shard:"; tail -3 "$last_log"; fi
finish
