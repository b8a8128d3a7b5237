#!/usr/bin/env bash
# Slurm on the emulated cluster (`scripts/cluster.sh up N --slurm`; docs/cluster.md, "Slurm"):
# munged, slurmctld and one slurmd per node, every one of them in the foreground inside the
# cluster's own namespaces (munged in the bridge's, slurmctld in node1's, slurmd -N nodeK in
# nodeK's), with its key, socket, config, state, spool, pid files and logs under
# CLUSTER_DIR/slurm. The ports are Slurm's defaults: each node has a network stack of its own, so
# two clusters up at once never share a port; the munge socket is a path under CLUSTER_DIR, so a
# system munged or another cluster's is never reached. Nothing else on the machine is read or
# changed (no /etc/slurm, /etc/munge, /run/munge, /var/spool).
#
# Usage (from scripts/cluster.sh, which has made the namespaces and CLUSTER_DIR/nodes):
#   scripts/cluster-slurm.sh up N PER   N nodes of PER CPUs each; returns when all are idle
#   scripts/cluster-slurm.sh down       kills every process in the cluster's namespaces (the
#                                       daemons, and jobs' slurmstepd and tasks, which outlive
#                                       slurmd) and checks that none is left
set -euo pipefail
dir=${CLUSTER_DIR:-/run/trident-cluster}
s=$dir/slurm

die() { echo "cluster-slurm.sh: $*" >&2; exit 1; }

# Slurm cannot run here: one line saying why, exit 77 (the tests that need it are skipped)
cannot_start() { echo "cluster-slurm.sh: Slurm could not start here ($*): skipped" >&2; exit 77; }

pid_of() { awk -v n="$1" '$1 == n { print $2 }' "$dir/nodes" 2>/dev/null; }

# munged, slurmctld or slurmd in the foreground inside NODE's namespaces, detached from the
# caller (its own session, its output to CLUSTER_DIR/slurm/log/NAME.out) so that no test harness
# waits on its pipes; its pid is $! (setsid, sh and nsenter exec it). Under `up --cpus` it joins
# NODE's CPU group first, so that the jobs its slurmd starts get the node's share of the cores.
daemons=() # name:pid of each one started
start() { # node, name, command...
  local node=$1 name=$2; shift 2
  local pid; pid=$(pid_of "$node")
  [ -n "$pid" ] || die "no namespaces for $node in $dir/nodes"
  local group=""; [ ! -f "$dir/cgroup" ] || [ ! -d "$(cat "$dir/cgroup")/$node" ] || group=$(cat "$dir/cgroup")/$node/cgroup.procs
  setsid sh -c '[ -z "$1" ] || echo $$ > "$1" || exit 1; shift; exec nsenter "$@"' sh "$group" \
    -t "$pid" -n -u -m -- "$@" </dev/null >"$s/log/$name.out" 2>&1 &
  daemons+=("$name:$!")
}

# Says which daemon has ended already, with the last line it wrote; nothing when all run.
ended() {
  local d
  for d in "${daemons[@]}"; do
    grep -qs '^State:.*[ZX]' "/proc/${d#*:}/status" || [ ! -d "/proc/${d#*:}" ] || continue
    echo "${d%:*} ended: $(tail -n 1 "$s/log/${d%:*}.out")"
    return
  done
}

write_conf() { # nodes, cpus per node
  local n=$1 per=$2
  cat >"$s/slurm.conf" <<EOF
# Slurm for the emulated cluster in $dir (written by scripts/cluster-slurm.sh)
ClusterName=trident
SlurmctldHost=node1
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# a requeued job waits cred_expire + 1 s before it may start again (Slurm's default: 120 s)
AuthInfo=socket=$s/munge.socket,cred_expire=5
StateSaveLocation=$s/state
SlurmdSpoolDir=$s/spool/%n
SlurmctldPidFile=$s/slurmctld.pid
SlurmdPidFile=$s/slurmd.%n.pid
SlurmctldLogFile=$s/log/slurmctld.log
SlurmdLogFile=$s/log/slurmd.%n.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
# a pass over the pending jobs every second (default 60 s): a requeued job starts once it may
SchedulerParameters=sched_interval=1
MpiDefault=none
ReturnToService=2
# the nodes share this machine's cores: each has the CPUs configured here, whatever it finds
SlurmdParameters=config_overrides
JobCompType=jobcomp/none
MailProg=/bin/true
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=node[1-$n] CPUs=$per State=UNKNOWN
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

up() { # nodes, cpus per node
  local n=$1 per=$2
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null &&
    command -v srun >/dev/null || {
    echo "cluster-slurm.sh: Slurm is not installed (slurmctld, slurmd, slurm-client, munge): run make deps as root" >&2
    return 77; }
  mkdir -p "$s/log" "$s/state" "$s/spool"
  chmod 755 "$s" # munged wants its socket's folder searchable by all (the key itself is 0600)
  mungekey --create --keyfile "$s/munge.key" >/dev/null
  start bridge munged munged --foreground --force --socket "$s/munge.socket" --key-file "$s/munge.key" \
    --pid-file "$s/munged.pid" --seed-file "$s/munged.seed"
  write_conf "$n" "$per"
  export SLURM_CONF=$s/slurm.conf
  for _ in $(seq 100); do [ -S "$s/munge.socket" ] && break; sleep 0.05; done
  [ -S "$s/munge.socket" ] || cannot_start "munged made no socket in 5 s: $(tail -n 1 "$s/log/munged.out")"
  start node1 slurmctld slurmctld -D -c -f "$SLURM_CONF"
  for k in $(seq "$n"); do
    mkdir -p "$s/spool/node$k"
    start "node$k" "slurmd.node$k" slurmd -D -N "node$k" -f "$SLURM_CONF"
  done
  # every node idle (registered with slurmctld), in at most 30 s
  local idle="" why=""
  for _ in $(seq 300); do
    idle=$(nsenter -t "$(pid_of node1)" -n -u -m -- sinfo -h -N -o '%N %T' 2>/dev/null | grep -c ' idle$' || true)
    [ "$idle" = "$n" ] && break
    why=$(ended)
    [ -z "$why" ] || cannot_start "$why"
    sleep 0.1
  done
  [ "$idle" = "$n" ] || cannot_start "$idle of $n nodes idle after 30 s: $(tail -n 1 "$s/log/slurmctld.out")"
}

# the cluster's network namespaces (of the holders in CLUSTER_DIR/nodes: bridge and nodes)
namespaces() {
  local p
  for p in $(awk '{ print $2 }' "$dir/nodes" 2>/dev/null); do readlink "/proc/$p/ns/net" 2>/dev/null || true; done
}

# pids of every process in one of the network namespaces NETS but the holders (and their
# unshare), which scripts/cluster.sh ends
in_namespaces() { # nets (space-separated)
  local holders; holders=$(awk '{ print $2, $3 }' "$dir/nodes" 2>/dev/null | tr '\n' ' ')
  { find /proc -mindepth 3 -maxdepth 3 -path '/proc/[0-9]*/ns/net' -printf '%h %l\n' 2>/dev/null || true; } |
    awk -v nets="$1" -v holders="$holders" '
      BEGIN { split(nets, a, " "); for (i in a) want[a[i]] = 1; split(holders, h, " "); for (i in h) skip[h[i]] = 1 }
      ($2 in want) { sub("^/proc/", "", $1); sub("/ns$", "", $1); if (!($1 in skip)) print $1 }'
}

down() {
  local nets; nets=$(namespaces | tr '\n' ' ')
  [ -n "${nets// /}" ] || return 0
  # SIGKILL at once: slurmstepd and srun outlive a SIGTERM, and no state here is worth saving
  local pids
  for _ in $(seq 50); do
    pids=$(in_namespaces "$nets")
    [ -n "$pids" ] || return 0
    kill -KILL $pids 2>/dev/null || true
    sleep 0.05
  done
  echo "cluster-slurm.sh: processes left in the cluster's namespaces: $pids" >&2
  return 1
}

case ${1:-} in
  up) shift; [ $# -eq 2 ] || die "up N PER"; up "$@" ;;
  down) down ;;
  *) die "usage: scripts/cluster-slurm.sh up N PER | down (called by scripts/cluster.sh)" ;;
esac
