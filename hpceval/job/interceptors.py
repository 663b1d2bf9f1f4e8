"""The proxy's side of the interceptor chain: run it on bodies, and log request/response pairs.

The interceptors themselves (their config, their checks, what they do to a body) are declared
once in ``hpceval.interceptors``, one class each; the job passes the active ones as JSON
(``--interceptors``). Request interceptors run, in chain order, on the bodies of the OpenAI
endpoints the proxy understands (chat, completions, embeddings) *before* the cache key is
computed, because they change what the model sees: rename params -> remove params -> add params
-> system prompt. Response interceptors run on every 2xx JSON answer, fresh or from the cache
(the cache stores what the server said, so changing them between runs needs no new
generations). Streamed requests get the request interceptors only; their answers pass through
untouched. Parameter names may be dotted to reach nested fields:
`chat_template_kwargs.enable_thinking`.

A task with a chain of its own (NeMo Evaluator's per-task adapter_config, a task's
`interceptors`) asks the proxy under its task route, `/task/<task key>/...` (contract.TASK_ROUTE;
proxy.stats takes it off): that task's chain applies (`Routes`), and the rest goes upstream as
for any other task. The cache key
carries the chain's request stage (`request_chain`), so answers are shared only between tasks
whose chains change requests the same way.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from hpceval.interceptors import Interceptor, request_chain
from hpceval.interceptors.base import CHAT as CHAT
from hpceval.interceptors.base import COMPLETIONS as COMPLETIONS
from hpceval.interceptors.base import Body
from hpceval.job.cache import request_key

log = logging.getLogger(__name__)


Prepared = tuple[dict[str, Any], bytes, bytes]  # body after interceptors, its bytes, its key


@dataclass(frozen=True)
class Interceptors:
    """One chain, split by stage (the proxy holds one per route: per task)."""

    request: tuple[Interceptor, ...] = ()
    response: tuple[Interceptor, ...] = ()
    key_chain: str = ""  # request_chain(chain): what the cache key carries of it
    route: str = ""  # the key of the task it is the own chain of; "" for the job's

    def on_request(self, path: str, body: Body) -> None:
        for interceptor in self.request:
            interceptor.on_request(path, body)

    def on_response(self, path: str, body: Body) -> bool:
        changed = False
        for interceptor in self.response:
            changed = interceptor.on_response(path, body) or changed
        return changed


def build_interceptors(chain: Sequence[Interceptor], route: str = "") -> Interceptors:
    return Interceptors(tuple(i for i in chain if i.stage == "request"),
                        tuple(i for i in chain if i.stage == "response"), request_chain(chain),
                        route)


def prepare(path: str, raw: bytes, chain: Interceptors) -> Prepared | None:
    """Parse, intercept, hash: once per request (the proxy runs it in a worker thread for a
    large body). None: the body is not a JSON object."""
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    if chain.request:
        chain.on_request(path, body)
        raw = json.dumps(body, ensure_ascii=False).encode()
    return body, raw, request_key(path, body, chain.key_chain)


class Routes:
    """The job's chain, and each task's own by its key (its requests under /task/<key>/)."""

    def __init__(self, chain: Sequence[Interceptor],
                 tasks: Mapping[str, Sequence[Interceptor]]) -> None:
        self.default = build_interceptors(chain)
        self.tasks = {key: build_interceptors(c, key) for key, c in tasks.items()}

    def chain(self, task: str | None) -> Interceptors:
        """The chain for a request under /task/<task>/ (proxy.stats takes the route off);
        the job's for a task without one of its own, or a request outside any task route."""
        return self.tasks.get(task, self.default) if task is not None else self.default


class RequestLog:
    """The first N request/response pairs of each route as JSONL, N its chain's log_requests
    (headers, hence API keys, never logged); a task's own route's entries name the task."""

    def __init__(self, path: Path | None, limit: int | Mapping[str, int]) -> None:
        self.path = path
        limits = {"": limit} if isinstance(limit, int) else dict(limit)
        self.left = {route: n if path is not None else 0 for route, n in limits.items()}
        self._file: IO[str] | None = None

    @property
    def remaining(self) -> int:
        return sum(n for n in self.left.values() if n > 0)

    def record(self, path: str, request: Body | None, status: int, response: bytes,
               cached: bool, seconds: float, route: str = "") -> None:
        if self.left.get(route, 0) <= 0:
            return
        self.left[route] -= 1
        try:
            answer: Any = json.loads(response)
        except ValueError:
            answer = response.decode("utf-8", "replace")
        entry = {"t": round(time.time(), 3), "path": path, "status": status, "cached": cached,
                 "ms": round(seconds * 1000, 1), "request": request, "response": answer,
                 **({"task": route} if route else {})}
        try:
            if self._file is None and self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("a", encoding="utf-8")
            if self._file is not None:
                self._file.write(json.dumps(entry, ensure_ascii=False) + "\n")
                self._file.flush()
        except OSError as exc:
            log.warning("request log disabled: %s", exc)
            self.left = {}
        if self.remaining <= 0:
            self.close()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
