"""The proxy answers only its own job, and hostile clients stay bounded in total (review F3, F5,
F8): against the real aiohttp proxy on loopback, with a second uid where the finding is about
another user."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import resource
from collections.abc import Callable

import pytest
from proxy_fakes import FakeUpstream, chat, running_proxy, running_upstreams, status_of
from second_user import as_nobody, shared_scratch

from hpceval.job.proxy.config import ProxyConfig
from hpceval.job.proxy.guard import RateLimitedLines, allowed, raise_open_file_limit

MakeConfig = Callable[..., ProxyConfig]
TOKEN = "job-token-fedcba9876543210"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CHAT = "/v1/chat/completions"

# What another uid on the node ran against the proxy in the review (F3): the model, the
# server's other routes, and a replay of the harness's request. System Python, stdlib only:
# the venv's interpreter is root's.
STRANGER = r"""
import json, sys, urllib.error, urllib.request
base, body = sys.argv[1], sys.argv[2].encode()
out = {}
for method, path, data in [("POST", "/v1/chat/completions", body), ("GET", "/v1/models", None),
                           ("GET", "/metrics", None), ("POST", "/tokenize", b"{}")]:
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            out[path] = r.status
    except urllib.error.HTTPError as e:
        out[path] = e.code
print(json.dumps(out))
"""


async def test_another_uid_is_refused_and_not_counted_while_the_harness_is_served(
        make_config: MakeConfig) -> None:
    up = FakeUpstream()
    body = json.dumps(chat("What is 2+2?", temperature=0))
    with shared_scratch("hpceval-proxy-") as scratch:
        script = scratch / "stranger.py"
        script.write_text(STRANGER, encoding="utf-8")
        script.chmod(0o644)
        async with running_upstreams(up) as urls, \
                running_proxy(make_config(urls, api_key=TOKEN)) as (server, base):
            # the harness first: its answer is cached, as in the review's replay
            assert await status_of(base, "POST", CHAT, AUTH, body.encode()) == 200
            seen = json.loads(await asyncio.to_thread(
                as_nobody, "/usr/bin/python3", str(script), base, body))
            progress = server.progress
            assert server.cache is not None and len(server.cache) == 1
    # the tokenizer routes stay open (lm-eval's remote tokenizer sends no key: proxy.guard)
    assert seen == {CHAT: 401, "/v1/models": 401, "/metrics": 401, "/tokenize": 200}
    # the stranger reached neither the model nor its cached answer nor any other route
    assert up.hits == 1 and [p for p in up.paths if p != "/health"] == [CHAT, "/tokenize"]
    assert (progress.done, progress.failed, progress.cached, progress.in_flight) == (1, 0, 0, 0)


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/metrics"), ("GET", "/version"), ("GET", "/load"),
    ("POST", "/v1/load_lora_adapter"), ("POST", "/abort_requests"),
    ("GET", "/v1/chat/completions"), ("DELETE", "/v1/models"), ("GET", "/v1/models/../metrics"),
])
async def test_only_the_harness_routes_are_forwarded(make_config: MakeConfig, method: str,
                                                     path: str) -> None:
    up = FakeUpstream()
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, api_key=TOKEN)) as (server, base):
        assert await status_of(base, method, path, AUTH, b"{}" if method == "POST" else None) \
            == 404
        assert await status_of(base, "GET", "/v1/models", AUTH) == 200  # on the list
        assert server.progress.failed == 0
    assert up.hits == 0 and [p for p in up.paths if p != "/health"] == ["/v1/models"]


def test_an_external_api_keeps_its_base_path_and_only_the_openai_routes() -> None:
    assert allowed("POST", "/openai/v1/chat/completions", external=True)
    assert allowed("GET", "/serving/v1/models", external=True)
    assert not allowed("POST", "/openai/v1/chat/completions", external=False)
    assert not allowed("GET", "/openai/v1/files", external=True)
    assert allowed("POST", "/v1/completions", external=False)
    assert not allowed("GET", "/health", external=False)  # the proxy's own, never forwarded


async def _hold_body(port: int, declared: int, sent: int) -> tuple[asyncio.StreamReader,
                                                                   asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Authorization: Bearer {TOKEN}\r\nContent-Length: {declared}\r\n\r\n"
                 .encode() + b"{" + b" " * (sent - 1))
    await writer.drain()
    return reader, writer


async def test_bodies_of_all_requests_together_are_bounded(make_config: MakeConfig) -> None:
    """Review F5: 12 slow 60 MiB bodies took a job's proxy from 38 MB to 762 MB."""
    up = FakeUpstream()
    limit, each = 256 << 10, 100 << 10
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, api_key=TOKEN, max_body_bytes=128 << 10,
                                      max_inflated_bytes=128 << 10,
                                      max_total_body_bytes=limit)) as (server, base):
        held = [await _hold_body(server.port, 120 << 10, each) for _ in range(2)]
        for _ in range(50):  # both bodies read as far as they were sent
            if server.bodies.held >= 2 * each:
                break
            await asyncio.sleep(0.02)
        assert 2 * each <= server.bodies.held <= limit
        reader, writer = await _hold_body(server.port, 120 << 10, each)
        answer = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 503") and b"server_busy" in answer
        for _, w in held:
            w.close()
        for _ in range(100):
            if server.bodies.held == 0:
                break
            await asyncio.sleep(0.02)
        assert server.bodies.held == 0  # every byte given back when its request ended
        assert await status_of(base, "POST", CHAT, AUTH, json.dumps(chat("ok")).encode()) == 200
    assert up.hits == 1


async def test_a_body_trickled_byte_by_byte_is_cut_off_at_the_deadline(
        make_config: MakeConfig) -> None:
    """Review F5: one byte every 20 s was held forever (each byte restarted the stall timer)."""
    up = FakeUpstream()
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, api_key=TOKEN, body_timeout=0.5,
                                      body_deadline=1.0)) as (server, _):
        reader, writer = await _hold_body(server.port, 1000, 1)
        loop = asyncio.get_running_loop()
        started, answer = loop.time(), b""
        while loop.time() - started < 6 and not answer:
            writer.write(b" ")  # 0.2 s apart: never a stall of body_timeout
            await writer.drain()
            with contextlib.suppress(asyncio.TimeoutError):
                answer = await asyncio.wait_for(reader.read(200), 0.2)
        writer.close()
        took = loop.time() - started
    assert answer.startswith(b"HTTP/1.1 408") and 0.8 < took < 3
    assert up.hits == 0


async def test_open_connections_are_capped(make_config: MakeConfig) -> None:
    """Review F5: ~15,000 trickling connections were held against a limit of 20,000 fds."""
    up = FakeUpstream()
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, api_key=TOKEN, max_connections=4)) as (server, base):
        idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(4)]
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        answer = await asyncio.wait_for(reader.read(), 5)  # answered and closed at once
        writer.close()
        assert answer.startswith(b"HTTP/1.1 503") and b"too many open connections" in answer
        for _, w in idle:
            w.close()
        await asyncio.sleep(0.2)
        assert await status_of(base, "POST", CHAT, AUTH, json.dumps(chat("ok")).encode()) == 200


async def test_a_flood_of_bad_requests_logs_a_bounded_number_of_one_line_records(
        make_config: MakeConfig, caplog: pytest.LogCaptureFixture) -> None:
    """Review F8: every malformed request wrote a ~0.7 KB traceback (1.1 MB/s from one client)."""
    up = FakeUpstream()
    caplog.set_level(logging.INFO)
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, api_key=TOKEN)) as (server, base):
        for n in range(150):  # malformed: a bare LF line end, and a 9 KB header
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            bad = b"GET / HTTP/1.1\nHost: x\n\n" if n % 2 else \
                b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n"
            writer.write(bad)
            await writer.drain()
            await asyncio.wait_for(reader.read(), 5)
            writer.close()
        for _ in range(150):  # refused: no token
            assert await status_of(base, "POST", CHAT, {}, b"{}") == 401
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    burst = RateLimitedLines().burst
    assert 1 <= len(records) <= burst
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in records)
    assert all(len(r.getMessage()) < 400 for r in records)


async def test_a_header_value_that_is_not_latin1_is_dropped_not_a_500(
        make_config: MakeConfig) -> None:
    """Review F8: `Accept: \\xe2\\x80\\xa8...` got 500 (the forwarded head is latin-1)."""
    up = FakeUpstream()
    body = json.dumps(chat("h", temperature=0)).encode()
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, api_key=TOKEN)) as (server, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Authorization: Bearer {TOKEN}\r\nContent-Length: {len(body)}\r\n"
                     .encode() + b"Accept: \xe2\x80\xa8\xff/json\r\nConnection: close\r\n\r\n"
                     + body)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 5)
        writer.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert up.hits == 1 and "Accept" not in up.headers[0]


@pytest.mark.parametrize(("limits", "raised_to"), [
    ((1024, 4096), (4096, 4096)),
    ((1024, resource.RLIM_INFINITY), (1 << 20, resource.RLIM_INFINITY)),
    ((2 << 20, resource.RLIM_INFINITY), (2 << 20, resource.RLIM_INFINITY)),
    ((4096, 4096), None),  # already at the hard limit: nothing to ask
])
def test_the_open_file_limit_is_raised_to_the_hard_limit(
        monkeypatch: pytest.MonkeyPatch, limits: tuple[int, int],
        raised_to: tuple[int, int] | None) -> None:
    asked: list[tuple[int, tuple[int, int]]] = []
    monkeypatch.setattr(resource, "getrlimit", lambda which: limits)
    monkeypatch.setattr(resource, "setrlimit", lambda which, value: asked.append((which, value)))
    raise_open_file_limit()
    assert asked == ([] if raised_to is None else [(resource.RLIMIT_NOFILE, raised_to)])


def test_a_limit_that_cannot_be_raised_is_said_once(monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    def refuse(_which: int, _value: tuple[int, int]) -> None:
        raise ValueError("not allowed")

    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 4096))
    monkeypatch.setattr(resource, "setrlimit", refuse)
    with caplog.at_level(logging.WARNING, logger="hpceval.job.proxy.guard"):
        raise_open_file_limit()
    assert caplog.messages == ["could not raise the open file limit from 1024: not allowed"]
