"""Holding requests while the model loads (`--hold S`, evaluation.overlap_load).

With overlap on, the job starts the proxy and the harnesses as soon as the servers are
launched, so that the harnesses' start-up (imports, task loading: a minute on a loaded node)
runs beside the model load instead of after it. Until the job has seen every instance's ready
line and health answer (health.j2's wait) and sends SIGUSR2, no request is forwarded: a request
that arrives waits here, before its body is read, so it holds no body bytes (the memory bounds
stay as they are) and nothing, least of all the job's token, reaches a port whose server has
not said it serves (issue 24's rule). Only the job's signal releases: the proxy never decides
itself that a server is ready (that rule lives in the job's health wait alone).

A held request is bounded: once `limit` seconds have passed since the proxy started (the job
passes deployment.health_timeout plus a margin; the job itself fails at health_timeout and
stops the harnesses) it gets 503; a client that hung up meanwhile (a harness timeout) is
dropped at the next check, so its retry is the one that is forwarded, not both.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from aiohttp import web

log = logging.getLogger(__name__)

CHECK_S = 1.0  # how often a held request looks whether its client is still there


class Hold:
    """Released once (`release`); `wait` returns None to go on, or why the request is refused."""

    def __init__(self, limit: float | None) -> None:
        self.limit = limit  # None: nothing is held
        self.started = time.monotonic()
        self.held = 0  # requests waiting now
        self.dropped = 0  # held requests whose client went away before the release
        self._released = asyncio.Event()
        if limit is None:
            self._released.set()

    @property
    def active(self) -> bool:
        return not self._released.is_set()

    def release(self) -> None:
        if self.active:
            log.info("instances ready (the job's signal after %.1f s): forwarding %d held "
                     "request(s)", time.monotonic() - self.started, self.held)
        self._released.set()

    async def released(self) -> None:
        await self._released.wait()

    async def wait(self, request: web.BaseRequest) -> str | None:
        if not self.active:
            return None
        assert self.limit is not None
        deadline = self.started + self.limit
        self.held += 1
        try:
            while self.active:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return (f"the model server instances were not ready {self.limit:g} s after "
                            "the proxy started (deployment.health_timeout)")
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._released.wait(), min(CHECK_S, remaining))
                if _gone(request):
                    self.dropped += 1
                    return "the client closed the connection while the model loaded"
            return None
        finally:
            self.held -= 1


def _gone(request: web.BaseRequest) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()
