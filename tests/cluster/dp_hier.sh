#!/usr/bin/env bash
# Hierarchical data-parallel collectives (--dp-collectives) on 2 emulated nodes x 2 ranks, dp 4 over
# TCP between the nodes: plain, with the distributed optimizer and both overlaps (many buckets in
# flight, each a chain of in-node and rail stages), and auto; each against the one-rank run within
# 1e-5, and the log must say the buckets went hierarchical (auto: both times printed).
# Environment (tests/cluster/cluster.cmake): TRIDENT, BYTES_DATA, BYTES_TOKENIZER, WORK, COMPARE_RUNS, ROOT.
set -u
. "$(dirname "$0")/two_nodes.sh"
two_nodes dphier
BASE=(--data-path "$BYTES_DATA" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$BYTES_TOKENIZER" --split 90,10,0 --num-layers 4
      --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
      --hidden-dropout 0.1 --attention-dropout 0.1 --global-batch-size 8 --micro-batch-size 1 --lr 1e-3
      --seed 7 --peak-tflops 1 --train-iters 3 --log-interval 100 --eval-iters 0 --make-vocab-size-divisible-by 512)
fail=0
"$TRIDENT" train "${BASE[@]}" --micro-batch-size 2 --metrics-file one.jsonl --dump-params one.params > one.log 2>&1 ||
  { echo "FAIL: one rank"; cat one.log; exit 1; }
dp4() { # name, the line rank 0 must print, flags...
  local name=$1 want=$2; shift 2
  timeout $((120 * ${TD_TIME_SCALE:-1})) "$cluster" run node1 mpirun --hostfile "$CLUSTER_DIR/hostfile" --mca plm_rsh_agent "$CLUSTER_DIR/rsh" \
    --mca btl tcp,self,vader --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 -x OMP_NUM_THREADS \
    -np 4 "$TRIDENT" train "${BASE[@]}" "$@" --metrics-file "$name.jsonl" --dump-params "$name.params" > "$name.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then echo "FAIL: $name exited $rc"; tail -20 "$name.log"; fail=1; return; fi
  if "$COMPARE_RUNS" one.jsonl "$name.jsonl" one.params "$name.params" 1e-5 > "$name.cmp" 2>&1; then echo "ok: $name = one rank"
  else echo "FAIL: $name differs from one rank"; cat "$name.cmp"; fail=1; fi
  if grep -Eq "$want" "$name.log"; then echo "ok: $name: $(grep -o 'dp collectives: .*' "$name.log")"
  else echo "FAIL: $name: no line matching '$want'"; grep -i "dp collectives\|placement" "$name.log"; fail=1; fi
}
dp4 hier "dp collectives: hierarchical \(2 hosts x 2 data-parallel ranks\)" --dp-collectives hierarchical
dp4 hier_distopt_overlap "dp collectives: hierarchical \(2 hosts x 2" --dp-collectives hierarchical \
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 20000
dp4 auto_overlap "dp collectives: (flat|hierarchical) \(2 hosts x 2 .*flat [0-9.]+ ms, hierarchical [0-9.]+ ms" \
  --overlap-grad-reduce --ddp-bucket-size 20000
# and flat, forced: no line at all (the same buckets, one collective over the 4 ranks)
dp4 flat "placement: node1: ranks 0-1" --dp-collectives flat
grep -q "dp collectives" flat.log && { echo "FAIL: flat printed a dp collectives line"; fail=1; }
exit $fail
