#!/usr/bin/env bash
# A cluster on one machine (docs/cluster.md): each fake node is a network + UTS + mount namespace
# with its own hostname, its own /etc/hosts and /tmp, and one veth link (eth0) to a bridge that
# lives in a namespace of its own; Open MPI reaches a node through the rsh agent written here,
# which enters the node's namespaces where ssh would log in. Addresses (10.77.0.0/24) exist only
# inside the namespaces made here; nothing is sent anywhere else.
#
# Usage: scripts/cluster.sh up N [--ranks-per-node K] [--rate RATE] [--cpus C] [--private-disk] [--slurm]
#                               [--share PATH]... [--owner PID]   (RATE for tc tbf: 1gbit;
#          --cpus C: each node's processes get at most C cores' time (a CPU cgroup: 0.5, 1, 2), as a node of C cores;
#          --private-disk: each node's own disk CLUSTER_DIR/nodeK/disk at /mnt/local, the rest shared;
#          --slurm: munge, slurmctld and a slurmd per node of K CPUs, see scripts/cluster-slurm.sh;
#          --share PATH: a path under /tmp that the nodes see too (its top folder /tmp/X, bind-mounted into
#            each node's own /tmp at the same path); the checkout this script is in is always shared;
#          --owner PID: the cluster goes down by itself once process PID has ended, however it ended
#            (a watchdog in a session of its own; the tests give their own pid: a ctest timeout's SIGKILL
#            runs no trap))
#        scripts/cluster.sh run NODE CMD...    (NODE: node1 .. nodeN)
#        scripts/cluster.sh fault NODE kill|cut|loss|stop|heal   (what can go wrong with a node)
#        scripts/cluster.sh cpus C   (every node's CPU share from now on; the cluster was made with --cpus)
#        scripts/cluster.sh down
# Environment: CLUSTER_DIR (default /run/trident-cluster; not under /tmp, which each node has its own of): the hostfile, the rsh agent
# (CLUSTER_DIR/rsh), the node table. `up` removes what it made if it fails; `down` removes all. What `up`
# leaves running (the namespaces' holders, the daemons, the watchdog) holds none of the caller's
# stdin, stdout or stderr, so `up ... | tail` and `$(up ...)` return once `up` has.
# Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN): otherwise it says so in one line and exits 77.
set -euo pipefail
dir=${CLUSTER_DIR:-/run/trident-cluster}
net=10.77.0
here=$(cd "$(dirname "$0")" && pwd) # this script's folder (the watchdog runs from /)

die() { echo "cluster.sh: $*" >&2; exit 1; }

can_make_namespaces() {
  [ "$(id -u)" -eq 0 ] || { echo "cluster.sh: needs root (network and mount namespaces, veth links): skipped" >&2; return 1; }
  unshare --net --uts --mount true 2>/dev/null ||
    { echo "cluster.sh: this machine refuses new namespaces (no CAP_SYS_ADMIN/CAP_NET_ADMIN): skipped" >&2; return 1; }
}

pid_of() { # node -> the pid holding its namespaces
  awk -v n="$1" '$1 == n { print $2 }' "$dir/nodes" 2>/dev/null
}

# The processes inside the network namespaces of the nodes named (bridge, node1, ...), their holders
# and the unshare above each (which entered the namespaces too) aside: one pass over /proc.
procs_of() { # node...
  local nets="" skip="" node pid
  for node in "$@"; do
    pid=$(pid_of "$node"); [ -n "$pid" ] || continue
    nets="$nets $(readlink "/proc/$pid/ns/net" 2>/dev/null || true)"
  done
  skip=$(awk '{ print $2, $3 }' "$dir/nodes" 2>/dev/null | tr '\n' ' ')
  { find /proc -mindepth 3 -maxdepth 3 -path '/proc/[0-9]*/ns/net' -printf '%h %l\n' 2>/dev/null || true; } |
    awk -v nets="$nets" -v skip="$skip" '
      BEGIN { split(nets, a, " "); for (i in a) want[a[i]] = 1; split(skip, h, " "); for (i in h) no[h[i]] = 1 }
      ($2 in want) { sub("^/proc/", "", $1); sub("/ns$", "", $1); if (!($1 in no)) print $1 }'
}

unshares() { # ends the unshare processes this cluster started (each SIGKILLs its holder as it ends)
  local p c
  for p in $(cat "$dir/unshares" 2>/dev/null); do
    read -r c 2>/dev/null < "/proc/$p/comm" && [ "$c" = unshare ] && kill "$p" 2>/dev/null || true
  done
}

down() {
  # an `up` still making this cluster (its caller gave up on it: a timeout) first ends, bounded
  local u="" us=""; read -r u us 2>/dev/null < "$dir/up" || true
  if [ -n "$u" ] && [ "$u" != $$ ]; then
    for _ in $(seq 1200); do [ "$(started "$u" || true)" = "$us" ] || break; sleep 0.1; done
  fi
  # the watchdog of `up --owner` (unless this is it) first, so that it does not take down a later cluster
  local w; w=$(cat "$dir/watchdog" 2>/dev/null || true)
  [ -z "$w" ] || [ "$w" = $$ ] || kill "$w" 2>/dev/null || true
  [ -f "$dir/nodes" ] || { unshares; cpu_groups_down; rm -rf "$dir"; return 0; }
  [ ! -d "$dir/slurm" ] || "$here/cluster-slurm.sh" down || true
  # what still runs inside a node (a daemon of a job that was cut off, a stopped rank) or the
  # bridge's namespace (munged) goes too
  procs_of $(awk '{ print $1 }' "$dir/nodes") | xargs -r kill -KILL 2>/dev/null || true
  # the namespaces (and the veth links, the bridge and the addresses in them) end with their holders
  # (an unshare ending SIGKILLs its holder: those of a killed `up` that are not in the table yet)
  awk '{ print $2 }' "$dir/nodes" | while read -r pid; do kill "$pid" 2>/dev/null || true; done
  unshares
  cpu_groups_down
  rm -rf "$dir"
}

# --cpus: a CPU cgroup a node (cgroup v2's cpu.max, or v1's cfs quota), in the period of 10 ms so
# that a node's share is even at the scale of one kernel. What the rsh agent and `run` start in a
# node joins its group (children stay in their parent's group); the group's path is in
# CLUSTER_DIR/cgroup.
cpu_root() {
  if [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then echo /sys/fs/cgroup
  elif [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then echo /sys/fs/cgroup/cpu
  else return 1; fi
}

cpu_quota() { # cores: the quota in microseconds of each 10 ms period
  awk -v c="$1" 'BEGIN { q = int(c * 10000 + 0.5); if (q < 1000) exit 1; print q }' ||
    die "--cpus $1: give the cores a node has, 0.1 or more"
}

set_cpu_quota() { # group, quota
  if [ -f "$1/cpu.max" ]; then echo "$2 10000" > "$1/cpu.max"
  else echo 10000 > "$1/cpu.cfs_period_us" && echo "$2" > "$1/cpu.cfs_quota_us"; fi
}

cpu_groups_up() { # cores, nodes
  local root; root=$(cpu_root) || die "--cpus needs a CPU cgroup controller (/sys/fs/cgroup/cpu or cgroup v2's cpu): none here"
  local quota; quota=$(cpu_quota "$1") || exit 1
  local top=$root/trident-cluster.$$
  [ "$root" != /sys/fs/cgroup ] || echo +cpu > "$root/cgroup.subtree_control" 2>/dev/null || true
  mkdir "$top" && echo "$top" > "$dir/cgroup"
  [ "$root" != /sys/fs/cgroup ] || echo +cpu > "$top/cgroup.subtree_control"
  for k in $(seq "$2"); do
    mkdir "$top/node$k"
    set_cpu_quota "$top/node$k" "$quota"
  done
}

cpus() { # cores: every node's CPU time from now on (the cluster was made with --cpus)
  [ -f "$dir/cgroup" ] || die "cpus $1: the cluster has no CPU groups (make it with up N --cpus C)"
  local quota g; quota=$(cpu_quota "$1") || exit 1
  for g in "$(cat "$dir/cgroup")"/node*; do set_cpu_quota "$g" "$quota"; done
}

cpu_groups_down() {
  [ -f "$dir/cgroup" ] || return 0
  local top; top=$(cat "$dir/cgroup")
  for _ in $(seq 50); do # its processes were killed above; a group goes once they have ended
    rmdir "$top"/node* 2>/dev/null || true
    rmdir "$top" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "cluster.sh: could not remove the CPU cgroup $top (processes still in it: $(cat "$top"/node*/cgroup.procs 2>/dev/null | tr '\n' ' '))" >&2
}

join_cpu_group() { # node: this process joins the node's CPU group, if the cluster has them
  [ -f "$dir/cgroup" ] || return 0
  echo $$ > "$(cat "$dir/cgroup")/$1/cgroup.procs"
}

# A process that holds new namespaces open: it waits on a pipe that nothing writes.
hold() { # name, unshare flags...
  local name=$1; shift
  mkdir -p "$dir/$name"
  unshare "$@" --fork --kill-child sh -c 'exec sleep infinity' </dev/null >/dev/null 2>&1 &
  local outer=$!
  echo "$outer" >> "$dir/unshares" # for down, should `up` end before the line below
  # the holder is unshare's child; wait until it is there and in its own namespace
  local pid=""
  for _ in $(seq 100); do
    pid=$(pgrep -P "$outer" sleep || true)
    [ -n "$pid" ] && break
    sleep 0.02
  done
  [ -n "$pid" ] || die "could not start the namespaces of $name"
  echo "$name $pid $outer" >> "$dir/nodes"
}

# The start time of process $1 (clock ticks after boot), which tells it from a later one of its pid.
started() { local s; read -r s 2>/dev/null < "/proc/$1/stat" || return 1; s=${s##*) }; set -- $s; echo "${20}"; }

# `up --owner`: runs in a session of its own, its output nowhere, until the owner (pid, start time)
# has ended, then takes the cluster down, `up` first if it still runs; ends at once when this
# cluster's `down` has run (CLUSTER_DIR/watchdog no longer names it).
watch() { # owner pid, its start time, the pid of `up`, its start time
  echo $$ > "$dir/watchdog"
  cd /
  while [ "$(cat "$dir/watchdog" 2>/dev/null)" = $$ ] && [ "$(started "$1" || true)" = "$2" ]; do sleep 0.5; done
  [ "$(cat "$dir/watchdog" 2>/dev/null)" = $$ ] || return 0
  [ "$(started "$3" || true)" != "$4" ] || kill -TERM "$3" 2>/dev/null || true # `up` downs what it made
  for _ in $(seq 100); do [ "$(started "$3" || true)" = "$4" ] || break; sleep 0.1; done
  down
}

# The top folder under /tmp of a path (/tmp/X of /tmp/X/Y/..., after . and ..; links not followed);
# nothing for a path elsewhere.
tmp_top() {
  local p; p=$(realpath -ms -- "$1")
  case $p in /tmp/?*) p=${p#/tmp/}; echo "/tmp/${p%%/*}" ;; esac
}

up() {
  local n=$1; shift
  local per=1 rate="" disk="" slurm="" cpus="" owner=""
  local -a shares=()
  local top; top=$(tmp_top "$(dirname "$here")")
  [ -z "$top" ] || shares+=("$top")
  while [ $# -gt 0 ]; do
    case $1 in
      --ranks-per-node) per=$2; shift 2 ;;
      --share) top=$(tmp_top "$2"); [ -z "$top" ] || shares+=("$top"); shift 2 ;;
      --owner) owner=$2; shift 2 ;;
      --rate) rate=$2; shift 2 ;;
      --cpus) cpus=$2; shift 2 ;;
      --private-disk) disk=/mnt/local; shift ;;
      --slurm) slurm=1; shift ;;
      *) echo "cluster.sh: unknown option $1 (see the usage at the top of the script)" >&2; exit 2 ;;
    esac
  done
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || { echo "cluster.sh: up N: N from 1 to 200, not '$n'" >&2; exit 2; }
  [ -z "$owner" ] || { [[ $owner =~ ^[0-9]+$ ]] && started "$owner" >/dev/null; } ||
    { echo "cluster.sh: --owner $owner: no such process (give the pid of the process the cluster lives with)" >&2; exit 2; }
  local s; [ ${#shares[@]} -eq 0 ] || mapfile -t shares < <(printf '%s\n' "${shares[@]}" | sort -u)
  for s in "${shares[@]}"; do
    [ -e "$s" ] || { echo "cluster.sh: --share: $s does not exist (give paths under /tmp that do)" >&2; exit 2; }
  done
  can_make_namespaces || exit 77
  [ -f "$dir/nodes" ] && die "a cluster is up already in $dir: scripts/cluster.sh down first"
  mkdir -p "$dir"
  echo "$$ $(started $$)" > "$dir/up" # up at work: a down waits for it (removed when up is done)
  trap 'down' ERR
  trap 'down; exit 1' INT TERM
  if [ -n "$owner" ]; then
    CLUSTER_DIR=$dir setsid "$here/cluster.sh" watch "$owner" "$(started "$owner")" $$ "$(started $$)" </dev/null >/dev/null 2>&1 &
    for _ in $(seq 100); do [ -s "$dir/watchdog" ] && break; sleep 0.02; done
    [ -s "$dir/watchdog" ] || die "the watchdog of --owner $owner did not start"
  fi
  [ -z "$cpus" ] || cpu_groups_up "$cpus" "$n"
  hold bridge --net
  local bpid; bpid=$(pid_of bridge)
  nsenter -t "$bpid" -n ip link add br0 type bridge
  nsenter -t "$bpid" -n ip link set br0 up
  : > "$dir/hosts"
  echo "127.0.0.1 localhost" >> "$dir/hosts"
  for k in $(seq "$n"); do echo "$net.$((10 + k)) node$k" >> "$dir/hosts"; done
  : > "$dir/hostfile"
  for k in $(seq "$n"); do
    local node=node$k
    hold "$node" --net --uts --mount --propagation private
    local pid; pid=$(pid_of "$node")
    mkdir -p "$dir/$node/tmp"
    # its name, its /etc/hosts and its /tmp, seen only inside its mount namespace
    nsenter -t "$pid" -u hostname "$node"
    nsenter -t "$pid" -m mount --bind "$dir/hosts" /etc/hosts
    # the shared paths under /tmp (the checkout, --share): the host's, mounted inside the node's own
    # /tmp before it covers the host's (mounts of the node's namespace only: outside, empty folders)
    for s in "${shares[@]}"; do
      if [ -d "$s" ]; then mkdir -p "$dir/$node$s"; else touch "$dir/$node$s"; fi
      nsenter -t "$pid" -m mount --bind "$s" "$dir/$node$s"
    done
    nsenter -t "$pid" -m mount --rbind "$dir/$node/tmp" /tmp
    # its own disk (an empty folder at /mnt/local outside the nodes); down removes it with $dir
    [ -z "$disk" ] || { mkdir -p "$disk" "$dir/$node/disk" && nsenter -t "$pid" -m mount --bind "$dir/$node/disk" "$disk"; }
    # eth0 in the node, its peer on the bridge (made in their namespaces: none is ever left outside)
    ip link add eth0 netns "$pid" type veth peer name "tdb$$n$k" netns "$bpid"
    nsenter -t "$pid" -n ip addr add "$net.$((10 + k))/24" dev eth0
    nsenter -t "$pid" -n ip link set lo up
    nsenter -t "$pid" -n ip link set eth0 up
    nsenter -t "$bpid" -n ip link set "tdb$$n$k" master br0
    nsenter -t "$bpid" -n ip link set "tdb$$n$k" up
    [ -z "$rate" ] || nsenter -t "$pid" -n tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 50ms
    echo "$node slots=$per" >> "$dir/hostfile"
  done
  # the rsh agent: Open MPI calls it as `rsh [options] HOST COMMAND...`, as it would call ssh
  cat > "$dir/rsh" <<EOF
#!/usr/bin/env bash
# Open MPI's plm_rsh_agent for the cluster in $dir: enters HOST's namespaces and runs COMMAND.
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
pid=\$(awk -v n="\$host" '\$1 == n { print \$2 }' "$dir/nodes")
[ -n "\$pid" ] || { echo "rsh: no node \$host in $dir/nodes" >&2; exit 255; }
[ ! -f "$dir/cgroup" ] || echo \$\$ > "\$(cat "$dir/cgroup")/\$host/cgroup.procs"
exec nsenter -t "\$pid" -n -u -m -- /bin/sh -c "\$*"
EOF
  chmod +x "$dir/rsh"
  [ -z "$slurm" ] || "$here/cluster-slurm.sh" up "$n" "$per"
  trap - ERR INT TERM
  rm -f "$dir/up"
  local shared="${shares[*]}"
  echo "cluster: $n nodes (node1..node$n, $net.11..), $per slots each${cpus:+, $cpus cores of CPU time each}${rate:+, links shaped to $rate}${disk:+, each its own disk at $disk}${shared:+, $shared shared in their /tmp}${owner:+, down when process $owner ends}; hostfile $dir/hostfile, rsh agent $dir/rsh"
  [ -z "$slurm" ] || echo "slurm: export SLURM_CONF=$dir/slurm/slurm.conf, then e.g. scripts/cluster.sh run node1 srun -N $n hostname"
}

run() { # node, command...
  local node=$1; shift
  local pid; pid=$(pid_of "$node")
  [ -n "$pid" ] || die "no node $node (scripts/cluster.sh up N first; nodes: $(awk '{print $1}' "$dir/nodes" 2>/dev/null | tr '\n' ' '))"
  join_cpu_group "$node"
  # the caller's working directory and environment come along, as under ssh with a shared home
  exec nsenter -t "$pid" -n -u -m --wd="$PWD" -- "$@"
}

# What can go wrong with a node, for the fault tests: every process in it killed; its link cut
# (down); 100% loss with the link up (a blackhole qdisc on both ends of its link: this kernel
# has no netem); every process in it stopped (SIGSTOP); heal undoes cut, loss and stop.
fault() { # node, kind
  local node=$1 kind=$2
  local pid; pid=$(pid_of "$node"); [ -n "$pid" ] || die "no node $node"
  local bpid; bpid=$(pid_of bridge)
  local k=${node#node}
  local peer; peer=$(nsenter -t "$bpid" -n ip -o link show master br0 | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' |
    grep -E "^tdb[0-9]+n$k\$" | head -1 || true)
  case $kind in
    kill) procs_of "$node" | xargs -r kill -KILL ;;
    cut) nsenter -t "$pid" -n ip link set eth0 down ;;
    loss) nsenter -t "$pid" -n tc qdisc replace dev eth0 root blackhole
          [ -n "$peer" ] && nsenter -t "$bpid" -n tc qdisc replace dev "$peer" root blackhole ;;
    stop) procs_of "$node" | xargs -r kill -STOP ;;
    heal) nsenter -t "$pid" -n ip link set eth0 up
          nsenter -t "$pid" -n tc qdisc del dev eth0 root 2>/dev/null || true
          [ -z "$peer" ] || nsenter -t "$bpid" -n tc qdisc del dev "$peer" root 2>/dev/null || true
          procs_of "$node" | xargs -r kill -CONT ;;
    *) echo "cluster.sh: fault NODE kill|cut|loss|stop|heal, not '$kind'" >&2; exit 2 ;;
  esac
}

case ${1:-} in
  up) shift; [ $# -ge 1 ] || { echo "cluster.sh: up N [--ranks-per-node K] [--rate RATE] [--cpus C] [--private-disk] [--slurm] [--share PATH]... [--owner PID]" >&2; exit 2; }; up "$@" ;;
  down) down ;;
  watch) shift; watch "$@" ;; # started by up --owner
  run) shift; [ $# -ge 2 ] || { echo "cluster.sh: run NODE CMD..." >&2; exit 2; }; run "$@" ;;
  fault) shift; [ $# -eq 2 ] || { echo "cluster.sh: fault NODE kill|cut|loss|stop|heal" >&2; exit 2; }; fault "$@" ;;
  cpus) shift; [ $# -eq 1 ] || { echo "cluster.sh: cpus C (each node's cores of CPU time)" >&2; exit 2; }; cpus "$1" ;;
  *) echo "usage: scripts/cluster.sh up N [--ranks-per-node K] [--rate RATE] [--cpus C] [--private-disk] [--slurm] [--share PATH]... [--owner PID] | run NODE CMD... | fault NODE KIND | cpus C | down" >&2; exit 2 ;;
esac
