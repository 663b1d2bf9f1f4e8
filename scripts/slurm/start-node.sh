#!/usr/bin/env bash
# start-node.sh NODE - start NODE's slurmd as the site in a box runs it: in NODE's network
# namespace when the cluster has one (scripts/slurm/net.sh; start-cluster.sh makes it), and in
# a UTS namespace of its own, so that `hostname` in a job is the node's name, and in a mount
# namespace of its own: the node's /tmp (node-tmp.sh) and, for a node whose own name resolves
# to loopback on it (net.sh), its hosts file. Used by
# start-cluster.sh for every node and by the node-failure drill to bring a killed slurmd back
# (tests/integration/node_drill.py): one way to start a node. Returns once slurmd has forked.
#   SLURM_UTS_NS (1)  0 = no UTS namespace
set -euo pipefail
node=${1:?usage: start-node.sh NODE}
# shellcheck source=scripts/slurm/net.sh
. "$(dirname "${BASH_SOURCE[0]}")/net.sh"
# shellcheck source=scripts/slurm/node-tmp.sh
. "$(dirname "${BASH_SOURCE[0]}")/node-tmp.sh"
enter=() spaces=() setup=""
if [ -e "$(net_ns_path "$node")" ]; then enter=(nsenter "--net=$(net_ns_path "$node")"); fi
if [ "${SLURM_UTS_NS:-1}" = 1 ] && unshare --uts true 2>/dev/null; then
  spaces+=(--uts) setup="hostname $node && "
fi
# a node whose own name resolves to 127.0.1.1 on it (net.sh, NET_LOOPBACK_NAME_NODES): its
# hosts file over /etc/hosts, for its slurmd and its jobs alone
hosts=$(net_node_hosts "$node")
mounts=""
[ -s "$hosts" ] && mounts+="mount --bind $hosts /etc/hosts && "
if [ "$NODE_TMP" = 1 ]; then
  node_tmp_prepare "$node"
  mounts+=$(node_tmp_mounts "$node")
fi
if [ -n "$mounts" ]; then
  # slave: mounts made here below a shared folder reach the node; none of the node's come back
  spaces+=(--mount --propagation slave) setup+=$mounts
fi
if [ "${#spaces[@]}" -gt 0 ]; then
  exec "${enter[@]}" unshare "${spaces[@]}" sh -c "${setup}exec /usr/sbin/slurmd -N $node"
fi
exec "${enter[@]}" /usr/sbin/slurmd -N "$node"
