"""What the dev cluster's site looks like to a test (scripts/slurm/net.sh): the address the nodes
reach the login host at, and each node's own. With SLURM_NETNS=1 (the default) every node is its
own network host on a bridge and has no default route; with SLURM_NETNS=0 every name is
127.0.0.1, as on the old kind cluster. Read from /etc/hosts, which the cluster script writes."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["OUTSIDE", "PROXY_LOG", "SCRATCH", "addresses", "login_address",
           "nodes_have_own_network", "proxy_url", "seen_from_login"]

MARK = "# slurm-local-cluster"
# The site's HTTP proxy on the login host (scripts/slurm/site_proxy.py): the nodes' only way
# out. Names under OUTSIDE are this machine's loopback as the proxy alone resolves them.
PROXY_LOG = Path("/var/log/slurm/site-proxy.log")
OUTSIDE = "api.outside.test"
# The site's shared scratch (scripts/slurm/node-tmp.sh): every node mounts it, as it would a
# parallel file system; each node's /tmp is its own.
SCRATCH = Path(os.environ.get("SLURM_SCRATCH", "/srv/scratch"))
NODE_TMP_ROOT = Path("/var/lib/hpceval-node-tmp")


def seen_from_login(node: str, path: str | Path) -> Path:
    """Where ``path`` of ``node`` is on this (login) host: a path in the node's own /tmp is in
    the node's folder here (node-tmp.sh); pytest's folders under /tmp, and everything else, are
    shared and at the same path."""
    p, own = Path(path), NODE_TMP_ROOT / node
    if not own.is_dir() or p.parts[:2] != ("/", "tmp") or (
            len(p.parts) > 2 and p.parts[2].startswith("pytest-of-")):
        return p
    return own.joinpath(*p.parts[2:])


def addresses() -> dict[str, str]:
    """Name -> address of the cluster's hosts (login, node1, ...) as start-cluster.sh wrote them."""
    found: dict[str, str] = {}
    try:
        text = Path("/etc/hosts").read_text(encoding="utf-8")
    except OSError:
        return found
    for line in text.splitlines():
        if not line.endswith(MARK):
            continue
        addr, *names = line[: -len(MARK)].split()
        found.update(dict.fromkeys(names, addr))
    return found


def nodes_have_own_network() -> bool:
    """True on the site in a box: node names resolve to bridge addresses, never to loopback."""
    node1 = addresses().get("node1", "127.0.0.1")
    return not node1.startswith("127.")


def login_address() -> str:
    """Where a job on a node reaches a server a test starts here: the login host's bridge
    address on the site in a box (a node's 127.0.0.1 is its own), else loopback."""
    return addresses().get("login", "127.0.0.1")


def proxy_url() -> str:
    """The site's HTTP proxy as jobs name it (https_proxy / http_proxy)."""
    return "http://login:3128"
