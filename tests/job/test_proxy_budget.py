"""The proxy's in-flight budget (ProxyConfig.budget, hpceval.job.proxy.budget) on real sockets."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from proxy_fakes import FakeUpstream, chat, running_proxy, running_upstreams

from hpceval.job.proxy.config import ProxyConfig

MakeConfig = Callable[..., ProxyConfig]


class CountingUpstream(FakeUpstream):
    """Records the most generation requests it held at once."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.now = self.peak = 0

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            return await super()._generate(request)
        finally:
            self.now -= 1


async def post_many(base: str, n: int) -> list[int]:
    async with aiohttp.ClientSession() as session:
        async def one(i: int) -> int:
            async with session.post(base + "/v1/chat/completions", json=chat(f"q{i}")) as r:
                await r.read()
                return r.status
        return list(await asyncio.gather(*(one(i) for i in range(n))))


async def test_fixed_budget_caps_requests_per_instance(make_config: MakeConfig) -> None:
    a, b = CountingUpstream(delay=0.1), CountingUpstream(delay=0.1)
    async with running_upstreams(a, b) as urls, \
            running_proxy(make_config(urls, budget="2")) as (server, base):
        statuses = await post_many(base, 16)
        assert server._forwarder is not None and server._forwarder.admission is not None
        assert server._forwarder.admission.inside == 0
    assert statuses == [200] * 16
    assert a.peak <= 2 and b.peak <= 2
    assert a.hits + b.hits == 16


async def test_without_a_budget_the_harness_parallelism_reaches_the_server(
        make_config: MakeConfig) -> None:
    a = CountingUpstream(delay=0.2)
    async with running_upstreams(a) as urls, running_proxy(make_config(urls)) as (server, base):
        assert server._forwarder is not None and server._forwarder.admission is None
        assert await post_many(base, 8) == [200] * 8
    assert a.peak == 8


async def test_adaptive_budget_answers_everything_and_learns_from_results(
        make_config: MakeConfig) -> None:
    a = CountingUpstream(delay=0.02)
    async with running_upstreams(a) as urls, \
            running_proxy(make_config(urls, budget="adaptive")) as (server, base):
        assert await post_many(base, 64) == [200] * 64
        assert server._forwarder is not None and server._forwarder.admission is not None
        limit = server._forwarder.admission.limit
    assert a.peak <= 32  # 8, doubled once per window of answers: never the 64 sent at once
    assert limit.value > 8  # no error, no queue signal: it grew


@pytest.mark.parametrize("budget", ["0", "-1", "many", ""])
def test_a_bad_budget_is_refused(make_config: MakeConfig, budget: str) -> None:
    with pytest.raises(ValueError, match="budget"):
        make_config(["http://127.0.0.1:9"], budget=budget)


async def test_tasks_waiting_behind_the_budget_take_turns(make_config: MakeConfig,
                                                          tmp_path: Any) -> None:
    """A task that floods the proxy must not keep another task's request waiting behind all of
    its own: each task's requests (their /task/<key>/ route) queue apart, served round-robin.
    (The queues were keyed by a header no harness sends, so every task shared one.)"""
    up = CountingUpstream(delay=0.2)
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, budget="1", tasks_dir=tmp_path)) as (_, base), \
            aiohttp.ClientSession() as session:
        async def one(task: str, i: int) -> int:
            async with session.post(f"{base}/task/{task}/v1/chat/completions",
                                    json=chat(f"{task}{i}")) as r:
                await r.read()
                return r.status
        flood = [asyncio.ensure_future(one("big", i)) for i in range(6)]
        await asyncio.sleep(0.1)  # the flood is queued
        assert await one("small", 0) == 200
        assert await asyncio.gather(*flood) == [200] * 6
    order = [body["messages"][0]["content"] for body in up.bodies]
    assert order.index("small0") <= 2, order  # not behind the whole flood


async def test_retries_are_counted_for_their_task_with_their_causes(
        make_config: MakeConfig, tmp_path: Any) -> None:
    from hpceval.results.runtime import read_runtime

    (tmp_path / "gsm8k").mkdir()
    up = FakeUpstream(fail=2, fail_status=503)
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, tasks_dir=tmp_path)) as (_, base), \
            aiohttp.ClientSession() as session, \
            session.post(f"{base}/task/gsm8k/v1/chat/completions", json=chat("q")) as r:
        assert r.status == 200
    stats = read_runtime(str(tmp_path / "gsm8k"))
    assert stats is not None
    assert (stats["retries"], stats["retry_causes"], stats["infra_errors"]) == (
        2, {"503 no server up": 2}, 0)
