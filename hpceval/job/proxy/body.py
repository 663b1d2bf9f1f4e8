"""Reading a request body within bounds, for the in-job proxy.

Any process on the node can reach the proxy's port, so a body is hostile until read: it is
capped as sent (`max_body_bytes`, Content-Length checked before reading a byte), a client that
stalls mid-body gets 408 after `body_timeout`, one that trickles gets 408 once the whole body
has taken `body_deadline` (one byte every 20 s was held forever, review F5), every byte read
and inflated is taken from the proxy's total (`BodyBudget`, `BodyLease`: 503 beyond), and a
compressed body is inflated by streaming decompression that stops at `max_inflated_bytes`
(aiohttp's own decoding is switched off: it inflates the whole body first and applies the limit
afterwards, so 100 KB of gzip became 100 MB in memory). Large bodies are decoded in a worker
thread, off the event loop, so one of them does not stall every other request.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from typing import TypeVar

from aiohttp import web

# Below this, parsing and hashing cost less than the hand-off to a thread (~50 us).
OFFLOAD_BYTES = 256 * 1024
_PIECE = 1 << 20
_WBITS = {"gzip": 31, "x-gzip": 31, "deflate": 15}  # deflate: zlib-wrapped, raw tried second

T = TypeVar("T")


class BodyError(Exception):
    """A request refused while reading its body; `status` is what the proxy answers."""

    def __init__(self, status: int, message: str, kind: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind


def too_large(limit: int, what: str) -> BodyError:
    return BodyError(413, f"request body {what} exceeds {limit} bytes", "request_too_large")


class BodyBudget:
    """Request body bytes held by all requests at once: each request takes what it reads (as
    sent and as inflated) and gives it all back when it ends. Beyond `limit`: 503, so a few
    slow 60 MiB bodies cannot take the node's memory (review F5: 12 took 762 MB)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def lease(self) -> BodyLease:
        return BodyLease(self)


class BodyLease:
    def __init__(self, budget: BodyBudget) -> None:
        self._budget = budget
        self.size = 0

    def take(self, n: int) -> None:
        budget = self._budget
        if budget.held + n > budget.limit:
            raise BodyError(503, f"the proxy holds {budget.held} bytes of request bodies; "
                                 f"{n} more would exceed its total of {budget.limit}; retry",
                            "server_busy")
        budget.held += n
        self.size += n

    def close(self) -> None:
        self._budget.held -= self.size
        self.size = 0



async def read_body(request: web.BaseRequest, max_bytes: int, timeout: float,
                    deadline: float, lease: BodyLease | None = None) -> bytes:
    """The body as sent, at most `max_bytes`; 413 beyond, 408 when the client stalls for
    `timeout` or has not sent it all within `deadline` seconds, 503 beyond the total."""
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        raise too_large(max_bytes, "as sent")
    content = request.content
    if content.is_eof():  # the common case: the whole body came with the head; no waiting
        data = content.read_nowait(-1)
        if len(data) > max_bytes:
            raise too_large(max_bytes, "as sent")
        if lease is not None:
            lease.take(len(data))
        return data
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    parts: list[bytes] = []
    size = 0
    while True:
        left = end - loop.time()
        try:
            if left <= 0:
                raise asyncio.TimeoutError
            chunk = await asyncio.wait_for(content.readany(), min(timeout, left))
        except asyncio.TimeoutError as exc:
            what = f"no request body data for {timeout:g}s" if left > timeout else \
                f"request body not complete within {deadline:g}s"
            raise BodyError(408, what, "request_timeout") from exc
        if not chunk:
            return b"".join(parts)
        size += len(chunk)
        if size > max_bytes:
            raise too_large(max_bytes, "as sent")
        if lease is not None:
            lease.take(len(chunk))
        parts.append(chunk)


def content_encoding(request: web.BaseRequest) -> str | None:
    """The body's Content-Encoding (None for identity); 415 for one the proxy cannot decode."""
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding not in _WBITS:
        raise BodyError(415, f"Content-Encoding {encoding!r} is not supported "
                             "(gzip, deflate or identity)", "unsupported_encoding")
    return encoding


def inflate(data: bytes, encoding: str, max_bytes: int) -> bytes:
    """Decompress `data`, never holding more than `max_bytes` (+1) of output."""
    try:
        return _inflate(data, _WBITS[encoding], max_bytes)
    except zlib.error as exc:
        if encoding == "deflate":  # some clients send raw deflate under that name
            try:
                return _inflate(data, -15, max_bytes)
            except zlib.error:
                pass
        raise BodyError(400, f"request body is not valid {encoding} data: {exc}",
                        "invalid_request") from exc


def _inflate(data: bytes, wbits: int, max_bytes: int) -> bytes:
    # Output in pieces of at most _PIECE, joined once at the end: a growing buffer would hold
    # its old and new copy at once, and one big call builds its output twice too.
    decoder = zlib.decompressobj(wbits)
    pieces: list[bytes] = []
    size = 0
    pending = data
    while True:
        piece = decoder.decompress(pending, min(_PIECE, max_bytes + 1 - size))
        size += len(piece)
        if size > max_bytes:
            raise too_large(max_bytes, "after decompression")
        pieces.append(piece)
        pending = decoder.unconsumed_tail
        if decoder.eof or (not pending and not piece):
            break
    if not decoder.eof:
        raise BodyError(400, "request body is a truncated compressed stream", "invalid_request")
    if decoder.unused_data:
        raise BodyError(400, "data after the end of the compressed request body",
                        "invalid_request")
    return b"".join(pieces)


async def off_loop(size: int, fn: Callable[..., T], *args: object) -> T:
    """`fn(*args)` in a worker thread when it works on `size` >= OFFLOAD_BYTES, else inline."""
    if size >= OFFLOAD_BYTES:
        return await asyncio.to_thread(fn, *args)
    return fn(*args)


async def decoded_body(request: web.BaseRequest, max_bytes: int, max_inflated: int,
                       timeout: float, deadline: float, lease: BodyLease | None = None
                       ) -> bytes:
    """The request body, read within `max_bytes` and inflated within `max_inflated`."""
    encoding = content_encoding(request)
    raw = await read_body(request, max_bytes, timeout, deadline, lease)
    if encoding is None:
        if len(raw) > max_inflated:
            raise too_large(max_inflated, "after decompression")
        return raw
    inflated = await off_loop(max(len(raw), OFFLOAD_BYTES), inflate, raw, encoding, max_inflated)
    if lease is not None:
        lease.take(len(inflated))
    return inflated
