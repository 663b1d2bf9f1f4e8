"""A per-peer share of the proxy's connections (review F5's open part: on loopback every local
user is 127.0.0.1, so there was only the total cap, and one uid could take every slot the
harness needed). Peers are told apart by uid from the kernel's socket table; a second uid is a
real one (`runuser -u nobody`)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
from collections.abc import Callable

import aiohttp
from proxy_fakes import FakeUpstream, chat, running_proxy, running_upstreams
from second_user import NOBODY_UID, RUNUSER, shared_scratch

from hpceval.job.proxy.config import ProxyConfig
from hpceval.job.proxy.peers import peer_key, proc_address

MakeConfig = Callable[..., ProxyConfig]
TOKEN = "job-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

# Opens N connections to the port one after the other and keeps them all open; for each, what
# the proxy did at once: "503" (answered and closed) or "open". System Python, stdlib only.
HOLDER = r"""
import json, socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
held, out = [], []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(0.5)
    try:
        data = s.recv(64)
        out.append(data.split(b" ")[1].decode() if data else "closed")
    except socket.timeout:
        out.append("open")
    held.append(s)
print(json.dumps(out), flush=True)
sys.stdin.read()  # held until the test is done with them
"""


def test_proc_address_spells_addresses_as_the_kernel_does() -> None:
    assert proc_address("127.0.0.1", 8080) == "0100007F:1F90"
    assert proc_address("::1", 80) == "00000000000000000000000001000000:0050"


def test_a_loopback_client_is_known_by_its_uid_another_one_by_its_address() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):
            conn, peer = server.accept()
            with conn:
                assert peer_key(peer, conn.getsockname()) == f"uid {os.getuid()}"
    # gone from the socket table (or not on loopback): known only by its address
    assert peer_key(("127.0.0.1", 1), ("127.0.0.1", 2), uids={}) == "address 127.0.0.1"
    assert peer_key(("10.1.2.3", 5), ("10.1.2.4", 80)) == "address 10.1.2.3"


async def _pushed_away(port: int) -> tuple[bool, asyncio.StreamWriter]:
    """Open one connection: whether the proxy answered 503 and closed it at once."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        data = await asyncio.wait_for(reader.read(64), 0.5)
    except TimeoutError:
        return False, writer
    return data.startswith(b"HTTP/1.1 503"), writer


async def test_one_uid_over_its_share_is_turned_away_while_the_harness_is_served(
        make_config: MakeConfig) -> None:
    up = FakeUpstream()
    with shared_scratch("hpceval-peers-") as scratch:
        script = scratch / "holder.py"
        script.write_text(HOLDER, encoding="utf-8")
        script.chmod(0o644)
        async with running_upstreams(up) as urls, running_proxy(make_config(
                urls, api_key=TOKEN, max_connections=100, max_connections_per_peer=3)) \
                as (server, base):
            mine = [await _pushed_away(server.port) for _ in range(3)]
            assert not any(refused for refused, _ in mine)
            assert RUNUSER is not None
            holder = await asyncio.to_thread(
                subprocess.Popen, [RUNUSER, "-u", "nobody", "--", "/usr/bin/python3",
                                   str(script), str(server.port), "5"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert holder.stdout is not None
            try:
                theirs = json.loads(await asyncio.to_thread(holder.stdout.readline))
                # this uid's fourth: over its share too, whatever the other holds
                refused, extra = await _pushed_away(server.port)
                for _, w in mine[:1]:
                    w.close()
                await asyncio.sleep(0.2)
                async with aiohttp.ClientSession() as s, s.post(
                        base + "/v1/chat/completions", headers=AUTH,
                        data=json.dumps(chat("ok")).encode()) as r:
                    status = r.status
            finally:
                holder.communicate("", timeout=10)
            for _, w in [*mine, (None, extra)]:
                w.close()
    assert theirs == ["open", "open", "open", "503", "503"]  # nobody: 3, its share
    assert refused
    assert status == 200  # the harness is served with the other uid's connections held
    assert os.getuid() != NOBODY_UID  # two uids, not one


def test_the_share_is_read_from_the_command_line() -> None:
    from hpceval.job.proxy.cli import build_parser, config_from_args

    base = ["--port", "0", "--upstream", "http://127.0.0.1:1", "--cache-dir", "/tmp/c",
            "--progress-file", "/tmp/p.json"]
    assert config_from_args(build_parser().parse_args(base)).max_connections_per_peer == 2048
    off = build_parser().parse_args([*base, "--max-connections-per-peer", "0"])
    assert config_from_args(off).max_connections_per_peer is None
