"""The proxy's side of the runtime statistics: which task a request is for, and the files.

A request under ``/task/<key>/`` (contract.TASK_ROUTE) is for task <key>: the prefix comes off
before anything else looks at the path (routes, cache keys, interceptors, upstreams), and the
answer is counted in that task's ``results.runtime.TaskStats``. The counts go to
``<tasks dir>/<key>/runtime.json`` (the one definition: results.runtime) for a key whose task
directory exists, in a thread off the event loop: every few seconds when they changed, and at
exit. A key that is not a task of this job (no such directory) is served, never written.
An infrastructure failure is written before its answer goes back (``flush``): once a harness
has exited, its task's file counts every failure it was sent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from hpceval.contract import TASK_ROUTE
from hpceval.job.proxy.forward import INFRA_CAUSES
from hpceval.results.runtime import CLIENT_CLOSED, KEY_RE, TaskStats, write_runtime

log = logging.getLogger(__name__)
PREFIX = TASK_ROUTE + "/"


@dataclass
class Answered:
    """One request of a task while the proxy answers it: what it was, then how it went."""

    key: str | None  # its task key (None: not a task's request, not counted)
    scoring: bool  # echo: true (log-likelihoods), counted apart from generations
    streamed: bool
    retries: Mapping[str, int]  # its attempts made again, by cause (RequestContext)
    started: float = field(default_factory=time.monotonic)
    status: int = CLIENT_CLOSED  # until an answer is set: the client went away, or it failed
    cached: bool = False
    answer: Any = None  # the parsed answer, where there is one
    counted: bool = False


class TaskRecorder:
    def __init__(self, tasks_dir: Path | None) -> None:
        self.tasks_dir = tasks_dir
        self.stats: dict[str, TaskStats] = {}
        self._dirty: set[str] = set()
        # one write at a time, each of a snapshot taken after the one before was written: an
        # older snapshot never replaces a newer one on disk
        self._writing = asyncio.Lock()

    def route(self, request: web.BaseRequest) -> tuple[str | None, web.BaseRequest]:
        """(the task key or None, the request with the prefix taken off)."""
        path = request.rel_url.raw_path
        if not path.startswith(PREFIX):
            return None, request
        key, slash, rest = path[len(PREFIX):].partition("/")
        if not slash or KEY_RE.fullmatch(key) is None:
            return None, request  # not a task route: the guard answers 404 for the path
        query = request.rel_url.raw_query_string
        return key, request.clone(rel_url="/" + rest + (f"?{query}" if query else ""))

    def record(self, key: str | None, status: int, seconds: float, cached: bool,
               answer: object, streamed: bool = False, scoring: bool = False,
               infra: str | None = None, retries: Mapping[str, int] | None = None) -> None:
        if key is None:
            return
        stats = self.stats.get(key)
        if stats is None:
            stats = self.stats[key] = TaskStats()
        stats.record(status, seconds, cached, answer, streamed, scoring, infra, retries)
        self._dirty.add(key)

    async def before_sending(self, done: Answered) -> None:
        """An answer about to go back: an infrastructure failure (what the proxy retries,
        still failing after its retries) is counted and on disk before the harness hears of
        it, so `hpceval.job collect`, which runs once the harness has exited, counts every
        failure the harness scored."""
        cause = INFRA_CAUSES.get(done.status)
        if done.key is not None and cause is not None:
            self.count(done, infra=cause)
            await self.flush()

    def count(self, done: Answered, infra: str | None = None) -> None:
        """Count the request once (at the latest when its handler ends)."""
        if done.counted:
            return
        done.counted = True
        self.record(done.key, done.status, time.monotonic() - done.started, done.cached,
                    done.answer, done.streamed, done.scoring, infra, done.retries)

    def snapshot(self) -> list[tuple[Path, dict[str, object]]]:
        """The changed tasks' documents, built on the event loop (the counters change there)."""
        if self.tasks_dir is None:
            return []
        dirty, self._dirty = self._dirty, set()
        return [(self.tasks_dir / key, self.stats[key].to_json()) for key in sorted(dirty)]

    def write(self, documents: list[tuple[Path, dict[str, object]]],
              durable: bool = False) -> None:
        """Blocking file writes: in a thread while serving, directly at exit."""
        for task_dir, data in documents:
            if not task_dir.is_dir():
                continue
            try:
                write_runtime(task_dir, data, durable=durable)
            except OSError as exc:
                log.error("could not write %s: %s", task_dir, exc)

    async def flush(self, durable: bool = False) -> None:
        """Write the changed tasks' files now, in a thread. Callers that come while a write
        runs share the next one (its snapshot holds what each of them recorded)."""
        async with self._writing:
            documents = self.snapshot()
            if documents:
                await asyncio.to_thread(self.write, documents, durable)

    async def run_writer(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            if self._dirty:
                await self.flush()
