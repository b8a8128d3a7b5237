#!/usr/bin/env bash
# `trident plan --calibrate` across 2 emulated nodes of 2 ranks (scripts/cluster.sh, each node's
# link shaped to 1 Gbit/s by tc): the cluster file names 2 nodes of 2 ranks, the node's link
# (a rank's share x its ranks) between 0.3 and 1.25 Gbit/s (tbf lets a 256 KB burst pass at the
# veth's speed, a sixteenth of the largest all-reduce's 4 MiB; 1.16 was measured once, an idle
# machine fitting its four sizes), the link inside a node faster than the
# one across, and `trident plan` with that file prices tp 2 x dp 2's data-parallel pairs across
# the nodes. Environment (tests/cluster/cluster.cmake): TRIDENT, WORK, ROOT.
set -u
. "$(dirname "$0")/two_nodes.sh"
two_nodes plan
calibrate() {
  timeout $((180 * ${TD_TIME_SCALE:-1})) "$cluster" run node1 mpirun --hostfile "$CLUSTER_DIR/hostfile" --mca plm_rsh_agent "$CLUSTER_DIR/rsh" \
    --mca btl tcp,self,vader --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 -x OMP_NUM_THREADS \
    -np 4 "$TRIDENT" plan --calibrate --calibrate-seconds 0.05 > me.json 2> cal.log || { echo "FAIL: --calibrate exited $?"; cat cal.log; exit 1; }
}
calibrate
# Both emulated nodes share this machine's cores with each other and with the suite's other tests:
# under that load (CI: 4 ranks beside two multi-rank tests on 2 cores) shared memory inside a node
# has once measured 7.9e7 B/s, under the shaped link's share. A second calibration decides; the
# ordering must hold in one of the two, every other check in the one kept.
for try in 1 2; do
python3 - me.json $try <<'PY' && break
import json, sys
c = json.load(open(sys.argv[1]))
link = c["inter_node_bandwidth"] * c["gpus_per_node"] * 8  # bits/s through one node's link
checks = [
    (c["nodes"] == 2 and c["gpus_per_node"] == 2, "2 nodes of 2 ranks: nodes %s, gpus_per_node %s" % (c["nodes"], c["gpus_per_node"])),
    (0.3e9 <= link <= 1.25e9, "the node's link %.3g bit/s (a rank's share %.3g B/s x 2) in [0.3, 1.25] Gbit/s, shaped to 1" % (link, c["inter_node_bandwidth"])),
    (c["intra_node_bandwidth"] > c["inter_node_bandwidth"] * c["gpus_per_node"], "inside a node %.3g B/s > across %.3g B/s a node" % (c["intra_node_bandwidth"], c["inter_node_bandwidth"] * c["gpus_per_node"])),
    (0 < c["inter_node_latency"] < 0.1 and 0 < c["intra_node_latency"] < 0.1, "latencies %.3g s inside, %.3g s across, in (0, 0.1)" % (c["intra_node_latency"], c["inter_node_latency"])),
]
bad = [m for ok, m in checks if not ok]
for ok, m in checks: print(("ok: " if ok else "FAIL: ") + m)
if bad and sys.argv[2] == "1" and all("inside a node" in m for m in bad):
    print("again: the ordering inside/across failed on a loaded host; calibrating once more")
    sys.exit(3)
sys.exit(1 if bad else 0)
PY
rc=$?
[ $rc -eq 3 ] && { calibrate; continue; }
cat me.json; exit 1
done
# the file prices tp 2 inside and dp 2 across: the dp pairs' sum at the share across, not the link inside
M=(--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 128 --vocab-size 50257 --global-batch-size 8
   --cluster me.json --num-gpus 4 --tensor-model-parallel-size 2 --json)
out=$("$TRIDENT" plan "${M[@]}") || { echo "FAIL: plan with the calibrated file"; echo "$out"; exit 1; }
python3 - me.json "$out" <<'PY'
import json, sys
c, r = json.load(open(sys.argv[1])), json.loads(sys.argv[2])
# the stage's gradients: 4 layers of 256 (12 h^2 + 13 h a layer, / 2 but the replicated biases and
# norms: 5 h), half the padded vocab (50304 / 2) x 256, 128 positions x 256, the final norm
h = 256
layer = 12 * h * h // 2 + (3 * h + 4 * h) // 2 + 6 * h  # weights / 2, QKV and fc1 biases / 2, the rest whole
P = 4 * layer + 50304 // 2 * h + 128 * h + 2 * h
want = P * 4 / c["inter_node_bandwidth"] + 2 * c["inter_node_latency"]
got = r["breakdown_s"]["data_parallel"]
ok = abs(got - want) <= 1e-6 * want
print(("ok: " if ok else "FAIL: ") + "dp 2 across prices %d parameters at the share across: %.6g s (by hand %.6g)" % (P, got, want))
sys.exit(0 if ok else 1)
PY
[ $? -eq 0 ] || exit 1
# dp 4 = 2 nodes x 2 ranks, flat, hierarchical and auto; tp 2 x pp 2 with and without scatter/gather
M=(--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 128 --vocab-size 50257 --global-batch-size 8
   --cluster me.json --num-gpus 4 --json)
for v in flat hierarchical auto; do
  "$TRIDENT" plan "${M[@]}" --tensor-model-parallel-size 1 --dp-collectives $v >dp4_$v.json || { echo "FAIL: plan dp 4 $v"; exit 1; }
done
"$TRIDENT" plan "${M[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 >sg_on.json &&
"$TRIDENT" plan "${M[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  --no-scatter-gather-tensors-in-pipeline >sg_off.json || { echo "FAIL: plan tp 2 x pp 2"; exit 1; }
python3 - me.json <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
r = {k: json.load(open(k + ".json")) for k in ("dp4_flat", "dp4_hierarchical", "dp4_auto", "sg_on", "sg_off")}
h, share, ilat = 256, c["inter_node_bandwidth"], c["inter_node_latency"]
intra, lat = c["intra_node_bandwidth"], c["intra_node_latency"]
S = 4 * (4 * (12 * h * h + 13 * h) + 50304 * h + 128 * h + 2 * h)  # the whole model's fp32 gradients
flat = 2 * 3 / 4 * S / min(2 * share, intra) + 6 * ilat       # one ring crossing each node's link once
hier = (S / 2 / intra + lat) + (2 * 1 / 2 * (S / 2) / min(share, intra) + 2 * ilat) + (S / 2 / intra + lat)
act = 128 * h * 4                                              # a micro-batch's boundary activation, fp32
on, off = 2 * 8 * (act / 2 / share + ilat), 2 * 8 * (act / share + ilat)  # 8 micro-batches, both ways
checks = [
    (r["dp4_flat"]["dp_exposed_ms"], flat * 1e3, "dp 4 flat"),
    (r["dp4_hierarchical"]["dp_exposed_ms"], hier * 1e3, "dp 4 hierarchical"),
    (r["dp4_auto"]["dp_exposed_ms"], min(flat, hier) * 1e3, "dp 4 auto (the cheaper)"),
    (r["sg_on"]["pp_exposed_ms"], on * 1e3, "tp 2 x pp 2 transfers, scatter/gather"),
    (r["sg_off"]["pp_exposed_ms"], off * 1e3, "tp 2 x pp 2 transfers, whole from each tp rank"),
]
bad = 0
for got, want, what in checks:
    ok = abs(got - want) <= 1e-5 * want
    bad += not ok
    print(("ok: " if ok else "FAIL: ") + "%s: %.6g ms (by hand %.6g)" % (what, got, want))
sys.exit(1 if bad else 0)
PY
