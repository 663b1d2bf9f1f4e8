"""The in-job endpoint proxy: harnesses -> this aiohttp server -> model server instances.

Runs on the first node of the allocation. `/v1/chat/completions`, `/v1/completions` and
`/v1/embeddings` go through the interceptors and the response cache and are counted in the
progress file; `/health` is the proxy's own (200 while an instance is up); the few other routes
harnesses use (`/v1/models`, vLLM's `/tokenize`, `/detokenize`, `/tokenizer_info`) are passed
through as they are, and every other route gets 404 (proxy.guard.allowed).
Answers carry `X-Hpceval-Cache: hit|miss` on the cached endpoints. Under a task's route,
`/task/<task key>/` (proxy.stats), a task with interceptors of its own gets its own chain
(job.interceptors.Routes).

Other users' processes on the node can reach the port: with `api_key` set (the job passes a
per-job token by variable name, `--api-key-env`), every path but `/health` and the keyless
tokenizer routes needs `Authorization: Bearer <token>`, checked before a byte of the body is
read, and only such requests are counted (keyless ones are bounded apart: proxy.keyless);
bodies are bounded as sent and as inflated, each and all together, slow clients are cut off
(proxy.body), open connections are capped and refusals are logged one rate-limited line each
(proxy.guard).

Cost matters (the target is under 0.5 ms of CPU per request, on a node whose cores the
harnesses also need): aiohttp's low-level server, without the application and router layers; the
request body is parsed once and hashed once, in a worker thread when it is large; an upstream
answer is parsed once (the cache stores only answers that parse and carry choices, see
`cache.usable_answer`); file writes are one `write` per cached answer, and everything slow on
shared storage (fsync, progress file, cache lease) runs in a thread off the event loop.

This class admits or refuses a request and owns what lives as long as the process (listening
socket, background writers, shutdown); serving an admitted request is proxy.relay's. The process
around the server (signals, the ready file): proxy.process.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler

from hpceval.job.cache import CACHED_PATHS, ResponseCache
from hpceval.job.interceptors import RequestLog, Routes
from hpceval.job.progress import Progress, run_writer, write_atomic
from hpceval.job.proxy import guard
from hpceval.job.proxy.balancer import Balancer
from hpceval.job.proxy.body import BodyBudget, BodyError
from hpceval.job.proxy.config import ProxyConfig
from hpceval.job.proxy.forward import Forwarder
from hpceval.job.proxy.hold import Hold
from hpceval.job.proxy.judge_successor import JudgeSuccessor
from hpceval.job.proxy.keyless import KeylessBudget
from hpceval.job.proxy.relay import JSON, Relay, error_response
from hpceval.job.proxy.server_metrics import (
    LoadRecorder,
    metrics_sinks,
    poll_interval,
    poll_metrics,
)
from hpceval.job.proxy.sessions import Sessions
from hpceval.job.proxy.stats import TaskRecorder
from hpceval.job.proxy.tls import server_context
from hpceval.results.ledger import BUSY, append_mark

log = logging.getLogger("hpceval.job.proxy")  # the lines proxy.log has always had

LINGER_S = 2.0  # long enough for a client to read a 413 before the connection closes


class ProxyServer:
    """The proxy's lifetime (start, flush, stop) and its front door (`_dispatch`): key, route,
    hold and body budget are checked here before proxy.relay sees a request."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.balancer = Balancer(config.upstreams, external=config.external_upstream,
                                 pids=config.upstream_pids)
        self.progress = Progress(config.expected_requests)
        self.routes = Routes(config.interceptors, dict(config.task_interceptors))
        self.request_log = RequestLog(config.request_log_path, config.log_limits)
        self.cache = ResponseCache(config.cache_dir, config.cache_fsync_every) \
            if config.cache_dir is not None else None
        self.port = config.port
        self._token = config.api_key.encode() if config.api_key is not None else None
        self._runner: web.ServerRunner | None = None
        self._sessions: Sessions | None = None
        self._forwarder: Forwarder | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._relay: Relay | None = None  # what serves an admitted request (proxy.relay)
        self.bodies = BodyBudget(config.max_total_body_bytes)
        self.keyless = KeylessBudget()
        self.refused = guard.refusal_logger()
        self.tasks = TaskRecorder(config.tasks_dir)  # per task: runtime.json (results.runtime)
        # the servers' load from their /metrics (results.server_load), None for an external API
        self.load = LoadRecorder(config.server_load_path, poll_interval(config)) \
            if config.server_load_path is not None else None
        self.hold = Hold(config.hold)  # until the job's instances are ready (proxy.hold)
        self.judge = JudgeSuccessor(config.judge_dir, self.balancer, config.upstream_api_key,
                                    config.judge_wait, config.probe_interval) \
            if config.judge_dir is not None else None

    # --- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> int:
        # The job's own servers never go through a site proxy, whatever NO_PROXY holds.
        self._sessions = sessions = Sessions(trust_env=self.config.external_upstream)
        self._forwarder = Forwarder(self.config, self.balancer, self._sessions)
        self._relay = Relay(self.config, self._forwarder, self.balancer, self.progress,
                            self.routes, self.cache, self.request_log, self.tasks, self.judge)
        # auto_decompress off: proxy.body inflates within a cap. keepalive_timeout also closes
        # a connection that has not sent a complete head by then (aiohttp arms it at connect);
        # after a refused body, the rest of it is drained for at most LINGER_S, then closed.
        # logger: aiohttp's "Error handling request" (a malformed request from anyone) is one
        # rate-limited line there, not a traceback per request.
        server = guard.CappedServer(
            self._dispatch, max_connections=self.config.max_connections, refused=self.refused,
            max_per_peer=self.config.max_connections_per_peer,
            request_factory=self._make_request, access_log=None, logger=self.refused,
            auto_decompress=False, keepalive_timeout=self.config.header_timeout,
            lingering_time=LINGER_S)
        self._runner = web.ServerRunner(server, handle_signals=False,
                                        shutdown_timeout=self.config.shutdown_grace)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port, reuse_address=True,
                           ssl_context=server_context(self.config.tls))
        await site.start()
        self.port = int(self._runner.addresses[0][1])  # the real one when config.port is 0
        self._spawn(self.balancer.run_prober(self._sessions, self.config.probe_interval))
        sinks = metrics_sinks(self.config, self._forwarder.admission, self.load)
        if sinks:  # the one reader of /metrics: the budget's and the load series' figures
            self._spawn(self._after_hold(lambda: poll_metrics(
                self.balancer, sessions, poll_interval(self.config), sinks)))
        if self.load is not None:
            self._spawn(self.load.run_writer(self.config.progress_interval))
        if self.cache is not None:
            self._spawn(self.cache.flush_every(self.config.cache_fsync_interval))
        if self.config.progress_file is not None:
            self._spawn(run_writer(self.config.progress_file, self.snapshot,
                                   self.config.progress_interval))
        if self.config.tasks_dir is not None:
            self._spawn(self.tasks.run_writer(self.config.progress_interval))
        return self.port

    async def stop(self) -> None:
        """Stop accepting, give in-flight requests the grace period, then make everything
        durable: cache fsync, runtime and load files, final progress file ("stopped")."""
        if self._runner is not None:
            await self._runner.cleanup()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.balancer.close()
        if self._forwarder is not None:
            self._forwarder.http.close()
        if self._sessions is not None:
            await self._sessions.close()
        if self.cache is not None:
            self.cache.close()
        self.request_log.close()
        self.tasks.write(self.tasks.snapshot(), durable=True)
        if self.load is not None:
            self.load.write(durable=True)
        self._write_progress("stopped", durable=True)
        if self.config.progress_file is not None:  # the rest of the tasks phase, servers idled
            append_mark(self.config.progress_file.parent, BUSY,
                        f"{self.progress.busy()['seconds']:.1f}")

    async def flush(self) -> None:
        """SIGUSR1 (Slurm's pre-timeout signal): make cache, progress and load durable."""
        if self.cache is not None:
            await self.cache.flush()
        await self.tasks.flush(durable=True)
        if self.load is not None:
            await self.load.flush(durable=True)
        if self.config.progress_file is not None:  # snapshot here, on the loop; write in a thread
            try:
                await asyncio.to_thread(write_atomic, self.config.progress_file, self.snapshot(),
                                        True)
            except OSError as exc:
                log.error("could not write progress file: %s", exc)

    def snapshot(self, state: str = "running") -> dict[str, Any]:
        return self.progress.snapshot(
            state=state,
            instances=self.balancer.snapshot(),
            upstream_error=None if self.balancer.any_up() else self.balancer.down_reason(),
            cache=self.cache.stats() if self.cache is not None else None)

    def _write_progress(self, state: str, durable: bool) -> None:
        if self.config.progress_file is None:
            return
        try:
            write_atomic(self.config.progress_file, self.snapshot(state), durable=durable)
        except OSError as exc:
            log.error("could not write progress file: %s", exc)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        self._tasks.append(asyncio.ensure_future(coro))

    async def _after_hold(self, start: Callable[[], Coroutine[Any, Any, None]]) -> None:
        # nothing is asked of an instance before the job has seen it serve; the coroutine is
        # made only then (one made and cancelled unawaited is a RuntimeWarning)
        await self.hold.released()
        await start()

    # --- handlers -----------------------------------------------------------------------------
    def _make_request(self, message: RawRequestMessage, payload: StreamReader,
                      protocol: RequestHandler, writer: AbstractStreamWriter,
                      task: asyncio.Task[None]) -> web.BaseRequest:
        # Bodies are read by proxy.body within the configured caps, not by request.read().
        return web.BaseRequest(message, payload, protocol, writer, task,
                               asyncio.get_running_loop(),
                               client_max_size=self.config.max_inflated_bytes)

    async def _dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        task, request = self.tasks.route(request)  # /task/<key>/...: counted for that task
        path = request.path
        if path == "/health" and request.method in ("GET", "HEAD"):
            return await self._health(request)  # no secret needed: the job's start-up check
        keyless = not self._authorized(request)
        if keyless and path not in guard.KEYLESS:
            return self._refuse(request, 401, "missing or wrong API key "
                                "(Authorization: Bearer ...)", "unauthorized")
        if not guard.allowed(request.method, path, self.config.external_upstream) \
                or not request.path_qs.isascii():
            return self._refuse(request, 404, f"{request.method} {path} is not served by the "
                                "hpceval proxy", "not_found")
        if self.hold.active:  # before the body is read: a held request holds no body bytes
            refused = await self.hold.wait(request)
            if refused is not None:
                return error_response(503, refused, "loading", close=True)
        relay = self._relay
        assert relay is not None, "start() first"
        # keyless: bounded apart from the job's own requests (proxy.keyless)
        lease = self.keyless.lease_for(request) if keyless else self.bodies.lease()
        try:
            if path in CACHED_PATHS:
                return await relay.openai(request, lease, task, self.routes.chain(task))
            return await relay.passthrough(request, lease, keyless)
        except BodyError as exc:
            if path in CACHED_PATHS:
                self.progress.failed += 1
            return self._refuse(request, exc.status, exc.message, exc.kind)
        finally:
            lease.close()

    def _refuse(self, request: web.BaseRequest, status: int, message: str,
                kind: str) -> web.Response:
        self.refused.warning("refused %s %s from %s: %d %s", guard.shown(request.method),
                             guard.shown(request.path), request.remote, status, message)
        return error_response(status, message, kind, close=True)

    def _authorized(self, request: web.BaseRequest) -> bool:
        if self._token is None:
            return True
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        given = value.strip().encode("utf-8", "replace")  # odd bytes: a mismatch, not a 500
        return scheme.lower() == "bearer" and hmac.compare_digest(given, self._token)

    async def _health(self, _request: web.BaseRequest) -> web.Response:
        up = sum(i.up for i in self.balancer.instances)
        if up:
            # "loading": the proxy listens and holds requests until the job's instances serve
            body = {"status": "loading" if self.hold.active else "ok", "instances_up": up,
                    "instances": len(self.balancer.instances)}
            return web.Response(body=json.dumps(body).encode(), content_type=JSON)
        return error_response(503, self.balancer.down_reason(), "no_upstream")
