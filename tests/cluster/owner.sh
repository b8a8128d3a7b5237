#!/usr/bin/env bash
# scripts/cluster.sh up --owner PID: the cluster goes down by itself once PID has ended, however
# (a ctest timeout SIGKILLs the test's process tree: no trap runs, and the namespaces' holders and
# Slurm's daemons, in sessions of their own, outlived it for an hour). Twice, with Slurm's daemons
# where Slurm is installed:
# - the owner SIGKILLed while the cluster is up;
# - the owner and `up` itself SIGKILLed while `up` is still making the cluster (as ctest's kill
#   of the whole tree does);
# each time, within 15 s: no holder, daemon or watchdog left, no process in the cluster's
# namespaces, CLUSTER_DIR gone. `down` while `up` is still at work waits for it, leaving nothing.
# And the cluster outlives the process that ran `up` while its owner lives. Every cluster here has
# this test as its owner (at the least), so that none outlives it.
# Environment: ROOT, WORK.
set -u
. "$(dirname "$0")/two_nodes.sh"
export CLUSTER_DIR=/run/trident-cluster-owner.$$
trap '"$cluster" down' EXIT
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
slurm=(--slurm)
command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null || slurm=()
fail=0
# the pids of the cluster: its holders and their unshare, its watchdog, and every process in its
# network namespaces
pids() {
  local nets p
  nets=$(for p in $(awk '{ print $2 }' "$CLUSTER_DIR/nodes" 2>/dev/null); do readlink "/proc/$p/ns/net"; done)
  awk '{ print $2; print $3 }' "$CLUSTER_DIR/nodes" 2>/dev/null
  cat "$CLUSTER_DIR/watchdog" 2>/dev/null; echo
  for p in /proc/[0-9]*; do
    echo "$nets" | grep -qxF "$(readlink "$p/ns/net" 2>/dev/null)" && echo "${p#/proc/}"
  done
}
alive() { local p; for p in $1; do [ -d "/proc/$p" ] && ! grep -qs '^State:.*Z' "/proc/$p/status" && echo "$p"; done; }
# name, what to kill (owner | owner+up), when (the line of CLUSTER_DIR/nodes to wait for)
killed() {
  local name=$1 what=$2 when=$3
  rm -f up.out up.pid
  bash -c '"$0" up 2 "$@" --owner $$ > up.out 2>&1 & echo $! > up.pid; wait $!; exec sleep 600' "$cluster" "${slurm[@]}" &
  local owner=$!
  for _ in $(seq 600); do
    if [ "$when" = done ]; then grep -qs "^cluster: " up.out && break; else grep -qs "$when" "$CLUSTER_DIR/nodes" && break; fi
    grep -qs 'skipped$' up.out && break
    [ ! -s up.pid ] || [ -d "/proc/$(cat up.pid)" ] || break # up ended (failed, or before node2)
    sleep 0.05
  done
  if ! [ -s "$CLUSTER_DIR/watchdog" ]; then
    grep -q 'skipped$' up.out && { kill -KILL $owner; exit 77; } # no namespaces here (says why)
    echo "FAIL: $name: no cluster came up: $(cat up.out)"; fail=1; kill -KILL $owner; return
  fi
  local all; all=$(pids | sort -un | tr '\n' ' ')
  [ "$what" = owner ] || kill -KILL "$(cat up.pid)" 2>/dev/null # (up may have ended already)
  kill -KILL $owner
  wait $owner 2>/dev/null
  local left=x t
  for t in $(seq 150); do left=$(alive "$all"); [ -z "$left" ] && [ ! -e "$CLUSTER_DIR" ] && break; sleep 0.1; done
  if [ -z "$left" ] && [ ! -e "$CLUSTER_DIR" ]; then
    echo "ok: $name: $(echo $all | wc -w) processes of the cluster (holders, watchdog, what ran in its namespaces) and CLUSTER_DIR gone $((t / 10)).$((t % 10)) s after the SIGKILL"
  else
    echo "FAIL: $name: 15 s after the SIGKILL, left: CLUSTER_DIR $( [ -e "$CLUSTER_DIR" ] && echo there || echo gone), processes:"
    ps -o pid,stat,cmd -p "$(echo $left | tr ' ' ,)"; fail=1
  fi
}
killed "owner SIGKILLed, the cluster up" owner done
killed "owner and up SIGKILLed while up makes node2" owner+up "^node2 "
# down while `up` is still making the cluster (a caller that gave up on it: timeout 30 up ...;
# down): down first waits for up to end (before, up went on making nodes and starting daemons
# while down removed them, and once left Slurm's daemons in namespaces no holder held), then
# nothing of either is left
race=$CLUSTER_DIR.race
ours() { grep -lsz "^CLUSTER_DIR=$race\$" /proc/[0-9]*/environ | sed 's|/proc/\([0-9]*\)/environ|\1|'; }
CLUSTER_DIR=$race "$cluster" up 2 "${slurm[@]}" --owner $$ > up.out 2>&1 & up=$!
for _ in $(seq 600); do grep -qs "^node1 " "$race/nodes" && break; sleep 0.05; done
CLUSTER_DIR=$race "$cluster" down
if kill -0 $up 2>/dev/null; then echo "FAIL: down returned while up was still at work"; fail=1
else echo "ok: down while up was at work returned after up had ended"; fi
wait $up
# (the watchdog's last sleep, which carries CLUSTER_DIR too, ends within 0.5 s)
for _ in $(seq 30); do left=$(ours | tr '\n' ' '); [ -z "$left" ] && break; sleep 0.1; done
if [ -z "$left" ] && [ ! -e "$race" ]; then echo "ok: down while up was at work: nothing left"
else echo "FAIL: down while up was at work: left $( [ -e "$race" ] && echo "$race, ")processes $left"; ps -o pid,cmd -p "${left// /,}0"; fail=1
  ours | xargs -r kill -KILL; CLUSTER_DIR=$race "$cluster" down; fi
# the owner, not the process that ran up: the cluster stays up after its maker has ended
bash -c '"$0" up 1 --owner "$1"' "$cluster" $$ > up.out 2>&1 || { echo "FAIL: up 1: $(cat up.out)"; exit 1; }
sleep 1.5
if [ -z "$(alive "$(awk '{ print $2 }' "$CLUSTER_DIR/nodes" 2>/dev/null)" | head -1)" ]; then echo "FAIL: the cluster went down with the process that ran up, its owner alive"; fail=1
else echo "ok: the cluster outlives the process that ran up while its owner lives"; fi
[ ${#slurm[@]} -gt 0 ] || echo "note: Slurm is not installed: its daemons were not tried"
exit $fail
