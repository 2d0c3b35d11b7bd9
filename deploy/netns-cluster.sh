#!/usr/bin/env bash
# A cluster of N "nodes" on one machine, for multi-node tests: each node is a Linux network
# namespace with its own address, hostname and sshd, reachable from this machine over a bridge.
#
#   deploy/netns-cluster.sh up [N] [--prefix NAME]     make N nodes (default 3), print them
#   deploy/netns-cluster.sh status [--prefix NAME]     show the nodes and their sshd
#   deploy/netns-cluster.sh restart NODE [--prefix NAME]  restart one node's sshd (e.g. node2)
#   deploy/netns-cluster.sh down [--prefix NAME]       stop everything, remove every trace
#
# Run as root. NAME defaults to "rlmesh". Every address lives in 10.213.0.0/24, which is cut
# into eight /27 blocks: one a cluster (the bridge on .1 of its block, nodes after it), so
# up to 8 clusters of up to 29 nodes each run side by side. Nodes have no default route:
# they reach each other and this machine (the bridge address), nothing else.
# State (keys, sshd configs, logs, ssh_config, known_hosts) lives in /tmp/rlmesh-netns-NAME/
# ($RLMESH_NETNS_STATE_ROOT instead of /tmp); then, for example:
#   ssh -F /tmp/rlmesh-netns-rlmesh/ssh_config node1 hostname
set -euo pipefail

readonly NET=10.213.0        # the /24 every cluster's block lies in
readonly BLOCK_SIZE=32       # a /27 a cluster
readonly BLOCK_BITS=27
readonly MAX_NODES=29        # block size less network, bridge and broadcast addresses
readonly LOCK_FILE=/run/rlmesh-netns.lock

die() { echo "netns-cluster: error: $*" >&2; exit 1; }
say() { echo "netns-cluster: $*"; }

usage() {
    sed -n '5,8p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# ---- arguments -------------------------------------------------------------------------

ACTION=${1:-}
[[ -n $ACTION ]] || usage
shift
PREFIX=rlmesh
NODES=3
NODE_ARG=""
while (($#)); do
    case $1 in
        --prefix) (($# >= 2)) || die "--prefix needs a value"; PREFIX=$2; shift 2 ;;
        --prefix=*) PREFIX=${1#--prefix=}; shift ;;
        -h|--help) usage ;;
        -*) die "unknown option $1" ;;
        *) [[ -z $NODE_ARG ]] || die "unexpected argument $1"; NODE_ARG=$1; shift ;;
    esac
done
case $ACTION in
    up) if [[ -n $NODE_ARG ]]; then NODES=$NODE_ARG; fi
        [[ $NODES =~ ^[0-9]+$ ]] && ((NODES >= 1 && NODES <= MAX_NODES)) \
            || die "the number of nodes must be 1 to $MAX_NODES, not '$NODES'" ;;
    restart) [[ $NODE_ARG =~ ^node[0-9]+$ ]] || die "restart needs a node name, e.g. node2" ;;
    down|status) [[ -z $NODE_ARG ]] || die "$ACTION takes no argument but --prefix" ;;
    *) usage ;;
esac
# Interface names have at most 15 characters: "<prefix>-h29" must fit.
[[ $PREFIX =~ ^[a-z][a-z0-9-]{0,9}$ ]] \
    || die "--prefix must be 1 to 10 characters of a-z, 0-9 and '-', starting with a letter"

readonly BRIDGE="$PREFIX-br"
readonly STATE="${RLMESH_NETNS_STATE_ROOT:-/tmp}/rlmesh-netns-$PREFIX"
netns_of() { echo "$PREFIX-node$1"; }   # also the node's hostname
veth_of() { echo "$PREFIX-h$1"; }        # host end; the node's end is its eth0

# ---- environment checks ----------------------------------------------------------------

[[ $(id -u) == 0 ]] || die "must run as root (network namespaces need CAP_SYS_ADMIN); try: sudo $0 $ACTION ..."
command -v ip >/dev/null || die "'ip' not found: install iproute2 (apt-get install iproute2)"
SSHD=$(command -v sshd || true)
[[ -n $SSHD ]] || { [[ -x /usr/sbin/sshd ]] && SSHD=/usr/sbin/sshd; } \
    || die "'sshd' not found: install openssh-server (apt-get install openssh-server)"
for tool in ssh ssh-keygen unshare timeout; do
    command -v "$tool" >/dev/null || die "'$tool' not found (openssh-client, util-linux, coreutils)"
done

# One up/down/restart at a time on this machine: two clusters starting together would
# otherwise pick the same address block.
if [[ $ACTION != status ]] && command -v flock >/dev/null; then
    exec 9>"$LOCK_FILE"
    flock -w 60 9 || die "another netns-cluster.sh is still running (lock $LOCK_FILE)"
fi

# ---- inspection ------------------------------------------------------------------------

our_namespaces() { ip netns list | awk '{print $1}' | grep -E "^$PREFIX-node[0-9]+\$" || true; }
our_veths() {
    ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' \
        | grep -E "^$PREFIX-h[0-9]+\$" || true
}
link_exists() { ip link show "$1" >/dev/null 2>&1; }
pid_alive() { [[ -n $1 ]] && kill -0 "$1" 2>/dev/null; }
env_get() { sed -n "s/^$1=//p" "$STATE/cluster.env" 2>/dev/null; }
sshd_pid() { cat "$STATE/node$1/sshd.pid" 2>/dev/null || true; }

# shellcheck disable=SC2086  # splitting "a.b.c.d" on the dots is the point
ip2int() { local IFS=.; set -- $1; echo $((($1 << 24) | ($2 << 16) | ($3 << 8) | $4)); }

# The first /27 of 10.213.0.0/24 that no route on this machine touches (another cluster's
# bridge, or anyone else's network). Prints its first address's last octet.
free_block() {
    local routes block lo hi dst net bits first last
    routes=$(ip -4 route show table all | awk '
        $1 ~ /^(local|broadcast|unicast|unreachable|blackhole|prohibit|throw|nat|anycast|multicast)$/ {print $2; next}
        {print $1}' | grep -E '^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+(/[0-9]+)?$' || true)
    for ((block = 0; block < 256; block += BLOCK_SIZE)); do
        lo=$(ip2int "$NET.$block"); hi=$((lo + BLOCK_SIZE - 1))
        local clash=0
        for dst in $routes; do
            net=${dst%/*}; bits=32; [[ $dst == */* ]] && bits=${dst#*/}
            ((bits == 0)) && continue    # a default route covers everything; ours is more specific
            first=$(($(ip2int "$net") & (0xFFFFFFFF << (32 - bits)) & 0xFFFFFFFF))
            last=$((first + (1 << (32 - bits)) - 1))
            if ((first <= hi && last >= lo)); then clash=1; break; fi
        done
        ((clash)) || { echo "$block"; return 0; }
    done
    return 1
}

# A cluster is complete when its state, bridge, namespaces and every sshd are all there.
cluster_complete() {
    [[ -f $STATE/cluster.env ]] || return 1
    local n; n=$(env_get NODES)
    [[ -n $n ]] && link_exists "$BRIDGE" || return 1
    local i
    for ((i = 1; i <= n; i++)); do
        ip netns list | awk '{print $1}' | grep -qx "$(netns_of "$i")" || return 1
        pid_alive "$(sshd_pid "$i")" || return 1
    done
}

anything_left() {
    [[ -e $STATE ]] || link_exists "$BRIDGE" || [[ -n $(our_namespaces) ]] || [[ -n $(our_veths) ]]
}

# ---- firewall --------------------------------------------------------------------------

# Where br_netfilter is loaded, node-to-node frames cross iptables' FORWARD chain, and hosts
# with Docker set its policy to DROP. One ACCEPT rule for traffic within our bridge only.
bridge_filtered() {
    [[ $(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null || echo 0) == 1 ]] \
        && command -v iptables >/dev/null
}
firewall_open() {
    if bridge_filtered; then
        iptables -w -I FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null \
            || say "warning: could not add an iptables FORWARD rule for $BRIDGE"
    fi
}
firewall_close() {
    if command -v iptables >/dev/null; then
        while iptables -w -D FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null; do :; done
    fi
}

# ---- down ------------------------------------------------------------------------------

# Every process whose network namespace is $1: TERM, then KILL what is left after 2 s.
kill_namespace_processes() {
    local ns=$1 pids i
    mapfile -t pids < <(ip netns pids "$ns" 2>/dev/null || true)
    ((${#pids[@]})) || return 0
    kill -TERM "${pids[@]}" 2>/dev/null || true
    for ((i = 0; i < 40; i++)); do
        mapfile -t pids < <(ip netns pids "$ns" 2>/dev/null || true)
        ((${#pids[@]})) || return 0
        if ((i == 20)); then kill -KILL "${pids[@]}" 2>/dev/null || true; fi
        sleep 0.1
    done
    say "warning: processes ${pids[*]} in $ns survived SIGKILL"
}

do_down() {
    local ns veth
    for ns in $(our_namespaces); do
        kill_namespace_processes "$ns"
        ip netns del "$ns" 2>/dev/null || true
    done
    for veth in $(our_veths); do ip link del "$veth" 2>/dev/null || true; done
    firewall_close
    if link_exists "$BRIDGE"; then ip link del "$BRIDGE"; fi
    # Refuse to follow a symlink planted in /tmp.
    if [[ -L $STATE ]]; then rm -f "$STATE"; elif [[ -e $STATE ]]; then rm -rf "$STATE"; fi
}

# ---- up --------------------------------------------------------------------------------

write_sshd_config() {  # node index, address
    local i=$1 addr=$2 dir="$STATE/node$1"
    cat >"$dir/sshd_config" <<EOF
# sshd of node$i ($(netns_of "$i")) in netns cluster $PREFIX, written by netns-cluster.sh
ListenAddress $addr:22
HostKey $dir/ssh_host_ed25519_key
PidFile $dir/sshd.pid
AuthorizedKeysFile $STATE/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# The state dir lies under /tmp, which is world-writable: StrictModes would refuse the keys.
StrictModes no
X11Forwarding no
PrintMotd no
PrintLastLog no
UseDNS no
# A launcher opens many sessions at once.
MaxStartups 100:30:200
MaxSessions 64
LogLevel VERBOSE
Subsystem sftp internal-sftp
EOF
    # OpenSSH >= 9.8 penalises a source address after failed logins: every connection here
    # comes from the bridge address, so one failed test would lock out the next ones.
    if "$SSHD" -t -f "$dir/sshd_config" -o PerSourcePenalties=no 2>/dev/null; then
        echo "PerSourcePenalties no" >>"$dir/sshd_config"
    fi
    "$SSHD" -t -f "$dir/sshd_config" || die "sshd rejects $dir/sshd_config"
}

# Start node $1's sshd in its namespace, with its own hostname (a UTS namespace of its own).
start_sshd() {
    local i=$1 dir="$STATE/node$1" ns; ns=$(netns_of "$1")
    rm -f "$dir/sshd.pid"
    ip netns exec "$ns" unshare --uts sh -c \
        'echo "$1" >/proc/sys/kernel/hostname && exec "$2" -f "$3" -E "$4"' \
        sh "$ns" "$SSHD" "$dir/sshd_config" "$dir/sshd.log" 9>&- \
        || { tail -n 20 "$dir/sshd.log" >&2 2>/dev/null || true; die "sshd of node$i did not start"; }
}

# Wait for node $1's sshd to write its pid file (it does so once it listens) and to accept.
wait_sshd() {
    local i=$1 addr=$2 dir="$STATE/node$1" k
    for ((k = 0; k < 100; k++)); do
        if pid_alive "$(sshd_pid "$i")" && ip netns exec "$(netns_of "$i")" \
            timeout 2 bash -c "exec 3<>/dev/tcp/$addr/22" 2>/dev/null; then
            return 0
        fi
        sleep 0.05
    done
    tail -n 20 "$dir/sshd.log" >&2 2>/dev/null || true
    die "sshd of node$i ($addr) is not accepting connections; log: $dir/sshd.log"
}

write_client_files() {  # addresses...
    local addrs=("$@") i hosts="" line
    : >"$STATE/known_hosts"
    {
        echo "# netns cluster $PREFIX: ssh -F $STATE/ssh_config node1"
        for ((i = 1; i <= NODES; i++)); do
            line="node$i $(netns_of "$i") ${addrs[i - 1]}"
            hosts+=" $line"
            printf 'Host %s\n    HostName %s\n' "$line" "${addrs[i - 1]}"
            echo "${addrs[i - 1]} $(cut -d' ' -f1,2 "$STATE/node$i/ssh_host_ed25519_key.pub")" \
                >>"$STATE/known_hosts"
        done
        cat <<EOF
Host$hosts
    User root
    Port 22
    IdentityFile $STATE/id_ed25519
    IdentitiesOnly yes
    UserKnownHostsFile $STATE/known_hosts
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    CheckHostIP no
    BatchMode yes
    ConnectTimeout 5
    LogLevel ERROR
EOF
    } >"$STATE/ssh_config"
}

print_cluster() {
    local line
    say "cluster $PREFIX: $(env_get NODES) node(s); this machine is $(env_get BRIDGE_ADDRESS) on bridge $BRIDGE"
    while IFS=$'\t' read -r -a line; do
        printf '  %-7s %-13s netns %s\n' "${line[0]}" "${line[1]}" "${line[2]}"
    done <"$STATE/nodes.tsv"
    echo "  ssh:   ssh -F $STATE/ssh_config node1 hostname"
    echo "  shell: ip netns exec $(netns_of 1) bash"
    echo "  state: $STATE (known_hosts, id_ed25519, nodeN/sshd.log)"
}

do_up() {
    local block bridge_addr i ns veth addr addrs=()
    block=$(free_block) || die "no free /$BLOCK_BITS left in $NET.0/24 (other clusters, or a route of this machine, use them all); see: ip -4 route"
    bridge_addr="$NET.$((block + 1))"

    # Anything that fails from here on leaves nothing behind.
    UP_DONE=0
    trap '[[ $UP_DONE == 1 ]] || { say "up failed: removing what was made"; do_down; }' EXIT

    mkdir -m 700 "$STATE"
    ssh-keygen -q -t ed25519 -N '' -C "rlmesh-netns-$PREFIX-client" -f "$STATE/id_ed25519"
    cp "$STATE/id_ed25519.pub" "$STATE/authorized_keys"
    mkdir -p /run/sshd && chmod 0755 /run/sshd   # sshd's privilege-separation directory

    ip link add "$BRIDGE" type bridge
    ip addr add "$bridge_addr/$BLOCK_BITS" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    firewall_open

    : >"$STATE/nodes.tsv"
    for ((i = 1; i <= NODES; i++)); do
        ns=$(netns_of "$i"); veth=$(veth_of "$i"); addr="$NET.$((block + 1 + i))"
        addrs+=("$addr")
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ip link add "$veth" type veth peer name eth0 netns "$ns"
        ip link set "$veth" master "$BRIDGE" up
        ip -n "$ns" addr add "$addr/$BLOCK_BITS" dev eth0
        ip -n "$ns" link set eth0 up
        mkdir -m 700 "$STATE/node$i"
        ssh-keygen -q -t ed25519 -N '' -C "node$i.$PREFIX" -f "$STATE/node$i/ssh_host_ed25519_key"
        write_sshd_config "$i" "$addr"
        start_sshd "$i"
        printf 'node%s\t%s\t%s\n' "$i" "$addr" "$ns" >>"$STATE/nodes.tsv"
    done
    for ((i = 1; i <= NODES; i++)); do wait_sshd "$i" "${addrs[i - 1]}"; done
    write_client_files "${addrs[@]}"
    cat >"$STATE/cluster.env" <<EOF
PREFIX=$PREFIX
NODES=$NODES
BRIDGE=$BRIDGE
BRIDGE_ADDRESS=$bridge_addr
SUBNET=$NET.$block/$BLOCK_BITS
NODE_ADDRESSES="${addrs[*]}"
SSH_CONFIG=$STATE/ssh_config
KNOWN_HOSTS=$STATE/known_hosts
IDENTITY_FILE=$STATE/id_ed25519
EOF

    # Prove the paths the tests rely on: this machine logs in to each node (all at once: a
    # login takes ~0.3 s), and node1 reaches every other node over the bridge.
    local logins=()
    for ((i = 1; i <= NODES; i++)); do
        ssh -F "$STATE/ssh_config" "node$i" true 9>&- & logins+=($!)
    done
    for ((i = 1; i <= NODES; i++)); do
        wait "${logins[i - 1]}" \
            || die "cannot ssh to node$i (${addrs[i - 1]}); log: $STATE/node$i/sshd.log"
        if ((i > 1)) && ! ip netns exec "$(netns_of 1)" \
            timeout 3 bash -c "exec 3<>/dev/tcp/${addrs[i - 1]}/22" 2>/dev/null; then
            die "node1 cannot reach node$i over bridge $BRIDGE: a firewall may drop bridged traffic (see: iptables -S FORWARD, nft list ruleset)"
        fi
    done
    UP_DONE=1
    print_cluster
}

# ---- actions ---------------------------------------------------------------------------

case $ACTION in
    up)
        if cluster_complete; then
            have=$(env_get NODES)
            [[ $have == "$NODES" ]] \
                || die "cluster $PREFIX is already up with $have node(s); run '$0 down --prefix $PREFIX' first"
            say "cluster $PREFIX is already up"
            print_cluster
            exit 0
        fi
        if anything_left; then
            say "cluster $PREFIX was left half made: removing it first"
            do_down
        fi
        do_up
        ;;
    down)
        if anything_left; then do_down; say "cluster $PREFIX: down"
        else say "cluster $PREFIX: nothing to remove"; fi
        ;;
    restart)
        i=${NODE_ARG#node}
        [[ -f $STATE/node$i/sshd_config ]] || die "cluster $PREFIX has no $NODE_ARG (is it up?)"
        pid=$(sshd_pid "$i")
        if pid_alive "$pid"; then
            kill -TERM "$pid"
            for ((k = 0; k < 50; k++)); do pid_alive "$pid" || break; sleep 0.05; done
            pid_alive "$pid" && kill -KILL "$pid"
        fi
        start_sshd "$i"
        addr=$(awk -v n="$NODE_ARG" '$1 == n {print $2}' "$STATE/nodes.tsv")
        wait_sshd "$i" "$addr"
        say "cluster $PREFIX: sshd of $NODE_ARG restarted (pid $(sshd_pid "$i"))"
        ;;
    status)
        others=$(find "$(dirname "$STATE")" -maxdepth 1 -name 'rlmesh-netns-*' -printf '%f\n' 2>/dev/null \
            | sed 's/^rlmesh-netns-//' | grep -vx "$PREFIX" | tr '\n' ' ' || true)
        if cluster_complete; then
            print_cluster
            while IFS=$'\t' read -r name addr _; do
                pid=$(sshd_pid "${name#node}")
                echo "  $name sshd pid $pid, $(ip netns pids "$(netns_of "${name#node}")" | wc -l) process(es)"
            done <"$STATE/nodes.tsv"
            code=0
        elif anything_left; then
            say "cluster $PREFIX is half made or broken; '$0 down --prefix $PREFIX' removes it"
            code=1
        else
            say "cluster $PREFIX is not up"
            code=3
        fi
        [[ -z ${others// /} ]] || say "other clusters on this machine: $others"
        exit "$code"
        ;;
esac
