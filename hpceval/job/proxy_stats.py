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
from collections.abc import Mapping
from pathlib import Path

from aiohttp import web

from hpceval.contract import TASK_ROUTE
from hpceval.results.runtime import KEY_RE, TaskStats, write_runtime

log = logging.getLogger(__name__)
PREFIX = TASK_ROUTE + "/"


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
