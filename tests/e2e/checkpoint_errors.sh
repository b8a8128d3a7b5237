#!/usr/bin/env bash
# Bad checkpoints: each case is one clear error line naming the file or tensor, a non-zero exit,
# and nothing overwritten (the run is given --save into the checkpoint's own folder, whose files
# must keep their checksums). Plus `trident checkpoint info` on a good and a corrupt checkpoint.
CKPT_TOKENS=bytes . "$(dirname "$0")/checkpoint_lib.sh"
train 4 2 --pipeline-model-parallel-size 2 --train-iters 2 --save good >/dev/null ||
  { bad "source run failed"; cat "$last_log"; finish; exit; }
if out=$("$TRIDENT" checkpoint info good) && grep -q "^iteration 2;" <<<"$out" &&
   grep -q "^layout: tp 2 x pp 2 x dp 1" <<<"$out" && grep -q "embedding.word.weight *\[512, 32\]" <<<"$out" &&
   grep -Eq "CRC32: all [0-9]+ entries ok" <<<"$out" &&
   grep -q "num_query_groups 4, kv_channels 8, .* norm_epsilon 1e-05, .* rotary_base 10000, rotary_percent 1," <<<"$out"
then
  ok "checkpoint info: iteration, layout, tensors, sizes, CRCs ($(grep -c safetensors <<<"$out") shards), defaults resolved (kv_channels 32/4 = 8)"
else bad "checkpoint info:"; echo "$out"; fi
model=$(jq -c '.model | [.num_query_groups, .kv_channels, .rotary_base, .rotary_percent]' good/iter_0000002/meta.json)
[ "$model" = "[4,8,10000,1]" ] && grep -Eq '"norm_epsilon":\s*1e-05,' good/iter_0000002/meta.json &&
  ok "meta.json: the defaults resolved ($model, norm_epsilon 1e-05)" || bad "meta.json model: $model"

# case NAME EXPECTED-TEXT EDIT [train flags...]: copies good/ to NAME/, applies EDIT there, loads it
case_() {
  local name=$1 want=$2 edit=$3; shift 3
  rm -rf "$name" && cp -r good "$name" && (cd "$name" && eval "$edit")
  local before; before=$(tree_sums "$name")
  train 4 2 --pipeline-model-parallel-size 2 --train-iters 4 --load "$name" --save "$name" --save-interval 1 "$@"
  local rc=$?
  local line; line=$(grep -m1 "error: \|trident train: " "$last_log")
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
# model flags that differ from the checkpoint's (more in checkpoint_args.sh): exit 2
case_ ffn_differs "--ffn-hidden-size 64 differs from the checkpoint's ffn_hidden_size 128" ":" --ffn-hidden-size 64
case_ layers_differ "--num-layers 8 differs from the checkpoint's num_layers 4" ":" --num-layers 8
case_ positions_differ "--max-position-embeddings 32 differs from the checkpoint's max_position_embeddings 16" \
  ":" --max-position-embeddings 32
# the activation set by a Megatron switch (--swiglu: activation_func silu), named as given
case_ swiglu_differs "--swiglu (activation_func silu) differs from the checkpoint's activation_func gelu" ":" --swiglu
# a weights-only checkpoint: meta.json without the optimizer and its shards
case_ no_optimizer_state "has no optimizer state" \
  "jq '.optimizer = null | .files |= map(select(.kind == \"model\"))' iter_0000002/meta.json >m && mv m iter_0000002/meta.json && rm iter_0000002/optim_*"

# meta.json disagreeing with the shards or the folder name: train --load, eval, convert and
# checkpoint info each refuse with one line naming meta.json, the field and both values (exit 1)
edited() { # name want-text jq-edit
  local name=$1 want=$2 edit=$3
  case_ "$name" "$want" "jq '$edit' iter_0000002/meta.json >m && mv m iter_0000002/meta.json"
  local what out rc
  for what in eval convert info; do
    case $what in
      eval) out=$("$TRIDENT" eval --load "$name" --data-path "$BYTES_DATA" --seq-length 16 2>&1) ;;
      convert) out=$("$TRIDENT" convert --from trident "$name" --to hf "hf_$name" 2>&1) ;;
      info) out=$("$TRIDENT" checkpoint info "$name" 2>&1) ;;
    esac
    rc=$?
    if [ "$rc" = 1 ] && [ "$(grep -c "error: " <<<"$out")" = 1 ] && grep -qF -- "$want" <<<"$out" && [ ! -e "hf_$name/config.json" ]
    then ok "$name: $what refuses (exit 1)"; else bad "$name: $what: exit $rc:"; echo "$out" | tail -3; fi
  done
}
edited hidden_edited "hidden_edited/iter_0000002/meta.json: hidden_size is 128 but tensor embedding.word.weight in" \
  '.model.hidden_size = 128'
edited iteration_edited "iteration_edited/iter_0000002/meta.json: iteration is 7 but the folder is iter_0000002" '.iteration = 7'
edited layers_edited "meta.json: num_layers is 3 but" '.model.num_layers = 3'
edited heads_edited "meta.json: model.num_attention_heads 5 is not divisible by model.num_query_groups 4" \
  '.model.num_attention_heads = 5'

# checkpoint info on a corrupt one: exit 1, the bad entry named
rm -rf flipped && cp -r good flipped
f=flipped/iter_0000002/optim_tp000_pp000.safetensors
printf '\x55' | dd of=$f bs=1 seek=$(($(stat -c %s $f) - 1)) conv=notrunc status=none
if out=$("$TRIDENT" checkpoint info flipped 2>&1); then bad "checkpoint info accepted a corrupt checkpoint"
elif grep -q "BAD CRC32: .*optim_tp000_pp000.safetensors: exp_avg_sq.embedding.word.weight" <<<"$out" &&
     grep -Eq "CRC32: 1 of [0-9]+ entries BAD" <<<"$out"; then ok "checkpoint info names the corrupt entry and exits 1"
else bad "checkpoint info on a corrupt checkpoint:"; echo "$out"; fi
# A shard of another save or another run copied in (same name, same size, every CRC32 fine):
# train --load, eval, convert and checkpoint info refuse with one line naming the shard and
# both iterations and runs; and a checkpoint from before run ids (no iteration or run_id in
# meta.json and the shards' __metadata__) still loads.
DIST=(--use-distributed-optimizer --ddp-bucket-size 100000)
train 2 1 --train-iters 2 --save-interval 1 --save runa "${DIST[@]}" >/dev/null &&
  train 2 1 --train-iters 2 --save runb --seed 8 "${DIST[@]}" >/dev/null ||
  { bad "source runs failed"; cat "$last_log"; finish; exit; }
ida=$(jq -r .run_id runa/iter_0000002/meta.json) idb=$(jq -r .run_id runb/iter_0000002/meta.json)
[ ${#ida} = 16 ] && [ "$ida" != "$idb" ] && [ "$(jq -r .run_id runa/iter_0000001/meta.json)" = "$ida" ] &&
  ok "run ids: one per run ($ida, $idb), kept across its saves" || bad "run ids '$ida' '$idb'"
swapped() { # name shard from-folder want-text
  local name=$1 shard=$2 from=$3 want=$4 what out rc
  rm -rf "$name" && cp -r runa "$name" && cp "$from/$shard" "$name/iter_0000002/$shard"
  for what in train eval convert info; do
    case $what in
      train) train 2 1 --train-iters 4 --load "$name" --save "$name" "${DIST[@]}"; rc=$?; out=$(cat "$last_log") ;;
      eval) out=$("$TRIDENT" eval --load "$name" --data-path "$BYTES_DATA" --seq-length 16 2>&1) ;;
      convert) out=$("$TRIDENT" convert --from trident "$name" --to hf "hf_$name" 2>&1) ;;
      info) out=$("$TRIDENT" checkpoint info "$name" 2>&1) ;;
    esac
    [ "$what" = train ] || rc=$?
    if [ "$rc" = 1 ] && [ "$(grep -c "error: " <<<"$out")" = 1 ] && grep -qF -- "$name/iter_0000002/$shard: $want" <<<"$out" &&
       [ ! -e "hf_$name/config.json" ] && [ ! -d "$name/iter_0000004" ]
    then ok "$name: $what refuses (exit 1)"; else bad "$name: $what: exit $rc:"; echo "$out" | grep -m2 "error"; fi
  done
}
swapped model_from_iter1 model_tp000_pp000.safetensors runa/iter_0000001 \
  "its __metadata__ says iteration 1 of run $ida but model_from_iter1/iter_0000002/meta.json is iteration 2 of run $ida"
swapped distopt_from_iter1 optim_tp000_pp000_dp001.safetensors runa/iter_0000001 "its __metadata__ says iteration 1 of run $ida but"
swapped model_from_run_b model_tp000_pp000.safetensors runb/iter_0000002 \
  "its __metadata__ says iteration 2 of run $idb but model_from_run_b/iter_0000002/meta.json is iteration 2 of run $ida"
swapped distopt_from_run_b optim_tp000_pp000_dp000.safetensors runb/iter_0000002 "its __metadata__ says iteration 2 of run $idb but"

# before run ids: the keys taken out of meta.json and of each shard's header (blank-padded to its
# length, as the safetensors format allows, so the data and the sizes stay)
rm -rf old && cp -r runa old
# (and the defaults written as 0, as meta.json had them before)
jq 'del(.run_id) | .model |= (.num_query_groups = 0 | .kv_channels = 0 | .norm_epsilon = 0 | .rotary_base = 0 |
    .rotary_percent = 0)' old/iter_0000002/meta.json >m && mv m old/iter_0000002/meta.json
python3 - old/iter_0000002/*.safetensors <<'PY'
import json, struct, sys
for path in sys.argv[1:]:
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        for k in ("iteration", "run_id"):
            del h["__metadata__"][k]
        text = json.dumps(h, separators=(",", ":")).encode()
        f.seek(8)
        f.write(text + b" " * (n - len(text)))
PY
if ! grep -lq run_id old/iter_0000002/* && "$TRIDENT" checkpoint info old >old_info.txt &&
   grep -Eq "CRC32: all [0-9]+ entries ok" old_info.txt && grep -q "kv_channels 8, .* norm_epsilon 1e-05" old_info.txt &&
   "$TRIDENT" eval --load old --data-path "$BYTES_DATA" --split 99,1,0 --seq-length 16 >/dev/null 2>&1 &&
   train 2 1 --train-iters 4 --load old --save old "${DIST[@]}" && [ -d old/iter_0000004 ] &&
   [ "$(jq -r .run_id old/iter_0000004/meta.json | wc -c)" = 17 ]; then
  ok "a checkpoint from before run ids loads (info, eval, train); the resumed run saves with a new run id"
else bad "the checkpoint from before run ids:"; tail -3 "$last_log"; fi
finish
