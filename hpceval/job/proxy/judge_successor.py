"""A sweep element's judge proxy follows the judge job's successor.

The sweep's judge is a job of its own (scope: sweep); capped by the partition's MaxTime it
continues in a successor job at its walltime, on other nodes and with a new token. An element
still running then would lose its judge: its proxy was started with the first job's URLs and
token. With ``--judge-dir`` the proxy instead re-reads the judge's record (endpoint.json and
token, through hpceval.job.judge_endpoint, the one reader that decides what is trusted) when
the judge fails it: every instance refused or dropped the connection (UpstreamFailure), or an
instance answered 401 (a successor on the same address, with a new token). A judge that only
timed out is slow, not gone: a new record is followed then, but none is waited for.

A record other than the one in use switches the proxy to it and the request is sent again.
While there is none (the old judge is gone, the successor still loads), requests wait, all of
them on one poll of the folder, for at most ``wait`` seconds (the judge's health_timeout);
then they fail with a 503 that says so, and later failures do not wait again. A record that
is not trusted (another user's file, a writable one) never redirects the run: it is logged
and waited past as if absent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from hpceval.contract import AUX_ENDPOINT_FILE
from hpceval.job.judge_endpoint import (
    EndpointMissing,
    EndpointUntrusted,
    JudgeEndpoint,
    read_endpoint,
)
from hpceval.job.proxy.balancer import Balancer
from hpceval.job.proxy.forward import Answer, UpstreamFailure
from hpceval.job.proxy.instance import Instance

log = logging.getLogger(__name__)

Attempt = Callable[[str | None], Awaitable[Answer]]  # one send with the given upstream token


class JudgeSuccessor:
    def __init__(self, folder: Path, balancer: Balancer, token: str | None, wait: float,
                 poll: float = 2.0) -> None:
        self.folder = folder
        self.balancer = balancer
        self.token = token  # the token the judge in use requires
        self.wait = wait
        self.poll = poll
        self.generation = 0  # bumped at each switch: a request knows whether it is stale
        self.lost: str | None = None  # set once a wait ran out: later failures do not wait
        self._problem: str | None = None  # why the record there was last refused
        # the record the job script started it with (its URLs): the certificate they must
        # present (a judge front's https). None there: nothing to pin, and an https URL then
        # fails every connection (no authority signed the judge's own certificate).
        first = self._read()
        pin = first.pin if first is not None and set(first.urls) == {
            i.url for i in balancer.instances} else None
        self._in_use: tuple[tuple[str, ...], str | None, bytes | None] = (
            tuple(i.url for i in balancer.instances), token, pin)
        for inst in balancer.instances:  # each judge's instances carry that judge's token
            inst.token, inst.pin = token, pin
        self._waiting: asyncio.Future[bool] | None = None

    async def send(self, attempt: Attempt) -> Answer:
        """`attempt` against the judge in use, and again against each successor it switches to."""
        while True:
            seen = self.generation
            try:
                answer = await attempt(self.token)
            except UpstreamFailure as exc:
                # 502/503: refused, reset, none up (the judge is gone); 504: it is there but
                # slow, so only a record already replaced is followed, none is waited for
                gone = exc.status != 504
                if await self._moved_on(seen, wait=gone):
                    continue
                if not gone:
                    raise
                raise UpstreamFailure(503, self._gone(exc.reason)) from None
            if answer.status == 401 and await self._moved_on(seen, wait=False):
                continue  # the record changed under us: a new token, maybe on the same port
            return answer

    def _gone(self, reason: str) -> str:
        return (f"the sweep's judge is gone ({reason}) and no successor published "
                f"{self.folder}/{AUX_ENDPOINT_FILE} within {self.wait:g} s: {self.lost or 'none'}")

    async def _moved_on(self, seen: int, wait: bool) -> bool:
        """True once the proxy uses a record other than the one of generation `seen`."""
        if self.generation != seen:
            return True  # another request switched meanwhile
        if not wait or self.lost is not None:
            return self._adopt(await asyncio.to_thread(self._read))
        if self._waiting is None:
            self._waiting = asyncio.ensure_future(self._wait_for_record())
        return await asyncio.shield(self._waiting)

    async def _wait_for_record(self) -> bool:
        deadline = time.monotonic() + self.wait
        log.warning("the sweep's judge failed; waiting up to %g s for its successor's record "
                    "in %s", self.wait, self.folder)
        try:
            while True:
                if self._adopt(await asyncio.to_thread(self._read)):
                    return True
                if time.monotonic() >= deadline:
                    self.lost = self._problem or f"no new record after {self.wait:g} s"
                    log.error("the sweep's judge did not come back within %g s", self.wait)
                    return False
                await asyncio.sleep(min(self.poll, max(0.0, deadline - time.monotonic())))
        finally:
            self._waiting = None

    def _read(self) -> JudgeEndpoint | None:
        """The record, if there is a trusted one (in a thread: the folder is on shared storage)."""
        try:
            return read_endpoint(self.folder)
        except EndpointMissing:
            return None
        except EndpointUntrusted as exc:
            if self._problem != str(exc):
                log.error("ignoring the judge's record: %s", exc)
            self._problem = str(exc)
            return None

    def _adopt(self, record: JudgeEndpoint | None) -> bool:
        """Switch to `record` if it is not the one in use (on the event loop)."""
        if record is None or (record.urls, record.token, record.pin) == self._in_use:
            return False  # none, or the record of the judge that just failed us
        # New Instance objects: the old ones are down for good (a job's servers never come
        # back), and requests still out on them release into those objects, not these.
        # Each carries its judge's token: a request built with the old one that is retried on
        # these (another request switched meanwhile) must not take it to the successor.
        self.balancer.instances = [Instance(url, token=record.token, pin=record.pin)
                                   for url in record.urls]
        self.token = record.token
        self._in_use = (record.urls, record.token, record.pin)
        self.generation += 1
        self.lost = self._problem = None
        log.warning("switched to the sweep judge's successor (job %s): %s",
                    record.job_id or "?", ", ".join(record.urls))
        return True
