"""Hostile input stays bounded: body caps before and after decompression, slow clients, large
bodies parsed off the event loop, only valid answers cached, and the per-job token."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
import zlib
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from proxy_fakes import FakeUpstream, chat, running_proxy, running_upstreams, status_of

from hpceval.job.proxy.config import ProxyConfig

MakeConfig = Callable[..., ProxyConfig]
CHAT = "/v1/chat/completions"


def bomb(inflated: int) -> bytes:
    """A valid chat request padded with `inflated` bytes of spaces, gzip'd (~1000:1)."""
    head = json.dumps(chat("x", temperature=0))[:-1].encode()
    return gzip.compress(head + b" " * inflated + b"}", 9)


async def send(base: str, data: bytes, headers: dict[str, str] | None = None,
               path: str = CHAT) -> tuple[int, Any, str]:
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    async with aiohttp.ClientSession(auto_decompress=False) as s, \
            s.post(base + path, data=data, headers=all_headers) as r:
        text = await r.read()
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = text
        return r.status, parsed, r.headers.get("X-Hpceval-Cache", "")


async def test_gzip_bomb_is_refused_with_413_before_it_inflates(make_config: MakeConfig) -> None:
    up = FakeUpstream()
    data = bomb(100 * 1024 * 1024)
    assert len(data) < 110 * 1024  # the 102 KB body that became 100 MB in memory
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, max_inflated_bytes=8 * 1024 * 1024)) as (server, base):
        status, answer, _ = await send(base, data, {"Content-Encoding": "gzip"})
        assert status == 413 and "8388608" in answer["error"]["message"]
        assert server.progress.failed == 1
    assert up.hits == 0


async def test_wire_cap_refuses_large_body_and_gzip_under_caps_works(
        make_config: MakeConfig) -> None:
    up = FakeUpstream()
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, max_body_bytes=4096)) as (_, base):
        big = json.dumps(chat("y" * 10_000, temperature=0)).encode()
        status, answer, _ = await send(base, big)
        assert status == 413 and "4096" in answer["error"]["message"]
        # 10 KB of prompt, 300 bytes gzip'd: the wire cap is on what is sent, not what it means
        status, answer, _ = await send(base, gzip.compress(big), {"Content-Encoding": "gzip"})
        assert status == 200 and answer["choices"]
        other = json.dumps(chat("z" * 10_000, temperature=0)).encode()
        status, answer, _ = await send(base, zlib.compress(other),
                                       {"Content-Encoding": "deflate"})
        assert status == 200 and answer["choices"]
        status, answer, _ = await send(base, b"\x1f\x8b garbage", {"Content-Encoding": "gzip"})
        assert status == 400 and "gzip" in answer["error"]["message"]
        status, answer, _ = await send(base, big[:100], {"Content-Encoding": "br"})
        assert status == 415 and "br" in answer["error"]["message"]
    assert up.hits == 2 and up.bodies[0]["messages"][0]["content"] == "y" * 10_000


async def test_passthrough_bodies_are_capped_too(make_config: MakeConfig) -> None:
    up = FakeUpstream()
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, max_inflated_bytes=256 << 10)) as (_, base):
        # under the fake server's own 1 MiB limit: the 413 must be the proxy's
        status, answer, _ = await send(base, bomb(600_000), {"Content-Encoding": "gzip"},
                                       "/tokenize")
        assert status == 413 and "262144" in answer["error"]["message"]
        status, answer, _ = await send(base, json.dumps({"prompt": "a"}).encode(), None,
                                       "/tokenize")
        assert status == 200 and answer["echo"] == {"prompt": "a"}


async def test_client_slow_to_send_its_head_is_disconnected(make_config: MakeConfig) -> None:
    async with running_upstreams(FakeUpstream()) as urls, \
            running_proxy(make_config(urls, header_timeout=0.3)) as (server, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        await writer.drain()
        # one header line every 0.1 s: never a complete head, so never an answer
        closed_after = None
        for n in range(40):
            await asyncio.sleep(0.1)
            if reader.at_eof():
                closed_after = n
                break
            try:
                writer.write(b"X-Slow-%d: 1\r\n" % n)
                await writer.drain()
                await asyncio.wait_for(reader.read(1), 0.01)
            except (ConnectionError, asyncio.TimeoutError):
                pass
        writer.close()
        assert closed_after is not None and closed_after < 20


async def test_client_slow_to_send_its_body_gets_408(make_config: MakeConfig) -> None:
    up = FakeUpstream()
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, body_timeout=0.3)) as (server, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"mod")
        await writer.drain()
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        writer.close()
    assert answer.startswith(b"HTTP/1.1 408") and up.hits == 0


async def test_large_bodies_are_parsed_and_hashed_off_the_event_loop(
        make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    import hpceval.job.interceptors as proxy_module  # where the proxy parses and hashes

    threads: list[bool] = []
    real = proxy_module.request_key

    def recording(path: str, body: dict[str, Any], chain: str = "") -> bytes:
        threads.append(threading.current_thread() is threading.main_thread())
        return real(path, body, chain)

    monkeypatch.setattr(proxy_module, "request_key", recording)
    up = FakeUpstream()
    async with running_upstreams(up) as urls, running_proxy(make_config(urls)) as (_, base):
        small = json.dumps(chat("s", temperature=0)).encode()
        large = json.dumps(chat("l" * (512 << 10), temperature=0)).encode()
        assert (await send(base, small))[0] == 200
        assert (await send(base, large))[0] == 200
    assert threads == [True, False]  # small: inline (cheap); large: in a worker thread


@pytest.mark.parametrize("answer", [
    b'{"\\u0065rror": {"message": "overloaded"}}',  # escaped key: the byte check missed it
    b'{"choices": []}',
    b'{"choices":[{"message":{"content":"cut off}',  # truncated, ends in }
    b'{"id":"c1","object":"error","message":"x"}',
    b'[1, 2]',
])
async def test_invalid_answers_are_not_cached(make_config: MakeConfig, answer: bytes) -> None:
    up = FakeUpstream()
    up.raw_answer = answer
    async with running_upstreams(up) as urls, running_proxy(make_config(urls)) as (server, base):
        first = await send(base, json.dumps(chat("q", temperature=0)).encode())
        second = await send(base, json.dumps(chat("q", temperature=0)).encode())
        assert server.cache is not None and len(server.cache) == 0
    assert first[2] == second[2] == "miss" and up.hits == 2


async def test_embeddings_need_data_to_be_cached(make_config: MakeConfig) -> None:
    up = FakeUpstream()
    request = json.dumps({"model": "m", "input": "x"}).encode()
    async with running_upstreams(up) as urls, running_proxy(make_config(urls)) as (_, base):
        up.raw_answer = b'{"object":"list","data":[]}'
        assert (await send(base, request, path="/v1/embeddings"))[2] == "miss"
        up.raw_answer = None
        assert (await send(base, request, path="/v1/embeddings"))[2] == "miss"
        assert (await send(base, request, path="/v1/embeddings"))[2] == "hit"
    assert up.hits == 2


TOKEN = "job-token-0123456789abcdef"


async def test_token_required_when_configured(make_config: MakeConfig) -> None:
    up = FakeUpstream()
    body = json.dumps(chat("q", temperature=0)).encode()
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, api_key=TOKEN)) as (server, base):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN},
                        {"Authorization": f"Basic {TOKEN}"}):
            status, answer, _ = await send(base, body, headers)
            assert status == 401 and answer["error"]["type"] == "unauthorized"
            status, _, _ = await send(base, b"{}", headers, "/v1/embeddings")
            assert status == 401
        async with aiohttp.ClientSession() as s, s.get(base + "/health") as r:
            assert r.status == 200  # the job script's start-up check needs no secret
        assert server.progress.failed == 0  # strangers do not move the run's counters
        status, answer, _ = await send(base, body, {"Authorization": f"Bearer {TOKEN}"})
        assert status == 200 and answer["choices"]
    # the proxy's key is its own: not passed on (an upstream without a key of its own, such as
    # an external judge, must not get the job's token)
    assert up.hits == 1 and "Authorization" not in up.headers[0]
    assert TOKEN not in repr(make_config(["http://x:1"], api_key=TOKEN))


async def test_every_route_but_health_and_the_tokenizer_ones_needs_the_key(
        make_config: MakeConfig) -> None:
    """The same uid as the proxy, so this runs on a CI that is not root (the second-uid test in
    test_proxy_guard.py needs runuser): with a job key, only /health and lm-eval's keyless
    tokenizer routes answer without it; /v1/models and /metrics are refused before any byte
    reaches the model server, and answer with the key."""
    up = FakeUpstream()
    auth = {"Authorization": f"Bearer {TOKEN}"}

    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, api_key=TOKEN)) as (_server, base):
        assert await status_of(base, "GET", "/v1/models", {}) == 401
        assert await status_of(base, "GET", "/metrics", {}) == 401
        assert await status_of(base, "GET", "/v1/models", {"Authorization": "Bearer wrong"}) == 401
        tokenize = json.dumps({"prompt": "hi"}).encode()
        assert await status_of(base, "POST", "/tokenize", {"Content-Type": "application/json"},
                            tokenize) == 200
        assert await status_of(base, "GET", "/v1/models", auth) == 200
        assert await status_of(base, "GET", "/health", {}) == 200
    assert [p for p in up.paths if p != "/health"] == ["/tokenize", "/v1/models"]
