"""The in-job proxy's one reader of the servers' `/metrics`: the adaptive budget and the load
series both feed from it.

While the upstreams are the job's own servers (never an external API: its /metrics, if any, is
not the job's), every few seconds ``poll_metrics`` asks each up instance for its Prometheus
text, parses what is needed in one pass (``parse_vllm_metrics``) and hands the per-instance
figures to its sinks: the budget (``budget_sink``: waiting and running summed, KV use the
highest, every second while the budget adapts) and the load series (``LoadRecorder``:
``results.server_load`` defines its file). An instance that answers anything but 200 once (a
server without /metrics: not vLLM) is not asked again.

Token throughput comes from vLLM's counters ``vllm:generation_tokens_total`` and
``vllm:prompt_tokens_total``: per instance, the rise between two of its samples over the time
between them (``Throughput``). A counter lower than before is a restarted server: no rate
from that instance for that step (its next sample starts again from the new count).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpceval.results.server_load import LoadSeries, write_server_load

if TYPE_CHECKING:
    from hpceval.job.proxy.balancer import Balancer
    from hpceval.job.proxy.budget import Admission, AimdLimit
    from hpceval.job.proxy.config import ProxyConfig
    from hpceval.job.proxy.sessions import Sessions

log = logging.getLogger(__name__)

# vLLM's /metrics is tens of KB (histograms per model and engine); a text past this is not a
# server's to parse every few seconds on the event loop
TEXT_LIMIT = 4 << 20


@dataclass(frozen=True)
class Metrics:
    """One instance's figures from one /metrics text (vLLM's names; summed over its series,
    one per model name and engine; KV use their highest; None where the text had none)."""

    waiting: float = 0.0  # vllm:num_requests_waiting
    running: float = 0.0  # vllm:num_requests_running
    kv: float | None = None  # vllm:kv_cache_usage_perc (v0: gpu_cache_usage_perc), 0..1
    generation_tokens: float | None = None  # vllm:generation_tokens_total (a counter)
    prompt_tokens: float | None = None  # vllm:prompt_tokens_total (a counter)


# Only the wanted names, each followed by its labels or a blank: a longer name that starts
# the same (vllm:num_requests_waiting_by_reason) is not one of them, nor a "# HELP" line.
_SAMPLE = re.compile(
    r"^(vllm:(?:num_requests_waiting|num_requests_running|kv_cache_usage_perc"
    r"|gpu_cache_usage_perc|generation_tokens_total|prompt_tokens_total))"
    r"(?:\{[^}\n]*\})?[ \t]+(\S+)", re.MULTILINE)
_SUMMED = {"vllm:num_requests_waiting": "waiting", "vllm:num_requests_running": "running",
           "vllm:generation_tokens_total": "generation_tokens",
           "vllm:prompt_tokens_total": "prompt_tokens"}


def parse_vllm_metrics(text: str) -> Metrics:
    """vLLM's Prometheus /metrics text, in one pass (see Metrics)."""
    found: dict[str, float] = {}
    kv: float | None = None
    for match in _SAMPLE.finditer(text):
        name, value = match.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        if number != number or number in (float("inf"), float("-inf")):
            continue  # NaN or infinite: nothing a sum or a rate can use
        field = _SUMMED.get(name)
        if field is not None:
            found[field] = found.get(field, 0.0) + number
        else:
            kv = number if kv is None else max(kv, number)
    return Metrics(waiting=found.get("waiting", 0.0), running=found.get("running", 0.0), kv=kv,
                   generation_tokens=found.get("generation_tokens"),
                   prompt_tokens=found.get("prompt_tokens"))


Sink = Callable[[Mapping[str, Metrics]], None]


def poll_interval(config: ProxyConfig) -> float:
    """Seconds between polls: the configured ones, at most the budget's while it adapts."""
    from hpceval.job.proxy.budget import METRICS_INTERVAL_S

    if config.budget == "adaptive":
        return min(config.metrics_interval, METRICS_INTERVAL_S)
    return config.metrics_interval


def metrics_sinks(config: ProxyConfig, admission: Admission | None,
                  load: LoadRecorder | None) -> list[Sink]:
    """Who reads the polls: the adaptive budget and the load series; nobody where the
    upstream is an API outside the job (its /metrics, if any, is not the job's)."""
    if config.external_upstream:
        return []
    sinks: list[Sink] = []
    if admission is not None and not admission.limit.fixed:
        sinks.append(budget_sink(admission.limit))
    if load is not None:
        sinks.append(load)
    return sinks


async def poll_metrics(balancer: Balancer, sessions: Sessions, interval: float,
                       sinks: Sequence[Sink]) -> None:
    """Forever (cancelled at shutdown): every `interval` s, each up instance's /metrics, asked
    together, to every sink as {instance URL: Metrics}; a round where none answered is not
    handed on."""
    silent: set[str] = set()
    while True:
        await asyncio.sleep(interval)
        asked = [i for i in balancer.instances if i.up and i.url not in silent]
        texts = await asyncio.gather(*(_ask(i, sessions, interval, silent) for i in asked))
        found = {inst.url: parse_vllm_metrics(text)
                 for inst, text in zip(asked, texts, strict=True) if text is not None}
        if not found:
            continue
        for sink in sinks:
            try:
                sink(found)
            except Exception:  # a bug in one consumer must not stop the other's samples
                log.exception("a /metrics consumer failed")


async def _ask(inst: Any, sessions: Sessions, timeout: float, silent: set[str]) -> str | None:
    import aiohttp

    try:
        async with sessions.of(inst).get(inst.base + "/metrics",
                                         timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            if resp.status != 200:
                silent.add(inst.url)
                log.info("%s/metrics answered %d: not asked again", inst.url, resp.status)
                return None
            body = await resp.content.read(TEXT_LIMIT + 1)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
        return None  # down or slow this round: asked again next round
    if len(body) > TEXT_LIMIT:
        return None
    return body.decode("utf-8", "replace")


def combined(found: Mapping[str, Metrics]) -> tuple[float, float, float | None]:
    """The servers together: (waiting, running) summed over the instances, KV use the
    highest (the fullest cache is the one that queues next)."""
    kvs = [m.kv for m in found.values() if m.kv is not None]
    return (sum(m.waiting for m in found.values()), sum(m.running for m in found.values()),
            max(kvs) if kvs else None)


def budget_sink(limit: AimdLimit) -> Sink:
    """The adaptive budget's view of a poll (combined)."""
    def feed(found: Mapping[str, Metrics]) -> None:
        limit.on_metrics(*combined(found))
    return feed


class Throughput:
    """Tokens per second from the counters, per instance (see the module doc)."""

    def __init__(self) -> None:
        # instance URL -> (monotonic time, generation counter, prompt counter) of its last sample
        self._last: dict[str, tuple[float, float | None, float | None]] = {}

    def rates(self, now: float, found: Mapping[str, Metrics]) -> tuple[float | None,
                                                                        float | None]:
        """(generation, prompt) tokens/s summed over the instances that have a rate this
        step; None where none has (the first sample, a restart, no such counter)."""
        gen: list[float] = []
        prompt: list[float] = []
        for url, m in found.items():
            before = self._last.get(url)
            self._last[url] = (now, m.generation_tokens, m.prompt_tokens)
            if before is None or now <= before[0]:
                continue
            for out, old, new in ((gen, before[1], m.generation_tokens),
                                  (prompt, before[2], m.prompt_tokens)):
                if old is not None and new is not None and new >= old:
                    out.append((new - old) / (now - before[0]))
        return (sum(gen) if gen else None), (sum(prompt) if prompt else None)


class LoadRecorder:
    """The sink that builds the load series and writes it to `path` (models/<key>/, beside
    progress.json): every `interval` s when it changed, and at stop and flush."""

    def __init__(self, path: Path, interval_s: float,
                 clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.series = LoadSeries(interval_s)
        self.throughput = Throughput()
        self._clock, self._monotonic = clock, monotonic
        self._dirty = False
        self._writing = asyncio.Lock()  # one write at a time: an older one never lands last

    def __call__(self, found: Mapping[str, Metrics]) -> None:
        gen, prompt = self.throughput.rates(self._monotonic(), found)
        self.series.add(self._clock(), *combined(found), gen, prompt)
        self._dirty = True

    def write(self, durable: bool = False, document: dict[str, Any] | None = None) -> None:
        """Blocking: in a thread while serving, directly at exit. Nothing before a sample."""
        if document is None:
            if not self.series.samples:
                return
            document = self.series.to_json()
        try:
            write_server_load(self.path, document, durable=durable)
        except OSError as exc:
            log.error("could not write %s: %s", self.path, exc)

    async def flush(self, durable: bool = False) -> None:
        async with self._writing:
            if not self._dirty and not durable:
                return
            self._dirty = False
            if self.series.samples:  # the document is built here, on the loop
                await asyncio.to_thread(self.write, durable, self.series.to_json())

    async def run_writer(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            if self._dirty:
                try:
                    await self.flush()
                except Exception:  # a bug here must not stop the later writes
                    log.exception("could not write %s", self.path)
