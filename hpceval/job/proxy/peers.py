"""Who is at the other end of a connection to the in-job proxy, for its per-peer cap.

On loopback every local user is 127.0.0.1, so an address says nothing about who connected. The
kernel knows: the client's socket is a line of /proc/net/tcp (or tcp6) whose local address is
the connection's peer address and whose remote address is the proxy's; its `uid` column is the
client's uid. A peer is therefore `uid N` on loopback and `address A` otherwise (or when the
line is gone: the client closed at once). Nothing here runs per request: the proxy asks only
while its connections outnumber one peer's share (proxy.guard.CappedServer).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from pathlib import Path

Endpoint = tuple[str, int]  # (host, port) as asyncio's peername/sockname give them
PROC_NET = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))


def proc_address(host: str, port: int) -> str:
    """`host:port` in /proc/net/tcp's spelling: each 32-bit word of the address in host
    (little-endian) order, in hex, then the port in hex."""
    ip = ipaddress.ip_address(host.split("%", 1)[0])
    packed = ip.packed
    words = "".join(f"{int.from_bytes(packed[i:i + 4], 'little'):08X}"
                    for i in range(0, len(packed), 4))
    return f"{words}:{port:04X}"


def socket_uids(files: Iterable[Path] = PROC_NET) -> dict[tuple[str, str], int]:
    """(local address, remote address) -> uid of every TCP socket in the network namespace."""
    out: dict[tuple[str, str], int] = {}
    for path in files:
        try:
            lines = path.read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 7 and fields[7].isdigit():
                out[(fields[1].upper(), fields[2].upper())] = int(fields[7])
    return out


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def peer_key(peer: Endpoint | None, local: Endpoint | None,
             uids: dict[tuple[str, str], int] | None = None) -> str:
    """`uid N` for a loopback client the kernel names, else `address A` (`unknown` without
    one). `uids`: a socket_uids() table read once for several connections."""
    if peer is None:
        return "unknown"
    host = str(peer[0])
    if local is not None and is_loopback(host):
        table = socket_uids() if uids is None else uids
        try:
            key = (proc_address(host, int(peer[1])), proc_address(str(local[0]), int(local[1])))
        except ValueError:
            key = ("", "")
        if key in table:
            return f"uid {table[key]}"
    return f"address {host}"


def endpoints(transport: socket.socket | object) -> tuple[Endpoint | None, Endpoint | None]:
    """(peer, local) of an asyncio transport (get_extra_info), None where it has none."""
    get = getattr(transport, "get_extra_info", None)
    if get is None:
        return None, None
    peer, local = get("peername"), get("sockname")
    return (tuple(peer[:2]) if isinstance(peer, tuple) else None,  # type: ignore[return-value]
            tuple(local[:2]) if isinstance(local, tuple) else None)
