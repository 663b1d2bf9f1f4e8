"""One in-flight budget per model server: at most N requests out per instance, the rest wait.

Harness `parallelism` summed over a model's concurrent tasks (and its data-parallel instances)
is either too low, leaving a GPU's continuous batch half empty, or too high, queueing requests
inside vLLM until they time out. The proxy owns the concurrency instead: `Admission` lets at
most ``limit x instances up`` requests through, and the ones over it wait in the proxy, first
come first served within a task and round-robin across tasks (a task with 256 requests queued
does not starve one with 4).

`AimdLimit` moves ``limit`` while the run goes (additive increase, multiplicative decrease):

* each completion reports its latency and outcome (ok, error: 5xx/429, timeout);
* once per window (as many completions as the limit: about one round trip of the whole
  budget) the window is judged. An error or a timeout cuts the limit to ``decrease`` x;
  requests waiting inside the server (vLLM's ``vllm:num_requests_waiting`` from /metrics,
  polled by job.server_metrics, or KV-cache use at ``kv_high``) mean the batch is full: a
  gentler cut (``queue_decrease``);
  otherwise the window's median latency above ``latency_tolerance`` x the lowest median seen
  means requests queue somewhere unseen (an external API without /metrics): the same cut;
  else the limit grows by one (doubling until the first cut: slow start).

``Budget(fixed=N)`` keeps N (no adaptation): the fixed budget stays available. The decision
logic has no clock and no I/O, so benchmarks/budget_sim.py drives it against a simulated
continuous-batching server, and the proxy's event loop drives it for real.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import statistics
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from hpceval.job.proxy.balancer import Balancer

Outcome = Literal["ok", "error", "timeout"]

log = logging.getLogger(__name__)


@dataclass
class AimdLimit:
    """The per-instance limit and the rule that moves it (see the module docstring)."""

    limit: float = 8.0
    minimum: float = 1.0
    maximum: float = 1024.0
    fixed: bool = False
    decrease: float = 0.5
    queue_decrease: float = 0.9
    latency_tolerance: float = 2.0
    kv_high: float = 0.99
    slow_start: bool = True
    _latencies: list[float] = field(default_factory=list)
    _bad: int = 0
    _queued: bool = False
    _metrics_seen: bool = False
    _best_median: float | None = None
    cuts: int = 0

    @property
    def value(self) -> int:
        return max(1, int(self.limit))

    def on_result(self, latency_s: float, outcome: Outcome) -> None:
        if self.fixed:
            return
        self._latencies.append(latency_s)
        if outcome != "ok":
            self._bad += 1
        if len(self._latencies) >= self.value:
            self._judge()

    def on_metrics(self, waiting: float, running: float, kv_usage: float | None = None) -> None:
        """The server's own queue: requests it holds back from the batch mean the batch is full."""
        del running  # running is what the budget admits; only its excess (waiting) is a signal
        self._metrics_seen = True
        if waiting > 0 or (kv_usage is not None and kv_usage >= self.kv_high):
            self._queued = True

    def _judge(self) -> None:
        median = statistics.median(self._latencies)
        # Latency grows with a continuous batch even below its cap, so it is a signal only
        # where the server's own queue is unknown (an external API without /metrics).
        slow = (not self._metrics_seen and self._best_median is not None
                and median > self.latency_tolerance * self._best_median)
        if self._bad:
            self._cut(self.decrease)
        elif self._queued or slow:
            self._cut(self.queue_decrease)
        else:
            step = self.limit if self.slow_start else 1.0
            self.limit = min(self.maximum, self.limit + step)
        if self._best_median is None or median < self._best_median:
            self._best_median = median
        self._latencies.clear()
        self._bad = 0
        self._queued = False

    def _cut(self, factor: float) -> None:
        self.slow_start = False
        self.cuts += 1
        self.limit = max(self.minimum, self.limit * factor)


class LimitLog:
    """The proxy log's line for an adaptive limit: one when it has changed, at most one per
    ``every`` seconds (a change inside the interval is logged at the first completion after
    it), so the log says where the budget went without a line per request. The caller gives
    the clock: the decision logic above stays without one."""

    def __init__(self, every: float = 10.0) -> None:
        self.every = every
        self.shown: int | None = None
        self.at = float("-inf")

    def note(self, limit: AimdLimit, now: float, instances: int) -> str | None:
        value = limit.value
        if limit.fixed or value == self.shown or now - self.at < self.every:
            return None
        self.shown, self.at = value, now
        message = (f"in-flight budget: {value} per instance ({value * max(1, instances)} "
                   f"in all, {limit.cuts} cut(s) so far)")
        log.info("%s", message)
        return message


class Admission:
    """The gate in front of the balancer: ``async with admission.slot(task)`` around a request.

    At most ``limit.value x instances()`` requests are inside; waiters are served round-robin
    across tasks, in arrival order within one."""

    def __init__(self, limit: AimdLimit, instances: int | Callable[[], int] = 1) -> None:
        self.limit = limit
        # a number, or what the balancer says is up now (instances go down and come back)
        self._instances = instances
        self.inside = 0
        self._queues: collections.OrderedDict[str, collections.deque[asyncio.Future[None]]] = (
            collections.OrderedDict())

    @property
    def instances(self) -> int:
        return self._instances() if callable(self._instances) else self._instances

    @property
    def capacity(self) -> int:
        return self.limit.value * max(1, self.instances)

    @property
    def waiting(self) -> int:
        return sum(len(q) for q in self._queues.values())

    @asynccontextmanager
    async def slot(self, task: str = "") -> AsyncIterator[None]:
        await self._enter(task)
        try:
            yield
        finally:
            self.inside -= 1
            self._wake()

    async def _enter(self, task: str) -> None:
        if self.inside < self.capacity and not self._queues:
            self.inside += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queues.setdefault(task, collections.deque()).append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.inside -= 1  # admitted and cancelled at once: give the place back
                self._wake()
            else:
                self._drop(task, waiter)
            raise

    def _drop(self, task: str, waiter: asyncio.Future[None]) -> None:
        queue = self._queues.get(task)
        if queue is not None and waiter in queue:
            queue.remove(waiter)
            if not queue:
                del self._queues[task]

    def _wake(self) -> None:
        """Admit waiters while there is room, one task's oldest at a time, rotating tasks."""
        while self.inside < self.capacity and self._queues:
            task, queue = next(iter(self._queues.items()))
            waiter = queue.popleft()
            if queue:
                self._queues.move_to_end(task)  # the next admission goes to the next task
            else:
                del self._queues[task]
            if waiter.cancelled():
                continue
            self.inside += 1
            waiter.set_result(None)


def admission_for(budget: str, balancer: Balancer) -> Admission | None:
    """The proxy's gate for its `budget` setting ("off", "adaptive" or a number)."""
    if budget == "off":
        return None
    limit = AimdLimit() if budget == "adaptive" else AimdLimit(limit=int(budget), fixed=True)
    return Admission(limit, lambda: sum(1 for i in balancer.instances if i.up))


# The adaptive budget wants the servers' queue every second (job.server_metrics polls them).
METRICS_INTERVAL_S = 1.0
