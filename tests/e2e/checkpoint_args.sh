#!/usr/bin/env bash
# The model flags against the checkpoint of --load (ckpt_args_reconcile, driven by the one table
# GPT_CONFIG_KEYS). A 4-layer, hidden-32, 4-head checkpoint (tp1 x dp2 loads it):
#  1. each architecture flag given with another value: exit 2 before anything is allocated, one
#     line (printed once) naming the flag, its value and the checkpoint's;
#  2. --use-checkpoint-args: the architecture comes from meta.json (the log says so), whatever
#     the flags say, and the run continues exactly;
#  3. model flags left out: taken from the checkpoint with a note, and the run continues exactly;
#  4. --use-checkpoint-args without --load, and `trident eval` with a differing flag: exit 2.
CKPT_TOKENS=bytes . "$(dirname "$0")/checkpoint_lib.sh"
train 1 1 --train-iters 4 --metrics-file full.jsonl --dump-params full.params >/dev/null || { bad "reference run failed"; cat "$last_log"; }
train 1 1 --train-iters 4 --exit-interval 2 --save src >/dev/null || { bad "source run failed"; cat "$last_log"; }
tail -n 2 full.jsonl >full_tail.jsonl

mismatch() { # flag value checkpoint-key checkpoint-value
  local flag=$1 v=$2 key=$3 cv=$4
  train 2 1 --train-iters 4 --load src "$flag" "$v"; local rc=$?
  local want="$flag $v differs from the checkpoint's $key $cv (src/iter_0000002/meta.json): give $flag $cv, leave the flag out, or add --use-checkpoint-args"
  if [ "$rc" = 2 ] && [ "$(grep -cF -- "$want" "$last_log")" = 1 ] && ! grep -q "^model:\|parameters" "$last_log"; then
    ok "$flag $v: exit 2, once, before allocation: $(grep -F -- "$want" "$last_log")"
  else bad "$flag $v: exit $rc, want once: $want"; tail -4 "$last_log"; fi
}
mismatch --num-attention-heads 8 num_attention_heads 4
mismatch --num-layers 8 num_layers 4
mismatch --hidden-size 64 hidden_size 32
mismatch --ffn-hidden-size 64 ffn_hidden_size 128
mismatch --max-position-embeddings 32 max_position_embeddings 16

# a mixture of experts saved without --moe-ffn-hidden-size (the experts as wide as --ffn-hidden-size,
# 128) loads with the flag given as that width; another width is refused naming it
MOE=(--num-experts 4 --moe-router-topk 2)
train 1 1 --train-iters 2 --save moe "${MOE[@]}" >/dev/null || { bad "moe source run failed"; cat "$last_log"; }
if train 1 1 --train-iters 3 --load moe --moe-ffn-hidden-size 128 "${MOE[@]}" && grep -q "loaded checkpoint" "$last_log"; then
  ok "moe: saved with the default expert width, loaded with --moe-ffn-hidden-size 128"
else bad "moe: loading with --moe-ffn-hidden-size 128 (the width it has)"; grep error "$last_log"; fi
train 1 1 --train-iters 3 --load moe --moe-ffn-hidden-size 64 "${MOE[@]}"; rc=$?
if [ "$rc" = 2 ] && grep -qF -- "--moe-ffn-hidden-size 64 differs from the checkpoint's moe_ffn_hidden_size 128" "$last_log"; then
  ok "moe: --moe-ffn-hidden-size 64 against 128: exit 2, named"
else bad "moe: --moe-ffn-hidden-size 64 against 128: exit $rc"; grep error "$last_log"; fi
# the same with --ffn-hidden-size 96 (as a converted Mixtral has it), loaded without that flag: the
# flag is held to the width the checkpoint's experts have (96), not to its stored "as wide as
# --ffn-hidden-size" (which against this run's default ffn 128 read as a difference: "96 differs
# from 96")
train 1 1 --train-iters 2 --save moe96 "${MOE[@]}" --ffn-hidden-size 96 >/dev/null || { bad "moe96 source run failed"; cat "$last_log"; }
if train 1 1 --train-iters 3 --load moe96 --moe-ffn-hidden-size 96 "${MOE[@]}" && grep -q "loaded checkpoint" "$last_log" &&
   grep -q "from the checkpoint's meta.json .*ffn_hidden_size 96" "$last_log"; then
  ok "moe: saved with --ffn-hidden-size 96, loaded with --moe-ffn-hidden-size 96 alone: $(grep -o "from the checkpoint's meta.json.*" "$last_log")"
else bad "moe: --moe-ffn-hidden-size 96 on experts of 96 (--ffn-hidden-size 96 not given)"; grep error "$last_log"; fi

if train 2 1 --train-iters 4 --load src --use-checkpoint-args --num-attention-heads 8 --hidden-size 64 --num-layers 2 \
     --metrics-file uca.jsonl --dump-params uca.params &&
   grep -q "architecture from the checkpoint's meta.json (--use-checkpoint-args): num_layers 4, hidden_size 32, num_attention_heads 4, .*ffn_hidden_size 128, max_position_embeddings 16, normalization LayerNorm" "$last_log" &&
   out=$("$COMPARE_RUNS" full_tail.jsonl uca.jsonl full.params uca.params 1e-5); then
  ok "--use-checkpoint-args overrides --num-attention-heads 8 --hidden-size 64 --num-layers 2; iterations 3-4 within 1e-5"
else bad "--use-checkpoint-args"; grep -i "checkpoint\|error" "$last_log" | head -5; echo "${out:-}"; fi

# the same run without any model flag: every setting from the checkpoint, with a note
NOMODEL=()
skip=0
for x in "${BASE[@]}"; do
  if [ "$skip" = 1 ]; then skip=0; continue; fi
  case $x in --num-layers|--hidden-size|--num-attention-heads|--seq-length|--max-position-embeddings) skip=1; continue ;; esac
  NOMODEL+=("$x")
done
if timeout $((120 * ${TD_TIME_SCALE:-1})) "${MPIRUN[@]}" -np 1 "$TRIDENT" train "${NOMODEL[@]}" --make-vocab-size-divisible-by 512 --train-iters 4 \
     --load src --metrics-file none.jsonl >none.log 2>&1 &&
   grep -q "from the checkpoint's meta.json (src/iter_0000002/meta.json): num_layers 4, hidden_size 32, num_attention_heads 4, ffn_hidden_size 128, max_position_embeddings 16, seq_length 16" none.log &&
   diff <(untimed full_tail.jsonl) <(untimed none.jsonl) >/dev/null; then
  ok "no model flags: all from the checkpoint (noted); iterations 3-4 identical"
else bad "no model flags"; grep -i "checkpoint\|error" none.log | head -5; fi

train 1 1 --train-iters 4 --use-checkpoint-args; rc=$?
[ "$rc" = 2 ] && grep -q "use-checkpoint-args needs --load" "$last_log" && ok "--use-checkpoint-args without --load: exit 2" ||
  { bad "--use-checkpoint-args without --load: exit $rc"; tail -2 "$last_log"; }
out=$("$TRIDENT" eval --load src --data-path "$DATA" --num-attention-heads 8 2>&1); rc=$?
[ "$rc" = 2 ] && grep -qF "trident eval: --num-attention-heads 8 differs from the checkpoint's num_attention_heads 4" <<<"$out" &&
  ok "eval --num-attention-heads 8: exit 2" || { bad "eval with a differing flag: exit $rc"; echo "$out" | tail -2; }
finish
