#!/usr/bin/env bash
# Layouts across emulated nodes (scripts/cluster.sh: network + UTS + mount namespaces linked by
# veth through a bridge, Open MPI over TCP between them, launched through the cluster's rsh
# agent) against the one-rank run: the same losses and grad norms within 1e-5: tp 2 x dp 2, tp 2 x pp 2
# interleaved and 1F1B with validation (both with scatter/gather: each rank sends half of each stage
# transfer across the network, its node's pair all-gathers it), pp 2 x dp 2 with the distributed
# optimizer, tp 2 x dp 2 with both overlaps, and tp 2 x dp 2 dealt round-robin.
# Environment (tests/cluster/cluster.cmake): TRIDENT, BYTES_DATA, BYTES_TOKENIZER, WORK, COMPARE_RUNS, ROOT.
set -u
. "$(dirname "$0")/two_nodes.sh"
two_nodes layouts
BASE=(--data-path "$BYTES_DATA" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$BYTES_TOKENIZER" --split 90,10,0 --num-layers 4
      --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
      --hidden-dropout 0.1 --attention-dropout 0.1 --global-batch-size 8 --micro-batch-size 2 --lr 1e-3
      --seed 7 --peak-tflops 1 --train-iters 3 --log-interval 100 --eval-iters 0)
fail=0
"$TRIDENT" train "${BASE[@]}" --make-vocab-size-divisible-by 512 --metrics-file one.jsonl --dump-params one.params > one.log 2>&1 || { echo "FAIL: one rank"; cat one.log; exit 1; }
across() { # name, flags...: 4 ranks, 2 on each node, against the run REF (default one)
  local name=$1; shift
  timeout $((120 * ${TD_TIME_SCALE:-1})) "$cluster" run node1 mpirun --hostfile "$CLUSTER_DIR/hostfile" --mca plm_rsh_agent "$CLUSTER_DIR/rsh" \
    --mca btl tcp,self,vader --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 -x OMP_NUM_THREADS ${MAP:+--map-by $MAP} \
    -np 4 "$TRIDENT" train "${BASE[@]}" --make-vocab-size-divisible-by 256 "$@" --metrics-file "$name.jsonl" --dump-params "$name.params" > "$name.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then echo "FAIL: $name exited $rc"; tail -20 "$name.log"; fail=1; return; fi
  local ref=${REF:-one}
  if "$COMPARE_RUNS" "$ref.jsonl" "$name.jsonl" "$ref.params" "$name.params" 1e-5 > "$name.cmp" 2>&1; then echo "ok: $name across 2 nodes = one rank"
  else echo "FAIL: $name differs from one rank"; cat "$name.cmp"; fail=1; fi
}
placed() { # name, the placement line rank 0 must print
  if grep -qF "placement: $2" "$1.log"; then echo "ok: $1 placed as $2"; else echo "FAIL: $1: no 'placement: $2'"; grep placement "$1.log"; fail=1; fi
}
across tp2_dp2 --tensor-model-parallel-size 2
placed tp2_dp2 "node1: ranks 0-1 (tp 0-1, pp 0, dp 0); node2: ranks 2-3 (tp 0-1, pp 0, dp 1)"
grep -q "spans hosts" tp2_dp2.log && { echo "FAIL: tp2_dp2 warned of a tensor-parallel group across hosts"; fail=1; }
# interleaved: two virtual stages of one layer per rank, the pipeline's sends crossing the network both ways
across tp2_pp2_interleaved --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
placed tp2_pp2_interleaved "node1: ranks 0-1 (tp 0-1, pp 0, dp 0); node2: ranks 2-3 (tp 0-1, pp 1, dp 0)"
grep -q "interleaved" tp2_pp2_interleaved.log || { echo "FAIL: tp2_pp2_interleaved did not run the interleaved schedule"; grep schedule tp2_pp2_interleaved.log; fail=1; }
# 1F1B with validation every other iteration (the forward-only schedule), scatter/gather on
EVAL=(--eval-interval 2 --eval-iters 1)
"$TRIDENT" train "${BASE[@]}" "${EVAL[@]}" --make-vocab-size-divisible-by 512 --metrics-file one_eval.jsonl --dump-params one_eval.params > one_eval.log 2>&1 || { echo "FAIL: one rank with validation"; cat one_eval.log; exit 1; }
REF=one_eval across tp2_pp2_sg --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "${EVAL[@]}"
placed tp2_pp2_sg "node1: ranks 0-1 (tp 0-1, pp 0, dp 0); node2: ranks 2-3 (tp 0-1, pp 1, dp 0)"
for n in tp2_pp2_interleaved tp2_pp2_sg; do
  if grep -q "scatter/gather on: each of the 2 tp ranks sends 1/2" $n.log; then echo "ok: $n sent half of each transfer across"
  else echo "FAIL: $n: scatter/gather not on"; grep "pipeline transfers" $n.log; fail=1; fi
done
grep -q "val_loss" tp2_pp2_sg.jsonl || { echo "FAIL: tp2_pp2_sg ran no validation"; fail=1; }
# the distributed optimizer's reduce-scatter and all-gather between the nodes (dp pairs 0,2 and 1,3)
across pp2_dp2_distopt --pipeline-model-parallel-size 2 --use-distributed-optimizer --make-vocab-size-divisible-by 512 # tp 1: pad as one rank
placed pp2_dp2_distopt "node1: ranks 0-1 (tp 0, pp 0, dp 0-1); node2: ranks 2-3 (tp 0, pp 1, dp 0-1)"
# both overlaps over TCP (dp pairs 0,2 and 1,3 across the network, several buckets): the progress
# between kernels (comm_progress) changes no result, and the dp time in flight is reported
across tp2_dp2_overlap --tensor-model-parallel-size 2 --use-distributed-optimizer --overlap-grad-reduce \
  --overlap-param-gather --ddp-bucket-size 20000
if awk '{ s = $0; sub(/.*"dp_inflight_ms": /, "", s); sub(/[,}].*/, "", s); x = $0; sub(/.*"dp_exposed_ms": /, "", x)
          sub(/[,}].*/, "", x); if (!(s + 0 > 0 && x + 0 <= (s + 0) * (1 + 1e-5) + 1e-6)) bad = 1 } END { exit bad }' tp2_dp2_overlap.jsonl
then echo "ok: tp2_dp2_overlap reports dp time in flight, exposed <= in flight"
else echo "FAIL: tp2_dp2_overlap: dp_inflight_ms missing, 0, or below dp_exposed_ms"; cat tp2_dp2_overlap.jsonl; fail=1; fi
# ranks dealt round-robin over the nodes: each tensor-parallel pair spans both, which is correct but
# slow, and rank 0 must say so, once, with the fix
MAP=node across tp2_spread --tensor-model-parallel-size 2
placed tp2_spread "node1: ranks 0,2 (tp 0, pp 0, dp 0-1); node2: ranks 1,3 (tp 1, pp 0, dp 0-1)"
if [ "$(grep -c "tensor-parallel group of ranks 0-1 spans hosts node1 and node2" tp2_spread.log)" = 1 ]; then
  echo "ok: tp2_spread warned once that a tensor-parallel group spans hosts"
else echo "FAIL: tp2_spread: no single warning of the tensor-parallel group across hosts"; grep -i warn tp2_spread.log; fail=1; fi
exit $fail
