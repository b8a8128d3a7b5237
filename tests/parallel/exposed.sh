#!/usr/bin/env bash
# The communication each group left exposed, per iteration in --metrics-file (<group>_exposed_ms,
# <group>_inflight_ms) and in the log's time breakdown, held against what must hold whatever the
# timings: one rank communicates nothing (every field exactly 0); a group with only blocking calls
# (tp 2's all-reduces) hides nothing (exposed = in flight); exposed <= in flight in every group;
# the groups' exposed times add up to comm_ms; dp 2 with --overlap-grad-reduce has dp time in flight,
# and dp 2 without it, where every bucket's wait follows its start with no kernel between,
# hides less than half of it (a sanity bound, not a speed check); dp 4 on 2 test hosts with
# hierarchical collectives counts their time as dp (it was left out of every group). Under mpirun (a hang guard of
# 120 s a run). Usage: exposed.sh TRIDENT DATA_PREFIX VOCAB MERGES WORK
set -u
trident=$1 data=$2 vocab=$3 merges=$4 work=$5
mpirun=(timeout $((120 * ${TD_TIME_SCALE:-1})) mpirun --oversubscribe --bind-to none)
base=(--data-path "$data" --vocab-file "$vocab" --merge-file "$merges" --split 90,10,0 --num-layers 2
      --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 1
      --global-batch-size 4 --train-iters 3 --eval-iters 0 --log-interval 100 --peak-tflops 1
      --make-vocab-size-divisible-by 256 --ddp-bucket-size 20000)
rm -rf "$work" && mkdir -p "$work" || exit 1
fail=0
run() { # name np flags...
  local name=$1 np=$2; shift 2
  if ! "${mpirun[@]}" -np "$np" "$trident" train "${base[@]}" "$@" --metrics-file "$work/$name.jsonl" > "$work/$name.log" 2>&1; then
    echo "FAIL: $name exited non-zero"; tail -20 "$work/$name.log"; fail=1; return 1
  fi
}
# check name awk-condition message: the condition must hold on every line of name.jsonl (fields by name: v["key"])
check() {
  local name=$1 cond=$2 msg=$3
  if awk '
    { delete v; s = $0; gsub(/[{}"]/, "", s); n = split(s, kv, ", ")
      for (i = 1; i <= n; i++) { split(kv[i], p, ": "); v[p[1]] = p[2] + 0 }
      if (!('"$cond"')) { print "  iteration " v["iteration"] ": " $0; bad = 1 } }
    END { exit bad }' "$work/$name.jsonl"; then echo "ok: $name: $msg"
  else echo "FAIL: $name: $msg"; fail=1; fi
}
groups="tp pp dp ep embd other"
every() { # an awk condition over every group, with G standing for the group's name
  local c="" g; for g in $groups; do c="$c${c:+ && }(${1//G/$g})"; done; echo "$c"
}
sum='v["tp_exposed_ms"] + v["pp_exposed_ms"] + v["dp_exposed_ms"] + v["ep_exposed_ms"] + v["embd_exposed_ms"] + v["other_exposed_ms"]'
adds_up="$sum <= v[\"comm_ms\"] * (1 + 1e-4) + 1e-5 && $sum >= v[\"comm_ms\"] * (1 - 1e-4) - 1e-5"
lines() { [ "$(wc -l < "$work/$1.jsonl")" = 3 ] || { echo "FAIL: $1: not 3 metrics lines"; fail=1; }; }

if run one 1; then
  lines one
  check one "$(every 'v["G_exposed_ms"] == 0 && v["G_inflight_ms"] == 0') && v[\"comm_ms\"] == 0" \
    "one rank: no group has communication exposed or in flight"
fi
if run tp2 2 --tensor-model-parallel-size 2; then
  check tp2 'v["tp_inflight_ms"] > 0 && v["tp_exposed_ms"] >= v["tp_inflight_ms"] * (1 - 1e-5) - 1e-6 && v["tp_exposed_ms"] <= v["tp_inflight_ms"] * (1 + 1e-5) + 1e-6 && v["dp_inflight_ms"] == 0' \
    "tp 2: blocking all-reduces only, so exposed = in flight (nothing hidden), no dp"
fi
for name in dp2_overlap dp2; do
  flags=(--overlap-grad-reduce); [ $name = dp2 ] && flags=()
  run $name 2 "${flags[@]}" || continue
  lines $name
  check $name "$(every 'v["G_exposed_ms"] <= v["G_inflight_ms"] * (1 + 1e-5) + 1e-6') && v[\"dp_inflight_ms\"] > 0 && v[\"tp_inflight_ms\"] == 0" \
    "exposed <= in flight in every group; dp in flight > 0; no tp"
  check $name "$adds_up" \
    "the groups' exposed times add up to comm_ms"
  grep -q "    dp    exposed .* ms of .* ms in flight (.*% hidden)" "$work/$name.log" ||
    { echo "FAIL: $name: no dp line in the log's time breakdown"; grep -A12 "time breakdown" "$work/$name.log"; fail=1; }
done
if run hier_dp4 4 --fake-hosts 2 --dp-collectives hierarchical; then
  check hier_dp4 'v["dp_inflight_ms"] > 0 && v["dp_exposed_ms"] > 0' "hierarchical dp 4: its time is dp's"
  check hier_dp4 "$adds_up" \
    "hierarchical dp 4: the groups' exposed times add up to comm_ms"
fi
[ -f "$work/dp2.jsonl" ] && check dp2 'v["dp_exposed_ms"] >= 0.5 * v["dp_inflight_ms"]' \
  "without overlap (each wait right after its start) less than half the dp time is hidden"
exit $fail
