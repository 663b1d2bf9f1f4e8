# shellcheck shell=bash
# shellcheck disable=SC2034  # NET_ERROR is read by the scripts that source this file
# The site's network (sourced by start-cluster.sh, stop-cluster.sh and tests' helpers, not run).
#
# Each compute node is its own network host, as on a real site: a network namespace
# hpceval-<node> whose only interface besides its loopback is eth0, a veth pair's end with the
# address $NET_PREFIX.(10+I) on the bridge $NET_BRIDGE. The bridge's own address, $NET_PREFIX.1,
# is the "login" host: this machine's own namespace, where the user's shell, slurmctld and
# slurmdbd run. Inside a node only the site's /24 is routable: no default route, no internet,
# no package registry, and its loopback is its own (a node's name never resolves to it).
# The /24 is from 198.18.0.0/15, which RFC 2544 reserves for benchmarks: no real network here
# uses it, and no traffic leaves the namespaces and the bridge made here.

NET_PREFIX=${NET_PREFIX:-198.18.0}
NET_BRIDGE=${NET_BRIDGE:-hpceval0}
NET_ERROR=""

net_login_addr() { echo "$NET_PREFIX.1"; }
# node_addr I -> nodeI's address (127.0.0.1 when the nodes share this machine's network)
node_addr() { if [ "${NETNS:-1}" = 1 ]; then echo "$NET_PREFIX.$((10 + $1))"; else echo 127.0.0.1; fi; }
net_ns_name() { echo "hpceval-$1"; }
net_ns_path() { echo "/run/netns/$(net_ns_name "$1")"; }
# host side of nodeI's veth pair (interface names are at most 15 characters)
net_veth() { echo "hpcv-$1"; }

# Nodes whose own name resolves to a loopback address on the node itself, as Debian's and
# Ubuntu's installers and cloud-init write it ("127.0.1.1 <hostname>" in /etc/hosts): a real
# site's most common surprise for software that advertises "the node's address". Each such node
# sees a hosts file of its own (net_node_hosts: that line first, then the site's), bind-mounted
# over /etc/hosts in a mount namespace of its slurmd's (start-node.sh); every other host
# resolves the node to its bridge address.
NET_LOOPBACK_NAME_NODES=${SLURM_LOOPBACK_NAME_NODES-node2}
NET_HOSTS_DIR=/run/hpceval-hosts
net_node_hosts() { echo "$NET_HOSTS_DIR/$1"; }
net_self_loopback() { case " $NET_LOOPBACK_NAME_NODES " in *" $1 "*) return 0 ;; esac; return 1; }

# net_node_hosts_write NODE... -> each node named in NET_LOOPBACK_NAME_NODES gets its own hosts
# file (from /etc/hosts as it is now); the others' are removed. Rewritten in place: a running
# slurmd's bind mount keeps the same file.
net_node_hosts_write() {
  local n file
  mkdir -p "$NET_HOSTS_DIR"
  for n in "$@"; do
    file=$(net_node_hosts "$n")
    if net_self_loopback "$n"; then
      { echo "127.0.1.1 $n # this node's own name, as Debian's installer writes it (net.sh)"
        cat /etc/hosts; } > "$file.tmp"
      cat "$file.tmp" > "$file"; rm -f "$file.tmp"
    else
      rm -f "$file"
    fi
  done
}

# net_node_hosts_ok NODE PID -> true when PID sees the hosts file NODE should see: its own
# (bound over /etc/hosts in its mount namespace) for a node that has one, this machine's otherwise
net_node_hosts_ok() {
  local want=/etc/hosts
  [ -s "$(net_node_hosts "$1")" ] && want=$(net_node_hosts "$1")
  [ "$(stat -c %d:%i "/proc/$2/root/etc/hosts" 2>/dev/null)" = "$(stat -c %d:%i "$want")" ]
}

# net_hosts_lines NODE... -> /etc/hosts lines naming login and every node by its own address
net_hosts_lines() {
  local n
  echo "$(net_login_addr) login # slurm-local-cluster"
  for n in "$@"; do echo "$(node_addr "${n#node}") $n # slurm-local-cluster"; done
}

# net_check -> true when this machine lets root make namespaces, veth pairs and bridges;
# else NET_ERROR names what is missing
net_check() {
  command -v ip >/dev/null || { NET_ERROR="no 'ip' command (Debian: iproute2)"; return 1; }
  command -v nsenter >/dev/null || { NET_ERROR="no 'nsenter' (Debian: util-linux)"; return 1; }
  unshare --net true 2>/dev/null || { NET_ERROR="unshare --net is refused (no CAP_SYS_ADMIN, or user namespaces only)"; return 1; }
  if ! ip link show "$NET_BRIDGE" >/dev/null 2>&1; then
    ip link add hpceval-probe type bridge 2>/dev/null \
      || { NET_ERROR="'ip link add type bridge' is refused (no bridge module, or no CAP_NET_ADMIN)"; return 1; }
    ip link del hpceval-probe
  fi
  return 0
}

# net_bridge_up -> the bridge exists, is up and holds the login address (idempotent)
net_bridge_up() {
  ip link show "$NET_BRIDGE" >/dev/null 2>&1 || ip link add "$NET_BRIDGE" type bridge \
    || { NET_ERROR="cannot add bridge $NET_BRIDGE"; return 1; }
  ip addr replace "$(net_login_addr)/24" dev "$NET_BRIDGE" || { NET_ERROR="cannot address $NET_BRIDGE"; return 1; }
  ip link set "$NET_BRIDGE" up
}

# net_node_up NODE I -> NODE's namespace, veth pair, address and loopback exist and are up,
# on the bridge (net_bridge_up first; idempotent: only what is missing is made)
net_node_up() {
  local node=$1 i=$2 ns veth
  ns=$(net_ns_name "$node"); veth=$(net_veth "$node")
  [ -e "$(net_ns_path "$node")" ] || ip netns add "$ns" || { NET_ERROR="cannot add namespace $ns"; return 1; }
  if ! ip -n "$ns" link show eth0 >/dev/null 2>&1; then
    ip link del "$veth" 2>/dev/null || true   # a half-made pair of a crashed start
    if ! { ip link add "$veth" type veth peer name "$veth-n" && ip link set "$veth-n" netns "$ns" \
           && ip -n "$ns" link set "$veth-n" name eth0; }; then
      NET_ERROR="cannot add veth pair $veth"; return 1
    fi
  fi
  if ! { ip link set "$veth" master "$NET_BRIDGE" && ip link set "$veth" up \
         && ip -n "$ns" addr replace "$(node_addr "$i")/24" dev eth0 \
         && ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up; }; then
    NET_ERROR="cannot bring up $ns's eth0"; return 1
  fi
}

# net_node_ok NODE PID -> true when PID runs in NODE's namespace
net_node_ok() {
  local ns_file pid=$2
  ns_file=$(net_ns_path "$1")
  [ -e "$ns_file" ] && [ "$(stat -L -c %i "$ns_file")" = "$(stat -L -c %i "/proc/$pid/ns/net" 2>/dev/null)" ]
}

# net_down NODE... -> the namespaces, veth pairs and bridge made here are gone (each slurmd and
# job in a namespace must have stopped first: a namespace lives on while a process holds it)
net_down() {
  local n
  for n in "$@"; do
    ip link del "$(net_veth "$n")" 2>/dev/null || true
    ip netns del "$(net_ns_name "$n")" 2>/dev/null || true
  done
  ip link del "$NET_BRIDGE" 2>/dev/null || true
  rm -rf "$NET_HOSTS_DIR"
}
