"""A small HTTP/1.1 keep-alive client for the proxy's non-streamed upstream requests.

Why not aiohttp's ClientSession here: measured on the target kind of machine it costs ~0.25 ms
CPU per request, half of the proxy's whole budget, while a protocol that writes one request
and parses one response costs ~0.05 ms. Streamed requests and health probes still use aiohttp.

An upstream on a Unix socket (a job's server, proxy.instance.Instance.socket) is the same
protocol over that socket; its connections are pooled per socket path.

Scope, on purpose narrow: one request at a time per connection (no pipelining), bodies framed
by Content-Length, chunked encoding or connection close; no compression is asked for (no
Accept-Encoding), so none is to be undone. Idle connections are kept per upstream for less than
uvicorn's (vLLM's) 5 s keep-alive, so a reused connection is rarely one the server is closing;
when it is, the request fails as `UpstreamDisconnected` and the caller retries it.
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl
import time
from collections import deque
from urllib.parse import urlsplit

MAX_HEAD = 64 * 1024
NO_BODY_STATUSES = frozenset({204, 304})


class UpstreamConnectError(OSError):
    """The connection could not be made (refused, unreachable, connect timeout)."""


class UpstreamDisconnected(ConnectionError):
    """The connection broke before the whole response arrived."""


class UpstreamProtocolError(ValueError):
    """The upstream sent something that is not an HTTP/1.x response."""


Response = tuple[int, str, bytes]  # status, content type, body


class _Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._buf = bytearray()
        self._waiter: asyncio.Future[Response] | None = None
        self._status = 0
        self._ctype = ""
        self._length: int | None = None  # None: until close (no framing); -1: chunked
        self._body = bytearray()
        self._head_done = False
        self._no_body = False  # a HEAD request: the head announces a body that never comes
        self.reusable = False

    # asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if self._waiter is None or self._waiter.done():
            self.close()  # bytes nobody asked for: this connection cannot be trusted any more
            return
        try:
            self._parse()
        except (UpstreamProtocolError, ValueError) as exc:
            self._fail(UpstreamProtocolError(f"bad response from upstream: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._head_done and self._length is None:  # body delimited by close: complete now
            self._finish(bytes(self._buf), reusable=False)
        else:
            self._fail(UpstreamDisconnected(f"server closed the connection ({exc or 'EOF'})"))

    # request side ---------------------------------------------------------------------------
    def start(self, data: bytes, waiter: asyncio.Future[Response], head_request: bool) -> None:
        assert self.transport is not None
        self._waiter, self._head_done, self.reusable = waiter, False, False
        self._no_body = head_request
        self._body = bytearray()
        self.transport.write(data)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    # parsing --------------------------------------------------------------------------------
    def _parse(self) -> None:
        buf = self._buf
        if not self._head_done:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    raise UpstreamProtocolError("response head too long")
                return
            self._read_head(bytes(buf[:end]).decode("latin-1"))
            del buf[:end + 4]
        if self._length is None:
            return  # until close
        if self._length >= 0:
            if len(buf) >= self._length:
                body = bytes(buf[:self._length])
                self._finish(body, reusable=self.reusable and len(buf) == self._length)
            return
        self._parse_chunks()

    def _read_head(self, head: str) -> None:
        status_line, *lines = head.split("\r\n")
        version, _, rest = status_line.partition(" ")
        if not version.startswith("HTTP/1.") or len(rest) < 3:
            raise UpstreamProtocolError(f"status line {status_line[:80]!r}")
        self._status = int(rest[:3])
        headers: dict[str, str] = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        self._ctype = headers.get("content-type", "application/json")
        connection = headers.get("connection", "").lower()
        self.reusable = "close" not in connection and (
            version == "HTTP/1.1" or "keep-alive" in connection)
        if self._no_body:
            self._length = 0
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._length = -1
        elif "content-length" in headers:
            self._length = int(headers["content-length"])
        elif self._status in NO_BODY_STATUSES or 100 <= self._status < 200:
            self._length = 0
        else:
            self._length, self.reusable = None, False
        self._head_done = True

    def _parse_chunks(self) -> None:
        buf = self._buf
        while True:
            eol = buf.find(b"\r\n")
            if eol < 0:
                return
            size = int(bytes(buf[:eol]).split(b";", 1)[0], 16)
            if size == 0:  # last chunk, then optional trailers and an empty line
                end = buf.find(b"\r\n\r\n", eol)
                if end < 0:
                    return
                reusable = self.reusable and len(buf) == end + 4
                self._finish(bytes(self._body), reusable)
                return
            if len(buf) < eol + 2 + size + 2:
                return
            self._body += buf[eol + 2:eol + 2 + size]
            del buf[:eol + 2 + size + 2]

    def _finish(self, body: bytes, reusable: bool) -> None:
        self._buf.clear()
        self.reusable = reusable
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result((self._status, self._ctype, body))

    def _fail(self, exc: Exception) -> None:
        self.reusable = False
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        self.close()


class HttpClient:
    """Keep-alive connection pools, one per upstream base URL."""

    def __init__(self, connect_timeout: float, keepalive: float = 4.0) -> None:
        self.connect_timeout = connect_timeout
        self.keepalive = keepalive
        self._pools: dict[str, deque[_Conn]] = {}  # by base URL, or socket path
        self._targets: dict[str, tuple[str, int, ssl.SSLContext | None, str, bytes]] = {}

    async def request(self, base_url: str, method: str, path_qs: str, body: bytes | None,
                      headers: dict[str, str], timeout: float,
                      socket: str | None = None, pin: bytes | None = None) -> Response:
        """``socket``: connect to this Unix socket path, not to ``base_url``'s host and port
        (which then only names the Host header). ``pin``: an https server must present the
        certificate with this SHA-256 (checked before anything is sent), instead of one a
        certificate authority signed."""
        pool_key = (base_url if socket is None else socket) + (f"#{pin.hex()}" if pin else "")
        host, port, ssl_ctx, prefix, host_header = self._target(base_url, pool_key, pin)
        conn = await self._acquire(pool_key, host, port, ssl_ctx, socket, pin)
        head = [f"{method} {prefix}{path_qs} HTTP/1.1\r\n".encode("latin-1"), host_header]
        for name, value in headers.items():
            head.append(f"{name}: {value}\r\n".encode("latin-1"))
        head.append(b"Content-Length: %d\r\n\r\n" % len(body or b""))
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Response] = loop.create_future()
        timer = loop.call_later(timeout, _expire, waiter)
        try:
            conn.start(b"".join(head) + (body or b""), waiter, method == "HEAD")
            response = await waiter
        except BaseException:
            conn.close()  # vLLM aborts a generation whose client went away: frees the GPU
            raise
        finally:
            timer.cancel()
        if conn.reusable and not conn.closed:
            conn.idle_since = time.monotonic()
            self._pools[pool_key].append(conn)
        else:
            conn.close()
        return response

    def close(self) -> None:
        for pool in self._pools.values():
            for conn in pool:
                conn.close()
            pool.clear()

    def _target(self, base_url: str, pool_key: str, pin: bytes | None = None
                ) -> tuple[str, int, ssl.SSLContext | None, str, bytes]:
        target = self._targets.get(pool_key)
        if target is None:
            parts = urlsplit(base_url)
            secure = parts.scheme == "https"
            host = parts.hostname or "localhost"
            port = parts.port or (443 if secure else 80)
            target = (host, port, _client_context(pin) if secure else None,
                      parts.path.rstrip("/"), f"Host: {parts.netloc}\r\n".encode("latin-1"))
            self._targets[pool_key] = target
            self._pools[pool_key] = deque()
        return target

    async def _acquire(self, pool_key: str, host: str, port: int,
                       ssl_ctx: ssl.SSLContext | None, socket: str | None,
                       pin: bytes | None = None) -> _Conn:
        pool = self._pools[pool_key]
        stale_before = time.monotonic() - self.keepalive
        while pool and (pool[0].closed or pool[0].idle_since < stale_before):
            pool.popleft().close()  # oldest first: they are the ones the server closes next
        while pool:
            conn = pool.pop()  # most recently used: the warmest connection
            if not conn.closed:
                return conn
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(_Conn, host, port, ssl=ssl_ctx) if socket is None
                else loop.create_unix_connection(_Conn, socket), self.connect_timeout)
        except asyncio.TimeoutError as exc:
            raise UpstreamConnectError(f"connect timed out after {self.connect_timeout:g}s") \
                from exc
        except OSError as exc:
            raise UpstreamConnectError(exc.strerror or str(exc)) from exc
        if pin is not None and ssl_ctx is not None:
            transport = conn.transport
            peer = transport.get_extra_info("ssl_object") if transport is not None else None
            cert = peer.getpeercert(binary_form=True) if peer is not None else None
            if cert is None or hashlib.sha256(cert).digest() != pin:
                conn.close()  # before a byte of the request (its token) is sent
                raise UpstreamConnectError("its certificate is not the one pinned for it "
                                           "(another process holds the address)")
        return conn


def _client_context(pin: bytes | None) -> ssl.SSLContext:
    """Certificate authorities and the host name, or, given a pin, neither: the pin is checked
    instead, after the handshake (which proves the server holds the certificate's key)."""
    if pin is None:
        return ssl.create_default_context()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _expire(waiter: asyncio.Future[Response]) -> None:
    if not waiter.done():
        waiter.set_exception(asyncio.TimeoutError())
