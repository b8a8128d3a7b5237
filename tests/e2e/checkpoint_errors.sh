#!/usr/bin/env bash
# Bad checkpoints: each case is one clear error line naming the file or tensor, a non-zero exit,
# and nothing overwritten (the run is given --save into the checkpoint's own folder, whose files
# must keep their checksums). Plus `trident checkpoint info` on a good and a corrupt checkpoint.
. "$(dirname "$0")/checkpoint_lib.sh"
train 4 2 --pipeline-model-parallel-size 2 --train-iters 2 --save good >/dev/null ||
  { bad "source run failed"; cat "$last_log"; finish; exit; }
if out=$("$TRIDENT" checkpoint info good) && grep -q "^iteration 2;" <<<"$out" &&
   grep -q "^layout: tp 2 x pp 2 x dp 1" <<<"$out" && grep -q "embedding.word.weight *\[50688, 32\]" <<<"$out" &&
   grep -Eq "CRC32: all [0-9]+ entries ok" <<<"$out"; then
  ok "checkpoint info: iteration, layout, tensors, sizes, CRCs ($(grep -c safetensors <<<"$out") shards)"
else bad "checkpoint info:"; echo "$out"; fi

# case NAME EXPECTED-TEXT EDIT [train flags...]: copies good/ to NAME/, applies EDIT there, loads it
case_() {
  local name=$1 want=$2 edit=$3; shift 3
  rm -rf "$name" && cp -r good "$name" && (cd "$name" && eval "$edit")
  local before; before=$(tree_sums "$name")
  train 4 2 --pipeline-model-parallel-size 2 --train-iters 4 --load "$name" --save "$name" --save-interval 1 "$@"
  local rc=$?
  local line; line=$(grep -m1 "error: " "$last_log")
  if [ "$rc" -ne 0 ] && grep -qF -- "$want" <<<"$line" && [ "$before" = "$(tree_sums "$name")" ]; then
    ok "$name: exit $rc, nothing overwritten: $line"
  else
    bad "$name: exit $rc, want text '$want'"; tail -5 "$last_log"
  fi
}
shard=iter_0000002/model_tp001_pp000.safetensors
# a byte of tensor data flipped (the last byte of the file is data)
case_ bit_flip "model_tp001_pp000.safetensors: entry 'embedding.word.weight': CRC32 mismatch" \
  "printf '\\x55' | dd of=$shard bs=1 seek=\$((\$(stat -c %s $shard) - 1)) conv=notrunc status=none"
case_ truncated "model_tp001_pp000.safetensors has 3296800 bytes but" "truncate -s 3296800 $shard"
case_ missing_shard "optim_tp000_pp001.safetensors is missing" "rm iter_0000002/optim_tp000_pp001.safetensors"
case_ header_garbage "model_tp001_pp000.safetensors: header is not valid JSON" \
  "printf '{{{{' | dd of=$shard bs=1 seek=9 conv=notrunc status=none"
case_ newer_format "has checkpoint format version 99" \
  "sed -i 's/\"format_version\":\t1/\"format_version\":\t99/' iter_0000002/meta.json"
case_ latest_dangling "names iteration 7 but" "echo 7 > latest_checkpointed_iteration.txt"
case_ latest_garbage "does not hold an iteration number" "echo banana > latest_checkpointed_iteration.txt"
case_ ffn_differs "tensor layers.1.mlp.fc2.weight: the checkpoint's shape is [32, 128] but this run's is [32, 64]" \
  ":" --ffn-hidden-size 64
case_ layers_differ "has 4 layers but this run has 8 (--num-layers)" ":" --num-layers 8
case_ positions_differ "tensor embedding.position.weight: the checkpoint's shape is [16, 32] but this run's is [32, 32]" \
  ":" --max-position-embeddings 32
case_ no_optimizer_state "has no optimizer state" "sed -i 's/\"optimizer\":\t{/\"optimizer\": null, \"x\": {/' iter_0000002/meta.json"

# checkpoint info on a corrupt one: exit 1, the bad entry named
rm -rf flipped && cp -r good flipped
f=flipped/iter_0000002/optim_tp000_pp000.safetensors
printf '\x55' | dd of=$f bs=1 seek=$(($(stat -c %s $f) - 1)) conv=notrunc status=none
if out=$("$TRIDENT" checkpoint info flipped 2>&1); then bad "checkpoint info accepted a corrupt checkpoint"
elif grep -q "BAD CRC32: .*optim_tp000_pp000.safetensors: exp_avg_sq.embedding.word.weight" <<<"$out" &&
     grep -Eq "CRC32: 1 of [0-9]+ entries BAD" <<<"$out"; then ok "checkpoint info names the corrupt entry and exits 1"
else bad "checkpoint info on a corrupt checkpoint:"; echo "$out"; fi
finish
