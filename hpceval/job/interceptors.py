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
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from hpceval.interceptors import Interceptor
from hpceval.interceptors.base import CHAT as CHAT
from hpceval.interceptors.base import COMPLETIONS as COMPLETIONS
from hpceval.interceptors.base import Body

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Interceptors:
    """One chain, split by stage (a proxy can hold one per route: per task)."""

    request: tuple[Interceptor, ...] = ()
    response: tuple[Interceptor, ...] = ()

    def on_request(self, path: str, body: Body) -> None:
        for interceptor in self.request:
            interceptor.on_request(path, body)

    def on_response(self, path: str, body: Body) -> bool:
        changed = False
        for interceptor in self.response:
            changed = interceptor.on_response(path, body) or changed
        return changed


def build_interceptors(chain: Sequence[Interceptor]) -> Interceptors:
    return Interceptors(tuple(i for i in chain if i.stage == "request"),
                        tuple(i for i in chain if i.stage == "response"))


class RequestLog:
    """The first `limit` request/response pairs as JSONL (headers, hence API keys, never logged)."""

    def __init__(self, path: Path | None, limit: int) -> None:
        self.path = path
        self.remaining = limit if path is not None else 0
        self._file: IO[str] | None = None

    def record(self, path: str, request: Body | None, status: int, response: bytes,
               cached: bool, seconds: float) -> None:
        if self.remaining <= 0:
            return
        self.remaining -= 1
        try:
            answer: Any = json.loads(response)
        except ValueError:
            answer = response.decode("utf-8", "replace")
        entry = {"t": round(time.time(), 3), "path": path, "status": status, "cached": cached,
                 "ms": round(seconds * 1000, 1), "request": request, "response": answer}
        try:
            if self._file is None and self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("a", encoding="utf-8")
            if self._file is not None:
                self._file.write(json.dumps(entry, ensure_ascii=False) + "\n")
                self._file.flush()
        except OSError as exc:
            log.warning("request log disabled: %s", exc)
            self.remaining = 0
        if self.remaining <= 0:
            self.close()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
