"""Proxy progress counters, written atomically to `progress.json` for `hpceval status`.

The file is replaced (temp file + `os.replace`) every ~2 s and at exit, so a reader on another
node sees either the previous or the next complete document, never a partial one. Schema 1:

    {
      "schema": 1,
      "state": "running" | "stopped",
      "host": "node001", "pid": 4242,
      "started": "2026-01-01T12:00:00Z", "updated": "2026-01-01T12:05:00Z",   (UTC)
      "requests": {
        "done": 1200,        answered 2xx (from an instance or from the cache)
        "cached": 700,       of `done`, answered from the cache
        "failed": 3,         answered with an error status (4xx/5xx, including the proxy's 503)
        "in_flight": 64,     received, not yet answered
        "expected": 5000     --expected-requests, or null
      },
      "rate_per_s": 41.5,    (done + failed) per second over the last `window_s` seconds
      "window_s": 30.0,
      "eta_s": 90.0,         (expected - done - failed) / rate, or null
      "upstream_error": null | "all 2 upstream instances are down: http://... (reason); ...",
      "no_upstream": {"count": 0, "last_at": null, "last_reason": null},
      "busy": {"seconds": 81.5,            time with at least one request in flight
               "first_at": 1767268800.25,  Unix time of the first request, or null
               "idle_at": 1767268890.5},   Unix time in-flight last fell to 0, or null
      "instances": [{"url": "http://node002:8000", "state": "up" | "down", "outstanding": 32,
                     "done": 600, "failures": 0, "last_error": null, "down_since": null}],
      "cache": {"entries": 1900, "loaded": 700, "torn_lines": 0, "corrupt_hits": 0,
                "shards_open": 3, "write_error": null, "index_bytes": 22800} | null
    }
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpceval.storage import atomic_write_json

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def write_atomic(path: Path, data: dict[str, Any], durable: bool = False) -> None:
    """Replace `path` with `data` as JSON; fsync'd only at exit (every 2 s: needless NFS trips)."""
    atomic_write_json(path, data, durable=durable)


class Progress:
    """Counters updated by the proxy's request path (plain ints: one event loop, no locks).

    ``in_flight`` also keeps the server's busy time (seconds with at least one request in
    flight; an allocation is billed for the rest too): what benchmarks/suite_bench.py reads as
    the idle share of a job. Only its 0 <-> 1 transitions cost a clock read; the clock is Unix
    time, not monotonic, because a reader sets it against the job log's times."""

    def __init__(self, expected: int | None = None, window_s: float = 30.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.expected = expected
        self.window_s = window_s
        self.done = 0
        self.cached = 0
        self.failed = 0
        self._in_flight = 0
        self._clock = clock
        self.busy_s = 0.0  # closed busy periods; the open one is added by busy()
        self.busy_since: float | None = None
        self.first_at: float | None = None
        self.idle_at: float | None = None
        self.no_upstream = 0
        self.last_no_upstream: tuple[float, str] | None = None
        self.started = time.time()
        self._samples: deque[tuple[float, int]] = deque()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @in_flight.setter
    def in_flight(self, value: int) -> None:
        if value > 0 and self._in_flight <= 0:
            self.busy_since = now = self._clock()
            if self.first_at is None:
                self.first_at = now
        elif value <= 0 < self._in_flight and self.busy_since is not None:
            self.idle_at = now = self._clock()
            self.busy_s += max(0.0, now - self.busy_since)
            self.busy_since = None
        self._in_flight = value

    def busy(self) -> dict[str, float | None]:
        """The busy-time record of the snapshot (the open busy period counted up to now)."""
        seconds = self.busy_s
        if self.busy_since is not None:
            seconds += max(0.0, self._clock() - self.busy_since)
        return {"seconds": round(seconds, 3),
                "first_at": None if self.first_at is None else round(self.first_at, 3),
                "idle_at": None if self.idle_at is None else round(self.idle_at, 3)}

    def record_no_upstream(self, reason: str) -> None:
        self.no_upstream += 1
        self.last_no_upstream = (time.time(), reason)

    def rate(self, now: float | None = None) -> float:
        """Answers per second over the last window (sampled at each snapshot)."""
        now = time.monotonic() if now is None else now
        answered = self.done + self.failed
        self._samples.append((now, answered))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
            self._samples.popleft()
        t0, n0 = self._samples[0]
        return (answered - n0) / (now - t0) if now > t0 else 0.0

    def snapshot(
        self,
        state: str = "running",
        instances: list[dict[str, Any]] | None = None,
        upstream_error: str | None = None,
        cache: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        rate = self.rate()
        remaining = None if self.expected is None else max(
            0, self.expected - self.done - self.failed)
        last_at, last_reason = self.last_no_upstream or (None, None)
        return {
            "schema": SCHEMA_VERSION,
            "state": state,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": _iso(self.started),
            "updated": _iso(time.time()),
            "requests": {"done": self.done, "cached": self.cached, "failed": self.failed,
                         "in_flight": self.in_flight, "expected": self.expected},
            "rate_per_s": round(rate, 3),
            "window_s": self.window_s,
            "eta_s": round(remaining / rate, 1) if remaining is not None and rate > 0 else None,
            "upstream_error": upstream_error,
            "no_upstream": {"count": self.no_upstream,
                            "last_at": None if last_at is None else _iso(last_at),
                            "last_reason": last_reason},
            "busy": self.busy(),
            "instances": instances or [],
            "cache": cache,
        }


async def run_writer(
    path: Path, make_snapshot: Callable[[], dict[str, Any]], interval: float
) -> None:
    """Forever: write a snapshot every `interval` s (cancelled at shutdown, which writes last)."""
    while True:
        try:
            # The write runs in a thread: on NFS, close() and rename are server round trips.
            await asyncio.to_thread(write_atomic, path, make_snapshot())
        except Exception:  # a file system hiccup (or a bug here) must not stop the updates
            log.exception("could not write progress file %s", path)
        await asyncio.sleep(interval)
