"""What the server did for one task: the in-job proxy's runtime statistics, defined once.

The job script sends each task's requests to the proxy under ``/task/<task key>/...``
(``contract.TASK_ROUTE``); the proxy takes the prefix off (the servers, the cache and the
interceptors see the usual path), counts every answer into that task's ``TaskStats`` and writes
them to ``models/<key>/tasks/<task>/runtime.json`` (``contract.RUNTIME_FILE``) every few seconds
and at exit, atomically. ``runtime_view.load_runtime`` (``read_runtime``: the facts) checks and
reads it. Schema 1::

    {"schema": 1, "updated": "2026-01-01T12:05:00Z",
     "requests": 120, "errors": 2,       every answer to the task; errors: not 2xx
     "cached": 40,                       answered from the response cache (a resumed job)
     "latency_ms": {"p50": 210.0, "p90": 900.0, "p99": 1500.0} | null,   fresh answers only
     "prompt_tokens": 50000, "completion_tokens": 12000,   from each answer's "usage"
     "tokens_per_s": 85.2 | null,        completion tokens of fresh answers / their time span
     "choices": 120,                     generated choices in 2xx answers (n > 1 gives several)
     "scored": 0,                        choices of scoring requests (echo: true, lm-eval's
                                         log-likelihoods): their "length" ends cut nothing,
                                         so they are counted apart from generations
     "finish_reasons": {"stop": 100, "length": 20},
     "empty_with_reasoning": 0,          chat choices whose content was empty while
                                         reasoning_content (or vLLM's "reasoning") held text,
                                         as the harness got them (after the interceptors)
     "streamed": 0,                      streamed answers: counted, not looked into
     "infra_errors": 0,                  answers that still failed after the proxy's retries
                                         (what it retries: 429, 5xx, no connection, timeout):
                                         the harness may have scored them as wrong answers
     "infra_causes": {"502 connection failed or lost": 1},   those, by cause
     "client_closed": 0,                 requests the harness gave up on before an answer
     "retries": 2,                       attempts the proxy made again (any request's, those
     "retry_causes": {"500 server error": 2}}   that then succeeded too), by cause

The proxy writes a task's file before it sends an infrastructure failure back, so once the
harness has exited the file counts every one of them (``hpceval.job collect`` fails the task
when there are more than it allows: ``evaluation.infra_errors_allowed``).

A resumed task's requests come again (answered from the cache): the file a later job writes
holds the whole task.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpceval.contract import RUNTIME_FILE, TASK_KEY

SCHEMA = 1
KEY_RE = TASK_KEY  # every task key config.tasks makes (contract)
CLIENT_CLOSED = 499  # nginx's code for a request its client gave up on: no answer was sent
REASONING_FIELDS = ("reasoning_content", "reasoning")  # vLLM renamed the first to the second


def _percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (numpy's "higher" method)."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


class TaskStats:
    """One task's counters (plain attributes: one event loop updates them)."""

    def __init__(self) -> None:
        self.requests = self.errors = self.cached = self.streamed = 0
        self.prompt_tokens = self.completion_tokens = self.fresh_tokens = 0
        self.choices = self.scored = self.empty_with_reasoning = 0
        self.finish_reasons: dict[str, int] = {}
        self.infra_errors = self.client_closed = self.retries = 0
        self.infra_causes: dict[str, int] = {}
        self.retry_causes: dict[str, int] = {}
        self.latencies: list[float] = []
        self.first: float | None = None
        self.last: float | None = None

    def record(self, status: int, seconds: float, cached: bool, answer: Any,
               streamed: bool = False, scoring: bool = False, infra: str | None = None,
               retries: Mapping[str, int] | None = None) -> None:
        """`infra`: the cause, when the answer is an infrastructure failure (the proxy's call:
        what it retries, still failing after its retries); `retries`: the attempts the proxy
        made again for this request, by cause."""
        self.requests += 1
        for cause, n in (retries or {}).items():
            self.retries += n
            self.retry_causes[cause] = self.retry_causes.get(cause, 0) + n
        if not 200 <= status < 300:
            self.errors += 1
            if infra is not None:
                self.infra_errors += 1
                self.infra_causes[infra] = self.infra_causes.get(infra, 0) + 1
            elif status == CLIENT_CLOSED:
                self.client_closed += 1
            return
        self.cached += cached
        self.streamed += streamed
        now = time.time()
        if not cached:
            self.latencies.append(seconds)
            self.first = now - seconds if self.first is None else min(self.first, now - seconds)
            self.last = now
        if isinstance(answer, dict):
            self._answer(answer, cached, scoring)

    def _answer(self, answer: dict[str, Any], cached: bool, scoring: bool) -> None:
        usage = answer.get("usage")
        if isinstance(usage, dict):
            prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
            self.prompt_tokens += prompt if isinstance(prompt, int) else 0
            if isinstance(completion, int):
                self.completion_tokens += completion
                self.fresh_tokens += 0 if cached else completion
        for choice in answer.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            if scoring:
                self.scored += 1
                continue
            self.choices += 1
            reason = choice.get("finish_reason")
            name = reason if isinstance(reason, str) else "none"
            self.finish_reasons[name] = self.finish_reasons.get(name, 0) + 1
            message = choice.get("message")
            if isinstance(message, dict) and not (message.get("content") or "").strip() \
                    and any(isinstance(message.get(f), str) and message[f].strip()
                            for f in REASONING_FIELDS):
                self.empty_with_reasoning += 1

    def to_json(self) -> dict[str, Any]:
        ordered = sorted(self.latencies)
        latency = {f"p{q}": round(_percentile(ordered, q) * 1000, 1) for q in (50, 90, 99)} \
            if ordered else None
        span = (self.last - self.first) if self.first is not None and self.last is not None \
            else 0.0
        return {"schema": SCHEMA, "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "requests": self.requests, "errors": self.errors, "cached": self.cached,
                "latency_ms": latency, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "tokens_per_s": round(self.fresh_tokens / span, 2) if span > 0 else None,
                "choices": self.choices, "scored": self.scored, "finish_reasons": dict(sorted(
                    self.finish_reasons.items())),
                "empty_with_reasoning": self.empty_with_reasoning, "streamed": self.streamed,
                "infra_errors": self.infra_errors,
                "infra_causes": dict(sorted(self.infra_causes.items())),
                "client_closed": self.client_closed, "retries": self.retries,
                "retry_causes": dict(sorted(self.retry_causes.items()))}


def write_runtime(task_dir: Path, data: dict[str, Any], durable: bool = False) -> None:
    """Replace task_dir/runtime.json (temp file beside it, then os.replace)."""
    path = task_dir / RUNTIME_FILE
    # the thread too: the proxy writes from worker threads (proxy.stats)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1)
        handle.write("\n")
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(tmp, path)


def read_runtime(task_dir: str) -> dict[str, Any] | None:
    """The task's runtime statistics, checked (results.runtime_view: read once through one
    descriptor, yours, at most 1 MiB, every field of its kind), or None (no proxy, an older
    run, a file that is not yours, too large or malformed)."""
    from hpceval.results.runtime_view import load_runtime

    return load_runtime(task_dir).facts
