"""Sending one request upstream: instance choice, failover, retries with backoff and jitter.

What counts as what (a wrong call here either wastes GPU hours or hides a dead server):
- connect refused / connect timeout: the instance is gone -> marked down, and the request moves
  to another instance at once without spending a retry (once per instance and request);
- disconnect or reset mid-request: the server may have died, or a pooled keep-alive connection
  went stale -> the instance is only suspected (see proxy.balancer), the request moves on at
  once, likewise once per instance;
- read timeout: suspected too, then a retry after backoff;
- 5xx and 429: the server is alive but failed -> retry after backoff; the last answer is passed
  through when retries run out;
- no instance up: wait a backoff and look again (the prober may have revived one), then 503.
4xx and 2xx answers are final.

The request being answered (``REQUEST``, set by the proxy's handler) names its task, whose
queue it waits in behind the in-flight budget, and collects the causes of its retries (counted
per task in runtime.json).
"""

from __future__ import annotations

import asyncio
import random
import time
import urllib.request
from collections import Counter
from contextvars import ContextVar
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp
from multidict import CIMultiDictProxy

from hpceval.job.proxy.balancer import Balancer
from hpceval.job.proxy.budget import LimitLog, Outcome, admission_for
from hpceval.job.proxy.client import (
    HttpClient,
    UpstreamConnectError,
    UpstreamDisconnected,
    UpstreamProtocolError,
)
from hpceval.job.proxy.config import ProxyConfig
from hpceval.job.proxy.instance import Instance
from hpceval.job.proxy.sessions import Sessions

# The answers the proxy retries, and what each still is after the retries: an infrastructure
# failure, not the model's answer (counted per task: results.runtime); 502-504 are the proxy's
# own answers when no instance gave one.
INFRA_CAUSES = {429: "429 rate limited", 500: "500 server error",
                502: "502 connection failed or lost", 503: "503 no server up",
                504: "504 timed out"}
RETRY_STATUSES = frozenset(INFRA_CAUSES)


@dataclass
class RequestContext:
    """One client request while the proxy answers it (each aiohttp handler runs in a task of
    its own, so the context variable is per request)."""

    task: str = ""  # its task key (/task/<key>/), "" for none
    retries: Counter[str] = field(default_factory=Counter)  # cause -> attempts retried


REQUEST: ContextVar[RequestContext | None] = ContextVar("hpceval_request", default=None)


class UpstreamFailure(Exception):
    """No answer from any instance; `status` is what the proxy answers (502, 503, 504)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass
class Answer:
    status: int
    body: bytes
    content_type: str
    # Set only for streamed requests: the open response the caller reads and must release.
    stream: aiohttp.ClientResponse | None = None
    instance: Instance | None = None


@dataclass
class _Failed:
    status: int  # what the proxy answers if this was the last attempt
    reason: str
    free: bool  # move to another instance at once, without spending a retry


def _content_type(headers: CIMultiDictProxy[str]) -> str:
    return headers.get("Content-Type", "application/json")


class Forwarder:
    def __init__(self, config: ProxyConfig, balancer: Balancer, sessions: Sessions) -> None:
        self.config = config
        self.balancer = balancer
        self.sessions = sessions  # streamed requests (and the prober) use aiohttp
        self.http = HttpClient(config.connect_timeout)  # everything else: the cheap client
        self.admission = admission_for(config.budget, balancer)
        self.limit_log = LimitLog()  # the adaptive limit in the proxy log, when it moves
        # A stream may legitimately run longer than request_timeout; what must not happen is
        # silence for that long.
        self._stream_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=config.connect_timeout, sock_read=config.request_timeout)
        self._timeout = aiohttp.ClientTimeout(
            total=config.request_timeout, sock_connect=config.connect_timeout)
        # An API outside the job that the site's https_proxy/http_proxy must carry (the cheap
        # client speaks no proxy protocol): its requests go through aiohttp (trust_env), as
        # streams do. The job's own servers are never sent through a site proxy.
        self._via_site_proxy = frozenset(
            url for url in config.upstreams if config.external_upstream and site_proxy_for(url))

    def backoff(self, retry: int) -> float:
        cap = min(self.config.retry_backoff_max, self.config.retry_backoff * 2.0 ** (retry - 1))
        return cap / 2 + random.random() * cap / 2  # jitter: spread retries of many requests

    async def send(self, method: str, path_qs: str, data: bytes | None,
                   headers: dict[str, str], stream: bool = False) -> Answer:
        retries = 0
        free_failovers: set[Instance] = set()
        context = REQUEST.get() or RequestContext()
        while True:
            inst = self.balancer.pick()
            if inst is None:
                if retries >= self.config.max_retries:
                    raise UpstreamFailure(503, self.balancer.down_reason())
                retries += 1
                context.retries[INFRA_CAUSES[503]] += 1
                await asyncio.sleep(self.backoff(retries))
                continue
            result = await self._admitted(inst, method, path_qs, data, headers, stream,
                                          context.task)
            if isinstance(result, Answer):
                if result.status not in RETRY_STATUSES or retries >= self.config.max_retries:
                    return result
                cause = INFRA_CAUSES[result.status]
                result = _Failed(502, f"{inst.url} answered {result.status}", free=False)
            else:
                cause = INFRA_CAUSES[result.status]
            if result.free and inst not in free_failovers:
                free_failovers.add(inst)
                context.retries[cause] += 1  # on another instance, no retry spent
                continue
            if retries >= self.config.max_retries:
                raise UpstreamFailure(result.status,
                                      f"{result.reason} (after {retries + 1} attempts)")
            retries += 1
            context.retries[cause] += 1
            await asyncio.sleep(self.backoff(retries))

    async def _admitted(self, inst: Instance, method: str, path_qs: str, data: bytes | None,
                        headers: dict[str, str], stream: bool, task: str) -> Answer | _Failed:
        """`_attempt` inside the in-flight budget, if the proxy has one (hpceval.job.proxy.budget):
        waiting in `task`'s queue, served round-robin with the other tasks'."""
        if self.admission is None:
            return await self._attempt(inst, method, path_qs, data, headers, stream)
        async with self.admission.slot(task):
            started = time.monotonic()
            result = await self._attempt(inst, method, path_qs, data, headers, stream)
        now = time.monotonic()
        self.admission.limit.on_result(now - started, _outcome(result))
        self.limit_log.note(self.admission.limit, now, self.admission.instances)
        return result

    async def _attempt(self, inst: Instance, method: str, path_qs: str, data: bytes | None,
                       headers: dict[str, str], stream: bool) -> Answer | _Failed:
        """One try on `inst`. A streamed 2xx answer keeps `inst` checked out for the caller."""
        if inst.token is not None:  # its own key: a retry may land on a successor's instance
            headers = {**headers, "Authorization": f"Bearer {inst.token}"}
        ok = checked_out = False
        try:
            if not await self.balancer.settled(inst):  # held after a dropped connection
                return _lost(inst)
            if not stream and inst.url in self._via_site_proxy:
                async with self.sessions.tcp.request(method, inst.url + path_qs, data=data,
                                                headers=headers, timeout=self._timeout) as r:
                    body = await r.read()
                ok = r.status < 500
                return Answer(r.status, body, _content_type(r.headers))
            if not stream:
                status, content_type, body = await self.http.request(
                    inst.base, method, path_qs, data, headers, self.config.request_timeout,
                    inst.socket, inst.pin)
                if not self.balancer.still_launched(inst):
                    return _lost(inst)  # its server exited while it was asked: not its answer
                ok = status < 500
                return Answer(status, body, content_type)
            resp = await self.sessions.of(inst).request(
                method, inst.base + path_qs, data=data, headers=headers,
                timeout=self._stream_timeout)
            if not self.balancer.still_launched(inst):
                resp.release()
                return _lost(inst)
            if resp.status < 300:
                ok = checked_out = True
                return Answer(resp.status, b"", _content_type(resp.headers), resp, inst)
            try:
                body = await resp.read()
            finally:
                resp.release()
            ok = resp.status < 500
            return Answer(resp.status, body, _content_type(resp.headers))
        except (UpstreamConnectError, aiohttp.ClientConnectorError,
                aiohttp.ConnectionTimeoutError) as exc:
            reason = f"cannot connect to {inst.url}: {_describe(exc)}"
            self.balancer.mark_down(inst, reason)
            return _Failed(502, reason, free=True)
        except asyncio.TimeoutError:
            reason = f"{inst.url} timed out after {self.config.request_timeout:g}s"
            self.balancer.suspect(inst, reason, self.sessions)
            return _Failed(504, reason, free=False)
        except (UpstreamDisconnected, aiohttp.ClientConnectionError, aiohttp.ClientPayloadError,
                OSError) as exc:
            reason = f"connection to {inst.url} lost: {_describe(exc)}"
            self.balancer.suspect(inst, reason, self.sessions)
            return _Failed(502, reason, free=True)
        except (UpstreamProtocolError, aiohttp.ClientError) as exc:
            return _Failed(502, f"{inst.url}: {_describe(exc)}", free=False)
        finally:
            if not checked_out:
                self.balancer.release(inst, ok)


def _outcome(result: Answer | _Failed) -> Outcome:
    if isinstance(result, Answer):
        return "error" if result.status in RETRY_STATUSES else "ok"
    return "timeout" if result.status == 504 else "error"


def site_proxy_for(url: str) -> str | None:
    """The site proxy that the environment (https_proxy, http_proxy, all_proxy, NO_PROXY)
    names for ``url``, as aiohttp's trust_env and curl read them; None: go direct."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]  # untyped in typeshed
    if not proxy or bypass(parts.netloc, proxies):
        return None
    return proxy


def _lost(inst: Instance) -> _Failed:
    return _Failed(502, f"{inst.url}: its server process exited", free=True)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ClientConnectorError):
        return str(exc.os_error.strerror or exc.os_error)
    return str(exc) or type(exc).__name__
