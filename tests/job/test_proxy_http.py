"""The proxy's light HTTP/1.1 client against a raw socket server that answers as scripted, to
cover the framings and failures a real server may produce."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proxy_fakes import dead_url

from hpceval.job.proxy.client import (
    HttpClient,
    UpstreamConnectError,
    UpstreamDisconnected,
    UpstreamProtocolError,
    _Conn,
)

Script = Callable[[int], tuple[bytes, bool]]  # request number -> (bytes to send, close after)
OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


class ScriptedServer:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests = 0
        self.connections = 0
        self.received: list[bytes] = []

    def __call__(self) -> asyncio.Protocol:
        server = self

        class Proto(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                assert isinstance(transport, asyncio.Transport)
                self.transport, self.buf = transport, b""
                server.connections += 1

            def data_received(self, data: bytes) -> None:
                self.buf += data
                head, sep, rest = self.buf.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                if not sep or len(rest) < length:
                    return
                self.buf = rest[length:]
                server.received.append(head + b"\r\n\r\n" + rest[:length])
                server.requests += 1
                answer, close = server.script(server.requests)
                self.transport.write(answer)
                if close:
                    self.transport.close()

        return Proto()


@contextlib.asynccontextmanager
async def serve(script: Script) -> AsyncIterator[tuple[ScriptedServer, str]]:
    scripted = ScriptedServer(script)
    server = await asyncio.get_running_loop().create_server(scripted, "127.0.0.1", 0)
    try:
        yield scripted, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


async def call(client: HttpClient, url: str, timeout: float = 5.0) -> tuple[int, str, bytes]:
    return await client.request(url, "POST", "/v1/x?a=1", b'{"q":1}',
                                {"Content-Type": "application/json"}, timeout)


async def test_keep_alive_connection_is_reused_and_request_is_well_formed() -> None:
    async with serve(lambda n: (OK, False)) as (server, url):
        client = HttpClient(connect_timeout=5)
        for _ in range(3):
            assert await call(client, url) == (200, "application/json", b"{}")
        client.close()
    assert server.requests == 3 and server.connections == 1
    head = server.received[0]
    assert head.startswith(b"POST /v1/x?a=1 HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"Content-Length: 7\r\n" in head and head.endswith(b'\r\n\r\n{"q":1}')


async def test_chunked_body_is_decoded() -> None:
    chunked = (b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n"
               b"Content-Type: text/plain; charset=utf-8\r\n\r\n"
               b"3\r\nabc\r\n5;ext=1\r\ndefgh\r\n0\r\nX-Trailer: 1\r\n\r\n")
    async with serve(lambda n: (chunked, False)) as (server, url):
        client = HttpClient(connect_timeout=5)
        assert await call(client, url) == (201, "text/plain; charset=utf-8", b"abcdefgh")
        assert (await call(client, url))[2] == b"abcdefgh"
        client.close()
    assert server.connections == 1


async def test_connection_close_and_close_delimited_bodies() -> None:
    close_header = OK.replace(b"Content-Length", b"Connection: close\r\nContent-Length")
    until_close = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n[1, 2]"
    answers = {1: (close_header, False), 2: (until_close, True), 3: (OK, True), 4: (OK, False)}
    async with serve(lambda n: answers[n]) as (server, url):
        client = HttpClient(connect_timeout=5)
        assert (await call(client, url))[2] == b"{}"
        assert (await call(client, url))[2] == b"[1, 2]"
        assert (await call(client, url))[2] == b"{}"  # server closed it right after answering
        await asyncio.sleep(0.05)
        assert (await call(client, url))[2] == b"{}"  # ... so this needs a new connection
        client.close()
    assert server.connections == 4


async def test_failures_are_classified() -> None:
    partial = OK[:-1]  # announces 2 body bytes, sends 1, then closes
    answers = {1: (partial, True), 2: (b"SSH-2.0-OpenSSH\r\n\r\n", False)}
    async with serve(lambda n: answers[n]) as (_, url):
        client = HttpClient(connect_timeout=5)
        with pytest.raises(UpstreamDisconnected):
            await call(client, url)
        with pytest.raises(UpstreamProtocolError):
            await call(client, url)
        client.close()
    with pytest.raises(UpstreamConnectError):
        await call(HttpClient(connect_timeout=5), dead_url())


async def test_timeout_closes_the_connection() -> None:
    async with serve(lambda n: (b"" if n == 1 else OK, False)) as (server, url):
        client = HttpClient(connect_timeout=5)
        with pytest.raises(asyncio.TimeoutError):
            await call(client, url, timeout=0.1)
        assert await call(client, url) == (200, "application/json", b"{}")
        client.close()
    assert server.connections == 2  # the timed-out connection was not reused


class _NullTransport(asyncio.Transport):
    def write(self, data: bytes | bytearray | memoryview) -> None:
        pass

    def close(self) -> None:
        pass


def _chunked(body: bytes, sizes: list[int]) -> bytes:
    out, rest = b"", body
    for size in sizes:
        if not rest:
            break
        out += b"%x\r\n" % len(rest[:size]) + rest[:size] + b"\r\n"
        rest = rest[size:]
    if rest:
        out += b"%x\r\n" % len(rest) + rest + b"\r\n"
    return out + b"0\r\n\r\n"


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=300), cuts=st.lists(st.integers(1, 400), max_size=8),
       sizes=st.lists(st.integers(1, 50), max_size=8), chunked=st.booleans())
def test_response_parsed_whatever_way_the_bytes_arrive(
        body: bytes, cuts: list[int], sizes: list[int], chunked: bool) -> None:
    """TCP may split a response anywhere: the parsed result must not depend on where."""
    framing = b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(body, sizes) if chunked \
        else b"Content-Length: %d\r\n\r\n" % len(body) + body
    wire = b"HTTP/1.1 200 OK\r\nContent-Type: x/y\r\n" + framing
    loop = asyncio.new_event_loop()
    try:
        conn = _Conn()
        conn.connection_made(_NullTransport())
        waiter: asyncio.Future[tuple[int, str, bytes]] = loop.create_future()
        conn.start(b"", waiter, head_request=False)
        pos = 0
        for cut in [*sorted({c % (len(wire) + 1) for c in cuts}), len(wire)]:
            if cut > pos:
                conn.data_received(wire[pos:cut])
                pos = cut
        assert waiter.done() and waiter.result() == (200, "x/y", body)
        assert conn.reusable
    finally:
        loop.close()
