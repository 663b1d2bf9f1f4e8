"""shared-cluster-4 N3: the routes served without the key stay bounded.

Any uid on the node may call /tokenize, /detokenize and /tokenizer_info (lm-eval's remote
tokenizer does, without the key). Before, such bodies could be 64 MiB and counted in the job's
own body budget: another uid filled it and the job's generation requests got 503s."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from proxy_fakes import FakeUpstream, chat, running_proxy, running_upstreams, status_of

from hpceval.job.proxy import keyless
from hpceval.job.proxy.body import BodyError
from hpceval.job.proxy.config import ProxyConfig
from hpceval.job.proxy.keyless import MAX_BODY, KeylessBudget

MakeConfig = Callable[..., ProxyConfig]
TOKEN = "job-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
JSON = {"Content-Type": "application/json"}


def tokenize_body(size: int) -> bytes:
    head = b'{"prompt": "'
    return head + b"x" * (size - len(head) - 2) + b'"}'


async def test_a_keyless_body_is_capped_small_and_one_with_the_key_is_not(
        make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    assert MAX_BODY == 1 << 20
    cap = 64 << 10  # smaller here: the fake server (aiohttp) takes bodies up to 1 MiB only
    monkeypatch.setattr(keyless, "MAX_BODY", cap)
    up = FakeUpstream()
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, api_key=TOKEN)) as (_, base):
        assert await status_of(base, "POST", "/tokenize", JSON, tokenize_body(cap - 1)) == 200
        assert await status_of(base, "POST", "/tokenize", JSON, tokenize_body(cap + 1)) == 413
        assert await status_of(base, "POST", "/detokenize", JSON, tokenize_body(4 * cap)) == 413
        # the job's own client (with the key) keeps the proxy's usual cap
        assert await status_of(base, "POST", "/tokenize", AUTH, tokenize_body(4 * cap)) == 200
    assert [p for p in up.paths if p != "/health"] == ["/tokenize", "/tokenize"]


async def test_keyless_bodies_held_open_do_not_refuse_the_jobs_own_requests(
        make_config: MakeConfig) -> None:
    """Bodies another uid starts and never finishes hold keyless budget, not the job's: a chat
    request with the key still fits a total the keyless bytes would have filled before."""
    up = FakeUpstream()
    limits = {"max_total_body_bytes": 1 << 20, "max_body_bytes": 1 << 20,
              "max_inflated_bytes": 1 << 20}
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, api_key=TOKEN, **limits)) as (server, base):
        host, port = base.removeprefix("http://").split(":")
        stalled = []
        for _ in range(3):  # 3 x 700 KB sent, of 900 KB announced each: held, never finished
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                         b"\r\nContent-Length: 921600\r\n\r\n" + b"x" * (700 << 10))
            await writer.drain()
            stalled.append((reader, writer))
        for _ in range(100):
            if server.keyless.held >= 3 * (700 << 10) or any(r.at_eof() for r, _ in stalled):
                break
            await asyncio.sleep(0.02)
        assert server.keyless.held == 3 * (700 << 10), server.keyless.held
        assert server.bodies.held == 0
        body = json.dumps(chat("y" * (600 << 10), temperature=0)).encode()
        async with aiohttp.ClientSession() as s, \
                s.post(base + "/v1/chat/completions", data=body, headers=AUTH) as r:
            assert r.status == 200, await r.text()
        for _, writer in stalled:
            writer.close()


class FakeTransport:
    def __init__(self, peer: str) -> None:
        self.peer = peer

    def get_extra_info(self, name: str) -> Any:
        return {"peername": (self.peer, 40000), "sockname": ("10.0.0.9", 8000)}[name]


class FakeRequest:
    def __init__(self, peer: str) -> None:
        self.transport = FakeTransport(peer)


def test_no_peer_holds_more_than_half_of_the_keyless_budget() -> None:
    budget = KeylessBudget(1000)
    one = budget.lease_for(FakeRequest("10.0.0.1"))  # type: ignore[arg-type]
    one.take(400)
    assert one.peer is None  # below half: nobody was looked up
    again = budget.lease_for(FakeRequest("10.0.0.1"))  # type: ignore[arg-type]
    with pytest.raises(BodyError) as refused:
        again.take(200)
    assert refused.value.status == 503
    assert "address 10.0.0.1 holds 400 bytes" in refused.value.message
    other = budget.lease_for(FakeRequest("10.0.0.2"))  # type: ignore[arg-type]
    other.take(450)  # another peer still gets its share
    assert budget.held == 850
    third = budget.lease_for(FakeRequest("10.0.0.3"))  # type: ignore[arg-type]
    with pytest.raises(BodyError, match="exceed its total of 1000"):
        third.take(200)
    for lease in (one, again, other, third):  # as the proxy does when a request ends
        lease.close()
    assert budget.held == 0 and not budget.leases


async def test_tokenizer_info_is_fetched_once_and_served_from_the_copy(
        make_config: MakeConfig) -> None:
    up = FakeUpstream()
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, api_key=TOKEN, upstream_api_key="up-key")) as (
                _, base), aiohttp.ClientSession() as s:
        for headers in ({}, AUTH, {}):
            async with s.get(base + "/tokenizer_info", headers=headers) as r:
                assert r.status == 200
                assert await r.json() == {"tokenizer_class": "Fake"}
    assert up.paths.count("/tokenizer_info") == 1
