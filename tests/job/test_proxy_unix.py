"""The proxy in front of servers on Unix sockets (deployment.unix_socket: a job's vLLM started
with --uds): the instance URL is "unix:<path>", requests reach the server over the socket, with
the cheap client (non-streamed), aiohttp's UnixConnector (streamed, /health probes, /metrics),
beside servers on ports; a socket that is gone is a server that is down."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from proxy_fakes import FakeUpstream, chat, running_proxy

from hpceval.job.proxy.balancer import Balancer
from hpceval.job.proxy.config import ProxyConfig
from hpceval.job.proxy.sessions import Sessions

MakeConfig = Callable[..., ProxyConfig]


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """Short, as the job's (a socket path must fit in 108 bytes; tmp_path may not)."""
    path = Path(tempfile.mkdtemp(prefix="uds-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def _post(base: str, body: dict[str, Any]) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.post(base + "/v1/chat/completions",
                                                    json=body) as r:
        return r.status, await r.text()


async def test_requests_reach_a_server_on_a_unix_socket_with_the_token(
        make_config: MakeConfig, socket_dir: Path) -> None:
    on_socket, on_port = FakeUpstream(), FakeUpstream()
    socket = str(socket_dir / "server-0.sock")
    urls = [await on_socket.start(unix=socket), await on_port.start()]
    try:
        assert urls[0] == f"unix:{socket}"
        config = make_config(urls, upstream_api_key="job-token", max_retries=0)
        async with running_proxy(config) as (server, base):
            answers = await asyncio.gather(*(_post(base, chat(f"q{i}")) for i in range(6)))
            streamed = await _post(base, chat("s", stream=True))
            async with aiohttp.ClientSession() as s, s.get(base + "/v1/models") as r:
                models = r.status, await r.json()
            sock_inst = server.balancer.instances[0]
            assert sock_inst.socket == socket and sock_inst.url == f"unix:{socket}"
            assert server._sessions is not None
            assert await server.balancer.probe(sock_inst, server._sessions)
    finally:
        await on_socket.stop()
        await on_port.stop()
    assert all(status == 200 for status, _ in answers), answers
    assert streamed[0] == 200 and "[DONE]" in streamed[1], streamed
    assert models == (200, {"object": "list", "data": [{"id": "m"}]})
    # both kinds of instance served: the balancer spreads over a socket and a port alike
    assert on_socket.hits >= 1 and on_port.hits >= 1 and on_socket.hits + on_port.hits == 7
    # the upstream token went over the socket, as over the port
    assert {h.get("Authorization") for h in on_socket.headers} == {"Bearer job-token"}


async def test_a_socket_that_is_gone_is_a_server_that_is_down(
        make_config: MakeConfig, socket_dir: Path) -> None:
    live = FakeUpstream()
    gone = str(socket_dir / "server-1.sock")  # nothing ever bound it
    url = await live.start(unix=str(socket_dir / "server-0.sock"))
    try:
        config = make_config([f"unix:{gone}", url], max_retries=0)
        async with running_proxy(config) as (server, base):
            for i in range(3):
                status, text = await _post(base, chat(f"q{i}"))
                assert status == 200, text
            dead = server.balancer.instances[0]
            assert not dead.up and "cannot connect" in (dead.last_error or ""), dead.snapshot()
    finally:
        await live.stop()
    assert live.hits == 3


async def test_the_probe_of_a_unix_socket_server_goes_over_its_socket(
        socket_dir: Path) -> None:
    fake = FakeUpstream()
    balancer = Balancer([await fake.start(unix=str(socket_dir / "s.sock"))])
    sessions = Sessions(trust_env=False)
    try:
        assert await balancer.probe(balancer.instances[0], sessions)
        fake.health_status = 503
        assert not await balancer.probe(balancer.instances[0], sessions)
    finally:
        await sessions.close()
        await fake.stop()
    assert fake.paths == ["/health", "/health"]


@pytest.mark.parametrize("url", ["unix:relative.sock", "unix:", "ftp://x"])
def test_an_upstream_that_is_no_url_nor_an_absolute_socket_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="upstream"):
        ProxyConfig(upstreams=(url,))
