#!/usr/bin/env bash
# A real Slurm on a netns cluster made by deploy/netns-cluster.sh: one slurmctld on this
# machine, one slurmd inside each node's network namespace (with the node's hostname, as its
# sshd has), and a munged of its own, so that srun/sbatch/scancel behave as on real nodes.
#
#   deploy/slurm-netns.sh up [--prefix NAME] [--cpus N]   start Slurm on cluster NAME's nodes
#   deploy/slurm-netns.sh status [--prefix NAME]          show the daemons and sinfo
#   deploy/slurm-netns.sh down [--prefix NAME]            stop every daemon it started, remove its state
#
# Run as root, after `deploy/netns-cluster.sh up N --prefix NAME`. Clients find this cluster
# through SLURM_CONF (never /etc/slurm), from this machine or from inside a node:
#   SLURM_CONF=/tmp/rlmesh-netns-NAME/slurm/slurm.conf srun -N3 hostname
#
# Design:
# - Slurm node names are the nodes' hostnames (NAME-node1 ...), as on a real cluster, where
#   `hostname`, SLURMD_NODENAME and the names in SLURM_JOB_NODELIST agree; NodeAddr is the
#   node's bridge address, so no name needs to resolve.
# - munged: one per Slurm cluster, on a socket in the state dir (AuthInfo/CredInfo point at
#   it), with a key of its own. A munged the machine already runs (/run/munge) is never
#   touched, two test clusters never share one, and `down` stops exactly the one `up` started.
# - slurmctld runs in this machine's network namespace, reached on the bridge address, in a
#   UTS namespace of its own whose hostname is NAME-ctld (slurmctld insists that its hostname
#   is SlurmctldHost's; the machine's own hostname stays untouched). Its port derives from the
#   cluster's address block, so the 8 clusters netns-cluster.sh allows can run side by side.
# - Every daemon is tracked by a pid file under the state dir; `down` stops those, then any
#   process still naming this cluster's slurm.conf or munge socket on its command line.
# State (slurm.conf, munge key and socket, spool, logs) lives in /tmp/rlmesh-netns-NAME/slurm/.
set -euo pipefail

die() { echo "slurm-netns: error: $*" >&2; exit 1; }
say() { echo "slurm-netns: $*"; }

usage() {
    sed -n '6,8p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# ---- arguments -------------------------------------------------------------------------

ACTION=${1:-}
[[ -n $ACTION ]] || usage
shift
PREFIX=rlmesh
CPUS=2
while (($#)); do
    case $1 in
        --prefix) (($# >= 2)) || die "--prefix needs a value"; PREFIX=$2; shift 2 ;;
        --prefix=*) PREFIX=${1#--prefix=}; shift ;;
        --cpus) (($# >= 2)) || die "--cpus needs a value"; CPUS=$2; shift 2 ;;
        --cpus=*) CPUS=${1#--cpus=}; shift ;;
        -h|--help) usage ;;
        *) die "unexpected argument $1" ;;
    esac
done
case $ACTION in up|down|status) ;; *) usage ;; esac
[[ $PREFIX =~ ^[a-z][a-z0-9-]{0,9}$ ]] \
    || die "--prefix must be 1 to 10 characters of a-z, 0-9 and '-', starting with a letter"
[[ $CPUS =~ ^[0-9]+$ ]] && ((CPUS >= 1 && CPUS <= 256)) || die "--cpus must be 1 to 256, not '$CPUS'"

readonly NETNS_STATE="${RLMESH_NETNS_STATE_ROOT:-/tmp}/rlmesh-netns-$PREFIX"
readonly STATE="$NETNS_STATE/slurm"
readonly CONF="$STATE/slurm.conf"
readonly MUNGE_DIR="$STATE/munge"
readonly MUNGE_SOCKET="$MUNGE_DIR/munge.socket"
readonly CTLD_DIR="$STATE/ctld"

# ---- environment checks ----------------------------------------------------------------

[[ $(id -u) == 0 ]] || die "must run as root (slurmd runs inside network namespaces); try: sudo $0 $ACTION ..."
find_tool() {  # name, package: prints its path
    local path
    path=$(command -v "$1" || true)
    [[ -n $path ]] || { [[ -x /usr/sbin/$1 ]] && path=/usr/sbin/$1; } \
        || die "'$1' not found: install $2 (apt-get install --no-install-recommends slurm-wlm munge)"
    echo "$path"
}

# A zombie counts as gone: daemons are reparented to init, which may reap them late.
pid_alive() {
    [[ -n $1 ]] && kill -0 "$1" 2>/dev/null \
        && [[ $(sed -n 's/.*) \(.\).*/\1/p' "/proc/$1/stat" 2>/dev/null) != Z ]]
}
read_pid() { cat "$1" 2>/dev/null || true; }
env_get() { sed -n "s/^$1=//p" "$NETNS_STATE/cluster.env" 2>/dev/null; }
node_names() { awk -F'\t' '{print $3}' "$NETNS_STATE/nodes.tsv"; }   # the netns names = hostnames

# Processes whose command line names this cluster's slurm.conf or munge socket: what `down`
# stops when a pid file is gone (a daemon started by an `up` killed half way).
our_processes() {
    local cmdline pid
    for cmdline in /proc/[0-9]*/cmdline; do
        pid=${cmdline#/proc/}; pid=${pid%/cmdline}
        [[ $pid == "$$" ]] && continue
        if tr '\0' ' ' 2>/dev/null <"$cmdline" | grep -qF -e "$CONF" -e "$MUNGE_SOCKET"; then
            echo "$pid"
        fi
    done
}

# TERM, then KILL after 3 s, each pid given; waits until they are gone.
stop_pids() {
    local pids=() pid i
    for pid in "$@"; do pid_alive "$pid" && pids+=("$pid"); done
    ((${#pids[@]})) || return 0
    kill -TERM "${pids[@]}" 2>/dev/null || true
    for ((i = 0; i < 60; i++)); do
        local left=()
        for pid in "${pids[@]}"; do pid_alive "$pid" && left+=("$pid"); done
        ((${#left[@]})) || return 0
        ((i == 30)) && kill -KILL "${left[@]}" 2>/dev/null || true
        sleep 0.1
    done
    say "warning: processes ${left[*]} survived SIGKILL"
}

# ---- down ------------------------------------------------------------------------------

# Every descendant of the pids given (children first found, then theirs).
descendants() {
    local stat
    for stat in /proc/[0-9]*/stat; do   # "pid (comm) state ppid ...", without procps
        sed -n 's/^\([0-9]*\) .*) . \([0-9]*\) .*/\1 \2/p' "$stat" 2>/dev/null
    done | awk -v roots=" $* " '
        { parent[$1] = $2; pids[NR] = $1 }
        END {
            split(roots, r, " "); for (i in r) mark[r[i]] = 1
            do { grew = 0
                for (i in pids) { p = pids[i]
                    if (!(p in mark) && (parent[p] in mark)) { mark[p] = 1; grew = 1; print p } }
            } while (grew)
        }'
}

# The step daemons in our nodes' namespaces and every process under them: a job's tasks
# outlive slurmd (by design), so they go explicitly.
stop_steps() {
    local name stepds=() pid
    [[ -f $NETNS_STATE/nodes.tsv ]] || return 0
    for name in $(node_names); do
        for pid in $(ip netns pids "$name" 2>/dev/null || true); do
            [[ $(cat "/proc/$pid/comm" 2>/dev/null) == slurmstepd ]] && stepds+=("$pid")
        done
    done
    ((${#stepds[@]})) || return 0
    stop_pids $(descendants "${stepds[@]}") "${stepds[@]}"
}

do_down() {
    local name k pids=()
    # Jobs first, cancelled as a user would (their steps end on every node), while slurmctld
    # and the slurmds still run; whatever is left of them is killed after.
    if pid_alive "$(read_pid "$CTLD_DIR/slurmctld.pid")" && [[ -f $CONF ]]; then
        SLURM_CONF=$CONF timeout 10 scancel --full --quiet --user=root 2>/dev/null || true
        for ((k = 0; k < 50; k++)); do
            [[ -z $(SLURM_CONF=$CONF timeout 5 squeue -h -o %i 2>/dev/null) ]] && break
            sleep 0.1
        done
    fi
    stop_steps
    # Then slurmd, slurmctld, and munged, which the others need until they are gone.
    if [[ -f $NETNS_STATE/nodes.tsv ]]; then
        for name in $(node_names); do pids+=("$(read_pid "$STATE/$name/slurmd.pid")"); done
    fi
    stop_pids "${pids[@]}"
    # slurmctld with its slurmscriptd child (named "slurmctld: slurmscriptd", no path).
    local ctld; ctld=$(read_pid "$CTLD_DIR/slurmctld.pid")
    if pid_alive "$ctld"; then stop_pids "$ctld" $(descendants "$ctld"); fi
    # Step daemons (slurmstepd) and anything else still naming our files.
    mapfile -t pids < <(our_processes | grep -v -x -F "$(read_pid "$MUNGE_DIR/munged.pid")" || true)
    stop_pids "${pids[@]}"
    stop_pids "$(read_pid "$MUNGE_DIR/munged.pid")"
    mapfile -t pids < <(our_processes)
    stop_pids "${pids[@]}"
    if [[ -L $STATE ]]; then rm -f "$STATE"; elif [[ -e $STATE ]]; then rm -rf "$STATE"; fi
}

# ---- up --------------------------------------------------------------------------------

start_munge() {
    local munged mungekey k
    munged=$(find_tool munged munge)
    mkdir -p -m 711 "$MUNGE_DIR"
    if command -v mungekey >/dev/null || [[ -x /usr/sbin/mungekey ]]; then
        mungekey=$(find_tool mungekey munge)
        "$mungekey" --create --keyfile="$MUNGE_DIR/munge.key"
    else
        dd if=/dev/urandom of="$MUNGE_DIR/munge.key" bs=1 count=1024 status=none
    fi
    chmod 0400 "$MUNGE_DIR/munge.key"
    # As root munged needs --force; the key and socket are root's, as every job here is.
    "$munged" --force --socket="$MUNGE_SOCKET" --key-file="$MUNGE_DIR/munge.key" \
        --pid-file="$MUNGE_DIR/munged.pid" --log-file="$MUNGE_DIR/munged.log" \
        --seed-file="$MUNGE_DIR/munged.seed" \
        || { tail -n 20 "$MUNGE_DIR/munged.log" >&2 2>/dev/null || true; die "munged did not start"; }
    for ((k = 0; k < 100; k++)); do
        [[ -S $MUNGE_SOCKET ]] && pid_alive "$(read_pid "$MUNGE_DIR/munged.pid")" && return 0
        sleep 0.05
    done
    die "munged did not open $MUNGE_SOCKET; log: $MUNGE_DIR/munged.log"
}

# A TCP port on this machine nobody listens on (slurmctld binds every address).
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

write_conf() {  # slurmctld port, slurmd port
    local ctld_port=$1 slurmd_port=$2 bridge_addr name addr
    bridge_addr=$(env_get BRIDGE_ADDRESS)
    : >"$STATE/plugstack.conf"   # no SPANK plugins (not /etc/slurm/plugstack.conf)
    {
        cat <<EOF
# Slurm of netns cluster $PREFIX, written by slurm-netns.sh; clients: SLURM_CONF=$CONF
ClusterName=rlmesh-$PREFIX
SlurmctldHost=$PREFIX-ctld($bridge_addr)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
PlugStackConfig=$STATE/plugstack.conf
StateSaveLocation=$CTLD_DIR/state
SlurmctldPidFile=$CTLD_DIR/slurmctld.pid
SlurmctldLogFile=$CTLD_DIR/slurmctld.log
SlurmdSpoolDir=$STATE/%n/spool
SlurmdPidFile=$STATE/%n/slurmd.pid
SlurmdLogFile=$STATE/%n/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# Every node shares this machine's CPUs: slurmd takes the declared hardware as given.
SlurmdParameters=config_overrides
# linuxproc finds a step's processes by parentage: portable (no cgroup set-up needed).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MpiDefault=none
SwitchType=switch/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
# Short timeouts: tests wait on them.
SlurmctldTimeout=10
SlurmdTimeout=10
MessageTimeout=5
TCPTimeout=2
KillWait=2
InactiveLimit=0
MinJobAge=30
EOF
        while IFS=$'\t' read -r _ addr name; do
            echo "NodeName=$name NodeAddr=$addr CPUs=$CPUS RealMemory=1000 State=UNKNOWN"
        done <"$NETNS_STATE/nodes.tsv"
        echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
    } >"$CONF"
}

start_slurmctld() {
    local slurmctld k
    slurmctld=$(find_tool slurmctld slurmctld)
    mkdir -p "$CTLD_DIR/state"
    unshare --uts sh -c 'echo "$1" >/proc/sys/kernel/hostname && exec "$2" -f "$3"' \
        sh "$PREFIX-ctld" "$slurmctld" "$CONF" \
        || { tail -n 20 "$CTLD_DIR/slurmctld.log" >&2 2>/dev/null || true; die "slurmctld did not start"; }
    for ((k = 0; k < 200; k++)); do
        if pid_alive "$(read_pid "$CTLD_DIR/slurmctld.pid")" \
            && SLURM_CONF=$CONF scontrol ping 2>/dev/null | grep -q 'is UP'; then
            return 0
        fi
        sleep 0.05
    done
    tail -n 20 "$CTLD_DIR/slurmctld.log" >&2 2>/dev/null || true
    die "slurmctld does not answer; log: $CTLD_DIR/slurmctld.log"
}

# slurmd of node $1 (its netns name, also its hostname and Slurm node name), in its network
# namespace and a UTS namespace with its hostname, exactly as netns-cluster.sh starts sshd.
start_slurmd() {
    local name=$1 slurmd
    slurmd=$(find_tool slurmd slurmd)
    mkdir -p "$STATE/$name/spool"
    # `ip netns exec` mounts a fresh /sys in a mount namespace of its own, without the cgroup
    # file systems; slurmd 22.05 refuses to start unless /sys/fs/cgroup holds a cgroup mount
    # or a tmpfs (cgroup v1's layout), even with no cgroup plugin configured: a tmpfs there,
    # seen only by this slurmd and its steps, satisfies it.
    ip netns exec "$name" unshare --uts sh -c \
        'echo "$1" >/proc/sys/kernel/hostname && mount -t tmpfs -o size=4k,mode=755 none /sys/fs/cgroup && mkdir /sys/fs/cgroup/systemd && mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd && exec "$2" -f "$3" -N "$1"' \
        sh "$name" "$slurmd" "$CONF" \
        || { tail -n 20 "$STATE/$name/slurmd.log" >&2 2>/dev/null || true; die "slurmd of $name did not start"; }
}

# Until sinfo shows every node idle (slurmd registered, ReturnToService made it usable).
wait_idle() {
    local want have k
    want=$(env_get NODES)
    for ((k = 0; k < 300; k++)); do
        have=$(SLURM_CONF=$CONF sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle"' | sort -u | wc -l)
        ((have == want)) && return 0
        sleep 0.1
    done
    SLURM_CONF=$CONF sinfo -N -l >&2 || true
    die "not every node became idle in 30 s; logs: $STATE/*/slurmd.log, $CTLD_DIR/slurmctld.log"
}

do_up() {
    local block ctld_port slurmd_port name
    [[ -f $NETNS_STATE/cluster.env && -f $NETNS_STATE/nodes.tsv ]] \
        || die "netns cluster $PREFIX is not up: run 'deploy/netns-cluster.sh up N --prefix $PREFIX' first"
    for tool in sinfo scontrol srun sbatch; do find_tool "$tool" slurm-client >/dev/null; done
    # Ports from the cluster's /27 block (bridge address .1, .33, ... .225: blocks 0 to 7).
    block=$((($(env_get BRIDGE_ADDRESS | cut -d. -f4) - 1) / 32))
    ctld_port=$((16817 + 2 * block)); slurmd_port=$((ctld_port + 1))
    port_free "$ctld_port" || die "port $ctld_port (slurmctld of cluster $PREFIX) is taken on this machine"

    UP_DONE=0
    trap '[[ $UP_DONE == 1 ]] || { say "up failed: stopping what was started"; do_down; }' EXIT
    mkdir -m 700 "$STATE"
    start_munge
    write_conf "$ctld_port" "$slurmd_port"
    start_slurmctld
    for name in $(node_names); do start_slurmd "$name"; done
    wait_idle
    UP_DONE=1
    print_status
}

# ---- status ----------------------------------------------------------------------------

all_running() {
    [[ -f $CONF ]] || return 1
    pid_alive "$(read_pid "$MUNGE_DIR/munged.pid")" || return 1
    pid_alive "$(read_pid "$CTLD_DIR/slurmctld.pid")" || return 1
    local name
    for name in $(node_names); do pid_alive "$(read_pid "$STATE/$name/slurmd.pid")" || return 1; done
}

print_status() {
    local name
    say "slurm of cluster $PREFIX: slurmctld pid $(read_pid "$CTLD_DIR/slurmctld.pid") on $(env_get BRIDGE_ADDRESS):$(sed -n 's/^SlurmctldPort=//p' "$CONF"), munged pid $(read_pid "$MUNGE_DIR/munged.pid")"
    for name in $(node_names); do
        echo "  $name slurmd pid $(read_pid "$STATE/$name/slurmd.pid")"
    done
    SLURM_CONF=$CONF sinfo -N -o '  %N %t %c' 2>&1 || true
    echo "  use:   export SLURM_CONF=$CONF"
    echo "  logs:  $CTLD_DIR/slurmctld.log, $STATE/NODE/slurmd.log"
}

# ---- actions ---------------------------------------------------------------------------

case $ACTION in
    up)
        if all_running; then
            say "slurm of cluster $PREFIX is already up"
            print_status
            exit 0
        fi
        if [[ -e $STATE ]] || [[ -n $(our_processes) ]]; then
            say "slurm of cluster $PREFIX was left half made: removing it first"
            do_down
        fi
        do_up
        ;;
    down)
        if [[ -e $STATE ]] || [[ -n $(our_processes) ]]; then do_down; say "slurm of cluster $PREFIX: down"
        else say "slurm of cluster $PREFIX: nothing to stop"; fi
        ;;
    status)
        if all_running; then print_status; exit 0
        elif [[ -e $STATE ]] || [[ -n $(our_processes) ]]; then
            say "slurm of cluster $PREFIX is half up or broken; '$0 down --prefix $PREFIX' removes it"
            exit 1
        else
            say "slurm of cluster $PREFIX is not up"
            exit 3
        fi
        ;;
esac
