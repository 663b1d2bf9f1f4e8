"""The proxy's hold (evaluation.overlap_load): requests wait, unforwarded, until the job's
signal that every instance serves; bounded in time; a client that left is not forwarded."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable

import aiohttp
from proxy_fakes import FakeUpstream, chat, running_proxy, running_upstreams

from hpceval.job.proxy.cli import build_parser, config_from_args
from hpceval.job.proxy.config import ProxyConfig

MakeConfig = Callable[..., ProxyConfig]


async def _post(base: str, timeout: float = 10.0) -> tuple[int, str]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s, \
            s.post(base + "/v1/chat/completions", json=chat("q")) as r:
        return r.status, await r.text()


async def test_held_requests_reach_no_instance_until_released(make_config: MakeConfig) -> None:
    up = FakeUpstream()
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, hold=30.0)) as (server, base):
        async with aiohttp.ClientSession() as s, s.get(base + "/health") as r:
            health = await r.json()
        assert r.status == 200 and health["status"] == "loading"
        pending = [asyncio.ensure_future(_post(base)) for _ in range(3)]
        while server.hold.held < 3:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        assert up.hits == 0 and not any(p.done() for p in pending)
        # nothing is in flight for the busy record while held: the server is not asked yet
        assert server.progress.first_at is None
        server.hold.release()
        results = await asyncio.gather(*pending)
    assert [status for status, _ in results] == [200, 200, 200]
    assert up.hits == 3 and server.hold.held == 0


async def test_a_hold_past_its_limit_answers_503_and_forwards_nothing(
        make_config: MakeConfig) -> None:
    up = FakeUpstream()
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, hold=0.3)) as (_, base):
        status, text = await _post(base)
    assert status == 503 and "not ready 0.3 s after" in json.loads(text)["error"]["message"]
    assert up.hits == 0


async def test_a_client_that_left_while_held_is_not_forwarded(make_config: MakeConfig) -> None:
    up = FakeUpstream()
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, hold=30.0)) as (server, base):
        with contextlib.suppress(asyncio.TimeoutError):  # a harness's timeout, < the load
            await _post(base, timeout=0.3)
        while server.hold.dropped < 1:  # noticed within a check (proxy.hold.CHECK_S)
            await asyncio.sleep(0.05)
        server.hold.release()
        assert (await _post(base))[0] == 200  # its retry goes through
    assert up.hits == 1


async def test_without_hold_nothing_waits(make_config: MakeConfig) -> None:
    up = FakeUpstream()
    async with running_upstreams(up) as urls, running_proxy(make_config(urls)) as (server, base):
        assert not server.hold.active
        assert (await _post(base))[0] == 200


def test_hold_option_reaches_the_config() -> None:
    args = build_parser().parse_args(["--port", "1", "--upstream", "http://h:1", "--cache-dir",
                                      "c", "--progress-file", "p", "--hold", "90"])
    assert config_from_args(args).hold == 90.0
