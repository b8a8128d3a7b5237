#!/usr/bin/env bash
# trident plan through the binary: a search prints the fastest layouts and the train flags of the
# best; given layout flags it evaluates that layout (--json: one object with the fields
# docs/plan.md names); a cluster file starts from a preset; --calibrate's figures lie within this
# machine's physical bounds; bad flags exit 2 with one line.
set -u
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
cd "$WORK" 2>/dev/null || { mkdir -p "$WORK" && cd "$WORK"; }
M=(--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 --max-position-embeddings 2048
   --vocab-size 51200 --global-batch-size 1536 --fp16)
if out=$("$TRIDENT" plan "${M[@]}" --num-gpus 1024 --top 3) && grep -q "^train with: --tensor-model-parallel-size" <<<"$out" &&
   [ "$(grep -c '^ \+[0-9]' <<<"$out")" = 3 ]; then ok "search: $(tail -n 1 <<<"$out")"
else bad "search"; echo "$out"; fi
if out=$("$TRIDENT" plan "${M[@]}" --num-gpus 1024 --tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 \
     --recompute-granularity full --json) && [ "$(wc -l <<<"$out")" = 1 ] &&
   for k in tflops_per_gpu iteration_s mfu memory_gib_per_gpu breakdown_s; do grep -q "\"$k\": " <<<"$out" || exit 1; done &&
   grep -q '"data_parallel_size": 16' <<<"$out"; then ok "one layout, --json: ${out:0:160}..."
else bad "one layout --json"; echo "$out"; fi
printf '{"name": "half-h100", "base": "dgx-h100", "gpus_per_node": 4, "memory_gib": 40}\n' >cluster.json
if out=$("$TRIDENT" plan "${M[@]}" --num-gpus 512 --cluster cluster.json --top 1) && grep -q "of half-h100 (4 a node" <<<"$out" &&
   ! grep -q "^ *8 " <<<"$out"; then ok "cluster file from a preset: $(head -n 1 <<<"$out" | cut -c1-160)"
else bad "cluster file"; echo "$out"; fi
# this machine, calibrated as 4 ranks on 2 hosts (--fake-hosts 2): nodes, ranks a node and both
# links written (the real network: cluster/plan_calibrate); then a layout evaluated on it
if timeout $((120 * ${TD_TIME_SCALE:-1})) mpirun --oversubscribe --bind-to none -np 4 "$TRIDENT" plan --calibrate --fake-hosts 2 --calibrate-seconds 0.05 >me.json 2>cal.log &&
   grep -q '"framework":.*"trident-cpu"' me.json &&
   python3 -c 'import json, sys; c = json.load(open("me.json")); sys.exit(not (c["nodes"] == 2 and c["gpus_per_node"] == 2 and c["inter_node_bandwidth"] > 0 and c["intra_node_bandwidth"] > 0 and c["name"].startswith("2 nodes x 2 ranks")))' &&
   out=$("$TRIDENT" plan --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --vocab-size 50257 \
         --global-batch-size 8 --cluster me.json --num-gpus 2 --tensor-model-parallel-size 2 --json) &&
   grep -q '"fits": true' <<<"$out"; then ok "--calibrate on 2 hosts of 2 ranks: $(tr -d '\n\t' <me.json | cut -c1-200)..."
else bad "--calibrate on 2 hosts"; cat cal.log me.json; echo "${out:-}"; fi
# the calibrated figures against physical bounds of this machine (they fail when a unit or a
# count is wrong): fmax = cpufreq's cpuinfo_max_freq, else twice the highest "cpu MHz" of
# /proc/cpuinfo (server parts boost less than 2x their nominal clock); a core does at most
# 2 FMA pipes x vector lanes x 2 FLOPs a cycle (64 with AVX-512, 32 with AVX2/FMA, else 16) and
# moves at most 192 bytes a cycle (two 64-byte loads and one store); each rank runs one thread
calibrated_sane() {
  python3 - me.json 2 <<'PY'
import json, re, sys
c = json.load(open(sys.argv[1])); ranks = int(sys.argv[2])
info = open("/proc/cpuinfo").read()
try:
    fmax = int(open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read()) * 1e3
except OSError:
    fmax = 2 * max(float(x) for x in re.findall(r"^cpu MHz\s*:\s*([\d.]+)", info, re.M)) * 1e6
flags = set(re.search(r"^flags\s*:(.*)$", info, re.M).group(1).split())
per_cycle = 64 if "avx512f" in flags else 32 if "fma" in flags else 16
mem = int(re.search(r"^MemTotal:\s*(\d+) kB", open("/proc/meminfo").read(), re.M).group(1)) * 1024 / 2**30
peak_bound, copy_bound = per_cycle * fmax, 192 * fmax * ranks
checks = [
    (0 < c["peak_fp32_flops"] <= peak_bound, "sgemm peak %.3g FLOP/s in (0, %.3g] (%d FLOPs a cycle at %.3g GHz)"
     % (c["peak_fp32_flops"], peak_bound, per_cycle, fmax / 1e9)),
    (0 < c["memory_bandwidth"] <= copy_bound, "copy bandwidth %.3g B/s in (0, %.3g] (192 B a cycle, %d cores)"
     % (c["memory_bandwidth"], copy_bound, ranks)),
    (0 < c["intra_node_bandwidth"] <= c["memory_bandwidth"], "all-reduce bandwidth %.3g B/s in (0, the copy's %.3g]"
     % (c["intra_node_bandwidth"], c["memory_bandwidth"])),
    (0 < c["intra_node_latency"] < 1, "all-reduce latency %.3g s in (0, 1)" % c["intra_node_latency"]),
    (0 < c["memory_gib"] <= mem, "memory %.3g GiB in (0, MemTotal %.3g]" % (c["memory_gib"], mem)),
    (0 < c["reserved_gib"] < c["memory_gib"], "held before a model %.3g GiB in (0, memory)" % c["reserved_gib"]),
    (0 < c["gemm_max_efficiency"] <= 1 and c["gemm_half_dim"] >= 0, "GEMM efficiency %.3g in (0, 1], half dimension "
     "%.3g >= 0" % (c["gemm_max_efficiency"], c["gemm_half_dim"])),
    (c["gpus_per_node"] == ranks, "%s devices, the %d ranks" % (c["gpus_per_node"], ranks)),
]
for good, what in checks:
    print(("" if good else "WRONG: ") + what)
sys.exit(0 if all(g for g, _ in checks) else 1)
PY
}
if [ -s me.json ] && sane=$(calibrated_sane); then ok "calibrated figures within physical bounds: $(tr '\n' ';' <<<"$sane")"
else bad "calibrated figures"; echo "${sane:-}"; cat me.json; fi
# trident's own runs across nodes on a written cluster (2 nodes of 2 ranks; a quota's half core a
# node loads): scatter/gather on by default with tp 2 x pp 2 (each tp rank sends half), off by
# the flag; dp 4 over both nodes hierarchical when asked, flat when asked; the exposed
# communication per group in --json under the metrics file's names
printf '{"name": "two", "framework": "trident-cpu", "gpus_per_node": 2, "nodes": 2, "cores_per_node": 0.5, "peak_fp32_flops": 2.4e10, "memory_gib": 11.7, "memory_bandwidth": 6.6e9, "intra_node_bandwidth": 1e9, "intra_node_latency": 5e-5, "inter_node_bandwidth": 6e7, "inter_node_latency": 2e-4, "gemm_max_efficiency": 0.9, "gemm_half_dim": 8, "reserved_gib": 0.02}\n' >two_nodes_cpu.json
S=(--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 128 --max-position-embeddings 128
   --global-batch-size 8 --micro-batch-size 2 --vocab-size 50257 --cluster two_nodes_cpu.json --num-gpus 4)
field() { python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); print(r[sys.argv[1]])' "$1"; }
if on=$("$TRIDENT" plan "${S[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --json) &&
   off=$("$TRIDENT" plan "${S[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --json \
         --no-scatter-gather-tensors-in-pipeline) &&
   [ "$(field scatter_gather <<<"$on")" = True ] && [ "$(field scatter_gather <<<"$off")" = False ] &&
   python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(not (a > 1.5 * b))' \
     "$(field pp_exposed_ms <<<"$off")" "$(field pp_exposed_ms <<<"$on")" &&
   for k in tp_exposed_ms pp_exposed_ms embd_exposed_ms dp_exposed_ms; do grep -q "\"$k\": " <<<"$on" || exit 1; done
then ok "scatter/gather: pp exposed $(field pp_exposed_ms <<<"$on") ms on, $(field pp_exposed_ms <<<"$off") ms off"
else bad "scatter/gather"; echo "${on:-} ${off:-}"; fi
# the same cluster calibrated on the cuda backend ("trident-cuda": trident's own memory and
# communication on GPUs) plans exactly as the cpu's file; a wrong framework is refused by name
sed 's/"trident-cpu"/"trident-cuda"/' two_nodes_cpu.json >two_nodes_cuda.json
if a=$("$TRIDENT" plan "${S[@]}" --tensor-model-parallel-size 2 --json) &&
   b=$("$TRIDENT" plan "${S[@]/two_nodes_cpu.json/two_nodes_cuda.json}" --tensor-model-parallel-size 2 --json) &&
   [ "$a" = "$b" ] && grep -q '"step_s"\|"iteration_s"\|"time' <<<"$a"
then ok "a trident-cuda cluster file plans as the trident-cpu one"
else bad "trident-cuda cluster file"; echo "${a:-}"; echo "${b:-}"; fi
sed 's/"trident-cpu"/"trident-gpu"/' two_nodes_cpu.json >two_nodes_bad.json
if out=$("$TRIDENT" plan "${S[@]/two_nodes_cpu.json/two_nodes_bad.json}" 2>&1); rc=$?; [ $rc -eq 2 ] &&
   grep -q 'framework must be "megatron", "trident-cpu" or "trident-cuda"' <<<"$out"
then ok "framework trident-gpu refused (exit 2)"
else bad "a wrong framework: exit $rc: $out"; fi
if h=$("$TRIDENT" plan "${S[@]}" --tensor-model-parallel-size 1 --dp-collectives hierarchical --json) &&
   f=$("$TRIDENT" plan "${S[@]}" --tensor-model-parallel-size 1 --dp-collectives flat --json) &&
   [ "$(field dp_collectives <<<"$h")" = hierarchical ] && [ "$(field dp_collectives <<<"$f")" = flat ] &&
   o=$("$TRIDENT" plan "${S[@]}" --tensor-model-parallel-size 1 --use-distributed-optimizer --overlap-grad-reduce \
       --overlap-param-gather --ddp-bucket-size 1000000 --explain) && grep -q "exposed communication (ms): tp" <<<"$o"
then ok "dp collectives: hierarchical $(field dp_exposed_ms <<<"$h") ms, flat $(field dp_exposed_ms <<<"$f") ms"
else bad "dp collectives"; echo "${h:-} ${f:-} ${o:-}"; fi
# a node under a CPU quota (as bench/cluster_scaling.sh makes them): --calibrate writes the cores
# its ranks may use, half a core here (cgroup v1 cpu.cfs_quota_us, or v2 cpu.max; root only; periods of 10 ms,
# so that --calibrate-seconds 0.1 spans ten)
cg=""
if [ "$(id -u)" -eq 0 ] && [ -w /sys/fs/cgroup/cpu ] && mkdir "/sys/fs/cgroup/cpu/trident-plan-test.$$" 2>/dev/null; then
  cg=/sys/fs/cgroup/cpu/trident-plan-test.$$; echo 10000 >"$cg/cpu.cfs_period_us"; echo 5000 >"$cg/cpu.cfs_quota_us"
elif [ "$(id -u)" -eq 0 ] && [ -f /sys/fs/cgroup/cgroup.controllers ] && mkdir "/sys/fs/cgroup/trident-plan-test.$$" 2>/dev/null; then
  cg=/sys/fs/cgroup/trident-plan-test.$$; echo "5000 10000" >"$cg/cpu.max"
fi
if [ -z "$cg" ]; then echo "not checked: --calibrate under a CPU quota (needs root and a writable cgroup cpu controller)"
elif timeout $((120 * ${TD_TIME_SCALE:-1})) sh -c 'echo $$ >"$1/cgroup.procs" && exec "$2" plan --calibrate --calibrate-seconds 0.1' sh "$cg" "$TRIDENT" >quota.json 2>quota.log &&
     python3 -c 'import json, sys; c = json.load(open("quota.json")); sys.exit(c["cores_per_node"] != 0.5)'
then ok "--calibrate under a half-core quota: cores_per_node 0.5"
else bad "--calibrate under a quota"; cat quota.log quota.json; fi
[ -n "$cg" ] && rmdir "$cg"
expect2() { # want flags...
  local want=$1; shift
  out=$("$TRIDENT" plan "$@" 2>&1); rc=$?
  if [ $rc = 2 ] && [ "$(grep -c "^error: " <<<"$out")" = 1 ] && grep -q -- "$want" <<<"$out"; then ok "exit 2: $(grep error <<<"$out")"
  else bad "want exit 2 with '$want', got $rc: $out"; fi
}
expect2 "--num-gpus is required" "${M[@]}"
expect2 "--vocab-size is required" --num-gpus 8 --global-batch-size 8
expect2 "not divisible by --tensor-model-parallel-size" "${M[@]}" --num-gpus 100 --tensor-model-parallel-size 8
printf '{"gpus_per_node": "eight"}\n' >bad.json
expect2 "gpus_per_node must be a number" "${M[@]}" --num-gpus 8 --cluster bad.json
printf '{"base": "dgx-h100", "nodes": 2.5}\n' >half_node.json
expect2 "nodes must be a number in \[0, 1048576\], a whole one" "${M[@]}" --num-gpus 8 --cluster half_node.json
printf '{"base": "dgx-h100", "nodes": 2}\n' >two_nodes.json
expect2 "the layout needs 32 devices; cluster two_nodes.json has 16 (2 nodes of 8)" "${M[@]}" --num-gpus 32 \
  --tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 --cluster two_nodes.json
expect2 "cannot open it" "${M[@]}" --num-gpus 8 --cluster nosuch
# a mixture of experts: the layout given with expert parallelism 4 prices its token exchange (the
# metrics file's key); the search offers ep layouts and says how to train them; ep not dividing dp
MOE=(--num-layers 8 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024
     --vocab-size 50257 --global-batch-size 64 --cluster dgx-a100-80gb --bf16 --num-experts 8 --moe-router-topk 2
     --swiglu --moe-layer-freq 2)
if js=$("$TRIDENT" plan "${MOE[@]}" --num-gpus 16 --expert-model-parallel-size 4 --json) &&
   python3 -c 'import json,sys; v=json.loads(sys.argv[1]); assert v["expert_model_parallel_size"] == 4 and v["ep_exposed_ms"] > 0, v' "$js"; then
  ok "moe: ep 4 priced, its token exchange $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["ep_exposed_ms"])' "$js") ms exposed"
else bad "moe: ep 4: $js"; fi
if out=$("$TRIDENT" plan "${MOE[@]}" --num-gpus 16 --top 200) && grep -q "  ep [248]" <<<"$out"; then
  ok "moe: the search offers ep layouts ($(grep -c '  ep [248]' <<<"$out") of the top 200)"
else bad "moe: no ep layout in the search"; fi
expect2 "--expert-model-parallel-size 3 must divide --num-experts 8 and the data-parallel x context-parallel size 16" \
  "${MOE[@]}" --num-gpus 16 --expert-model-parallel-size 3
expect2 "no bf16 peak" --num-layers 4 --vocab-size 100 --global-batch-size 16 --num-gpus 16 --cluster dgx2h-v100 --bf16
expect2 "--dp-collectives 'ring' is not one of auto|flat|hierarchical" "${S[@]}" --dp-collectives ring
expect2 "--ddp-bucket-size 0 is out of range" "${S[@]}" --ddp-bucket-size 0
expect2 "--overlap-param-gather needs --use-distributed-optimizer" "${S[@]}" --tensor-model-parallel-size 1 \
  --overlap-param-gather
printf '{"base": "dgx-h100", "cores_per_node": -1}\n' >neg_cores.json
expect2 "cores_per_node must be a number in \[0, 1048576\]" "${M[@]}" --num-gpus 8 --cluster neg_cores.json

# a cluster file's misspelt key is refused, naming it and the known ones (it was silently ignored)
printf '{"base": "dgx-h100", "memroy_gib": 40}\n' >misspelt.json
expect2 'unknown key "memroy_gib" (known: name, base, framework, gpus_per_node, nodes, .*memory_gib.*reserved_gib)'   "${M[@]}" --num-gpus 8 --cluster misspelt.json
# why no layout: a cluster reserving all its memory, fewer devices than asked, a batch no layout
# divides (exit 2: the input), and memory (exit 1, with the least a layout needs)
printf '{"base": "dgx-h100", "reserved_gib": 90}\n' >reserved.json
expect2 "reserved_gib 90 leaves nothing of memory_gib 80 for a model" "${M[@]}" --num-gpus 8 --cluster reserved.json
expect2 "--num-gpus 32 is more than cluster two_nodes.json has: 16 (2 nodes of 8)" "${M[@]}" --num-gpus 32   --cluster two_nodes.json
G=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --vocab-size 50257 --bf16 --cluster dgx-h100)
# (seq 1022: no context-parallel size > 1 dividing 64 cuts it into 2 cp equal chunks, so dp >= 2)
expect2 "no layout of 64 devices divides --global-batch-size 99: .* give a batch divisible by 2" "${G[@]/1024/1022}" --global-batch-size 99 --num-gpus 64
# context parallelism: seq 1024 cut 2 cp ways, so the batch of 99 goes to dp 1 by cp
if out=$("$TRIDENT" plan "${G[@]}" --global-batch-size 99 --num-gpus 64 --top 1) &&
   grep -q "^train with: .*--context-parallel-size [0-9]* --cp-comm-type p2p" <<<"$out"; then ok "search over cp: $(tail -n 1 <<<"$out")"
else bad "search over cp: $out"; fi
expect2 "--seq-length 1024 is not divisible by 2 x --context-parallel-size 3" "${G[@]}" --global-batch-size 8 --num-gpus 6 --context-parallel-size 3
expect2 "--cp-comm-type a2a splits each tensor-parallel rank's 12 attention heads and 12 key/value groups over --context-parallel-size 8" \
        "${G[@]}" --global-batch-size 8 --num-gpus 8 --context-parallel-size 8 --cp-comm-type a2a
expect2 "--cp-comm-type 'ring' is not one of a2a|all_gather|p2p" "${G[@]}" --global-batch-size 8 --num-gpus 8 --cp-comm-type ring
out=$("$TRIDENT" plan "${M[@]}" --global-batch-size 64 --num-gpus 8 --cluster dgx-h100 2>&1); rc=$?
if [ $rc = 1 ] && [ "$(grep -c "^error: " <<<"$out")" = 1 ] &&
   grep -q "no layout of 8 devices fits 80 GiB a device (the least needs [0-9.]* GiB)" <<<"$out"; then
  ok "exit 1: $(grep error <<<"$out")"
else bad "no layout fits: want exit 1, got $rc: $out"; fi
# a cluster file with nodes: --num-gpus defaults to all its devices (2 nodes of 8)
if out=$("$TRIDENT" plan "${G[@]/dgx-h100/two_nodes.json}" --global-batch-size 64 --top 1) &&
   grep -q " on 16 devices of two_nodes.json" <<<"$out"; then ok "--num-gpus from the cluster's nodes: $(head -n 1 <<<"$out" | cut -c1-140)"
else bad "--num-gpus from nodes: $out"; fi
# a mixture of experts evaluated: the header names the experts and ep, the time breakdown the ep
# exchange, and its shares add up to the iteration (--json: the parts sum to iteration_s)
if out=$("$TRIDENT" plan "${MOE[@]}" --num-gpus 16 --expert-model-parallel-size 4 --explain) &&
   grep -q "8 experts top-2 (ep 4)" <<<"$out" && grep -q "expert-parallel exchange [0-9.]* ([0-9]*%)" <<<"$out" &&
   python3 -c 'import re, sys; s = sum(int(x) for x in re.findall(r"\((\d+)%", sys.argv[1].split("time:")[1].split("\n")[0])); sys.exit(not 97 <= s <= 103)' "$out" &&
   js=$("$TRIDENT" plan "${MOE[@]}" --num-gpus 16 --expert-model-parallel-size 4 --json) &&
   python3 -c 'import json, sys; v = json.loads(sys.argv[1]); b = v["breakdown_s"]; t = sum(x for k, x in b.items() if k != "recompute"); sys.exit(not (b["expert_parallel"] > 0 and abs(t - v["iteration_s"]) <= 1e-5 * v["iteration_s"]))' "$js"
then ok "moe: header, ep exchange's share: $(grep -o 'time:.*' <<<"$out" | cut -c1-200)..."
else bad "moe: header / time shares: $out ${js:-}"; fi
# a context-parallel layout evaluated: the row names cp and its comm type, the time line the
# exchange (its share among parts adding up to the iteration), the exposed line its cp figure;
# --json: cp_exposed_ms, cp_inflight_ms, and breakdown_s's parts (context_parallel among them) sum to iteration_s
for T in p2p all_gather a2a; do
if out=$("$TRIDENT" plan "${G[@]}" --global-batch-size 8 --num-gpus 8 --context-parallel-size 4 --cp-comm-type $T --explain) &&
   grep -q "cp 4 $T\$" <<<"$out" && grep -q "context-parallel exchange [0-9.]* ([0-9]*%; $T, [0-9.]* in flight, [0-9]*% hidden)" <<<"$out" &&
   grep -q "exposed communication (ms): .*, cp [0-9.]* (flat over dp x cp)" <<<"$out" &&
   python3 -c 'import re, sys; s = sum(int(x) for x in re.findall(r"\((\d+)%", sys.argv[1].split("time:")[1].split("\n")[0])); sys.exit(not 97 <= s <= 103)' "$out" &&
   js=$("$TRIDENT" plan "${G[@]}" --global-batch-size 8 --num-gpus 8 --context-parallel-size 4 --cp-comm-type $T --json) &&
   python3 -c 'import json, sys; v = json.loads(sys.argv[1]); b = v["breakdown_s"]; t = sum(x for k, x in b.items() if k != "recompute"); sys.exit(not (v["context_parallel_size"] == 4 and v["cp_comm_type"] == sys.argv[2] and b["context_parallel"] > 0 and abs(b["context_parallel"] * 1e3 - v["cp_exposed_ms"]) <= 1e-5 * v["cp_exposed_ms"] and v["cp_inflight_ms"] >= v["cp_exposed_ms"] and v["data_parallel_size"] == 2 and abs(t - v["iteration_s"]) <= 1e-5 * v["iteration_s"]))' "$js" $T
then ok "cp 4 $T: $(grep -o 'context-parallel exchange.*' <<<"$out")"
else bad "cp 4 $T: $out ${js:-}"; fi
done
# a mixture of experts with context parallelism, ep carved out of dp x cp as the trainer's: a fixed
# layout's row, --explain (both exchanges among shares adding up to the iteration, the experts'
# gradients over dp x cp / ep) and --json (expert_data_parallel_size, the parts summing to iteration_s)
if out=$("$TRIDENT" plan "${MOE[@]}" --num-gpus 16 --context-parallel-size 2 --expert-model-parallel-size 4 --explain) &&
   grep -q "^ *1 *1 *8 .*  ep 4  cp 2 p2p\$" <<<"$out" && grep -q "8 experts top-2 (ep 4)" <<<"$out" &&
   grep -q "expert-parallel exchange [0-9.]* ([0-9]*%), context-parallel exchange [0-9.]* ([0-9]*%; p2p" <<<"$out" &&
   grep -q "exposed communication (ms): .*, cp [0-9.]* (flat over dp x cp; the experts' over 4 (dp x cp / ep))" <<<"$out" &&
   python3 -c 'import re, sys; s = sum(int(x) for x in re.findall(r"\((\d+)%", sys.argv[1].split("time:")[1].split("\n")[0])); sys.exit(not 97 <= s <= 103)' "$out" &&
   js=$("$TRIDENT" plan "${MOE[@]}" --num-gpus 16 --context-parallel-size 2 --expert-model-parallel-size 4 --json) &&
   python3 -c 'import json, sys; v = json.loads(sys.argv[1]); b = v["breakdown_s"]; t = sum(x for k, x in b.items() if k != "recompute"); sys.exit(not (v["context_parallel_size"] == 2 and v["expert_model_parallel_size"] == 4 and v["expert_data_parallel_size"] == 4 and v["data_parallel_size"] == 8 and v["ep_exposed_ms"] > 0 and v["cp_exposed_ms"] > 0 and abs(t - v["iteration_s"]) <= 1e-5 * v["iteration_s"]))' "$js"
then ok "moe at cp 2 x ep 4: $(grep -o 'expert-parallel exchange.*' <<<"$out")"
else bad "moe at cp 2 x ep 4: $out ${js:-}"; fi
# ... ep 8 over dp 1 x cp 16 (ep needs only divide dp x cp)
if js=$("$TRIDENT" plan "${MOE[@]}" --num-gpus 16 --context-parallel-size 16 --expert-model-parallel-size 8 --json) &&
   python3 -c 'import json, sys; v = json.loads(sys.argv[1]); sys.exit(not (v["data_parallel_size"] == 1 and v["expert_data_parallel_size"] == 2))' "$js"
then ok "moe: ep 8 of dp 1 x cp 16"; else bad "moe: ep 8 of dp 1 x cp 16: ${js:-}"; fi
# ... with an expert capacity (the trainer decides the drops over the micro-batch): its two
# all-gathers of the choices over cp add to the cp exchange
if a=$("$TRIDENT" plan "${MOE[@]}" --num-gpus 16 --context-parallel-size 2 --json) &&
   b=$("$TRIDENT" plan "${MOE[@]}" --num-gpus 16 --context-parallel-size 2 --moe-expert-capacity-factor 1.5 --json) &&
   python3 -c 'import json, sys; a, b = (json.loads(x) for x in sys.argv[1:]); sys.exit(not (b["cp_exposed_ms"] > a["cp_exposed_ms"] > 0))' "$a" "$b"
then ok "moe at cp 2 with a capacity: its gathers priced"; else bad "moe at cp 2 with a capacity: ${a:-} ${b:-}"; fi
# a sequence of 64 Ki on 8 devices of 4 GiB: no layout without cp fits it (every layout listed
# has cp), the search takes cp with the experts carved out of dp x cp and says how to train it
printf '{"name": "h100-4gib", "base": "dgx-h100", "memory_gib": 4, "reserved_gib": 0}\n' >small.json
LONG=(--num-layers 2 --hidden-size 2048 --num-attention-heads 2 --seq-length 65536 --max-position-embeddings 65536
      --vocab-size 1000 --global-batch-size 8 --bf16 --num-experts 4 --moe-router-topk 2
      --moe-token-dispatcher-type alltoall --cluster small.json --num-gpus 8)
if out=$("$TRIDENT" plan "${LONG[@]}" --top 1000) &&
   grep -q "^train with: .*--context-parallel-size [248] --cp-comm-type p2p --expert-model-parallel-size [248] --moe-token-dispatcher-type alltoall\$" <<<"$out" &&
   grep -q "  ep [248]  cp [248] p2p\$" <<<"$out" && rows=$(grep -c '^ \+[0-9]' <<<"$out") && [ "$rows" -gt 0 ] &&
   [ "$(grep -c '  cp [248] p2p$' <<<"$out")" = "$rows" ]; then ok "moe: the search takes cp ($rows layouts fit, all with cp): $(tail -n 1 <<<"$out")"
else bad "moe: the search at seq 65536: $out"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
