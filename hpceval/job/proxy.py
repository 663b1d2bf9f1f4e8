"""The in-job endpoint proxy: harnesses -> this aiohttp server -> model server instances.

Runs on the first node of the allocation. `/v1/chat/completions`, `/v1/completions` and
`/v1/embeddings` go through the interceptors and the response cache and are counted in the
progress file; `/health` is the proxy's own (200 while an instance is up); every other path
(`/v1/models`, vLLM's `/tokenize`, `/detokenize`, `/tokenizer_info`, ...) is passed through as is.
Answers carry `X-Hpceval-Cache: hit|miss` on the cached endpoints.

Cost matters (the target is under 0.5 ms of CPU per request, on a node whose cores the
harnesses also need): aiohttp's low-level server, without the application and router layers; the
request body is parsed once and hashed once; an upstream answer is stored without parsing it when
cheap byte checks show it is a compact JSON object and no error (see `_storable`); file writes
are one `write` per cached answer, and everything slow on shared storage (fsync, progress file,
cache lease) runs in a thread off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import resource
import signal
import time
from collections.abc import Coroutine
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler

from hpceval.job.cache import CACHED_PATHS, ResponseCache
from hpceval.job.interceptors import RequestLog, build_interceptors
from hpceval.job.progress import Progress, run_writer, write_atomic
from hpceval.job.proxy_balancer import Balancer
from hpceval.job.proxy_config import ProxyConfig
from hpceval.job.proxy_forward import Answer, Forwarder, UpstreamFailure

log = logging.getLogger(__name__)

FORWARDED_HEADERS = ("Authorization", "Content-Type", "Accept")
MAX_BODY = 512 * 1024 * 1024  # long-context and multimodal requests exceed aiohttp's 1 MiB default
JSON = "application/json"


def error_response(status: int, message: str, kind: str) -> web.Response:
    body = {"error": {"message": message, "type": kind, "code": status}}
    return web.Response(status=status, body=json.dumps(body).encode(), content_type=JSON)


def _is_error_body(body: Any) -> bool:
    return not isinstance(body, dict) or "error" in body or body.get("object") == "error"


_NOT_PARSED = object()


def _storable(payload: bytes, parsed: Any = _NOT_PARSED) -> bytes | None:
    """What to store for a 2xx answer: compact JSON of a non-error object, or None.

    Parsing a long answer costs more than the rest of the request, so the common case is decided
    on bytes: an object without a newline and without the token `"error"` (which an error body,
    `{"error": ...}` or `"object": "error"`, must contain; inside strings it is escaped as `\\"`).
    Anything else is parsed. Shard lines carry a CRC, so what is replayed is what was received.
    """
    if parsed is _NOT_PARSED:
        if payload[:1] == b"{" and payload[-1:] == b"}" and b"\n" not in payload \
                and b'"error"' not in payload:
            return payload
        try:
            parsed = json.loads(payload)
        except ValueError:
            return None  # not JSON: passed through, never cached
    if _is_error_body(parsed):
        return None
    # The shard is line-oriented: a pretty-printed answer is stored re-serialized.
    return payload if b"\n" not in payload else json.dumps(
        parsed, ensure_ascii=False, separators=(",", ":")).encode()


class ProxyServer:
    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.balancer = Balancer(config.upstreams, external=config.external_upstream)
        self.progress = Progress(config.expected_requests)
        self.interceptors = build_interceptors(config)
        self.request_log = RequestLog(config.request_log_path, config.log_requests)
        self.cache = ResponseCache(config.cache_dir, config.cache_fsync_every) \
            if config.cache_dir is not None else None
        self.port = config.port
        self._runner: web.ServerRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._forwarder: Forwarder | None = None
        self._tasks: list[asyncio.Task[None]] = []

    # --- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> int:
        # keepalive below uvicorn's 5 s default, so pooled connections are not reused just as
        # vLLM closes them (that race looks like a dead server); limit=0: harnesses set the
        # concurrency, the proxy must not cap it at aiohttp's default of 100.
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=4.0)
        self._session = aiohttp.ClientSession(connector=connector, auto_decompress=True)
        self._forwarder = Forwarder(self.config, self.balancer, self._session)
        server = web.Server(self._dispatch, request_factory=self._make_request, access_log=None)
        self._runner = web.ServerRunner(server, handle_signals=False,
                                        shutdown_timeout=self.config.shutdown_grace)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port, reuse_address=True)
        await site.start()
        self.port = int(self._runner.addresses[0][1])  # the real one when config.port is 0
        self._spawn(self.balancer.run_prober(self._session, self.config.probe_interval))
        if self.cache is not None:
            self._spawn(self._flush_periodically(self.cache, self.config.cache_fsync_interval))
        if self.config.progress_file is not None:
            self._spawn(run_writer(self.config.progress_file, self.snapshot,
                                   self.config.progress_interval))
        return self.port

    async def stop(self) -> None:
        """Stop accepting, give in-flight requests the grace period, then make everything
        durable: cache fsync, final progress file with state "stopped"."""
        if self._runner is not None:
            await self._runner.cleanup()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.balancer.close()
        if self._forwarder is not None:
            self._forwarder.http.close()
        if self._session is not None:
            await self._session.close()
        if self.cache is not None:
            self.cache.close()
        self.request_log.close()
        self._write_progress("stopped", durable=True)

    async def flush(self) -> None:
        """SIGUSR1 (Slurm's pre-timeout signal): make cache and progress durable, keep serving."""
        if self.cache is not None:
            await self.cache.flush()
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

    @staticmethod
    async def _flush_periodically(cache: ResponseCache, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            await cache.flush()

    # --- handlers -----------------------------------------------------------------------------
    @staticmethod
    def _make_request(message: RawRequestMessage, payload: StreamReader,
                      protocol: RequestHandler, writer: AbstractStreamWriter,
                      task: asyncio.Task[None]) -> web.BaseRequest:
        # Long-context and multimodal requests exceed aiohttp's 1 MiB default body limit.
        return web.BaseRequest(message, payload, protocol, writer, task,
                               asyncio.get_running_loop(), client_max_size=MAX_BODY)

    async def _dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        path = request.path
        if path in CACHED_PATHS and request.method == "POST":
            return await self._openai(request)
        if path == "/health" and request.method in ("GET", "HEAD"):
            return await self._health(request)
        return await self._passthrough(request)

    async def _health(self, _request: web.BaseRequest) -> web.Response:
        up = sum(i.up for i in self.balancer.instances)
        if up:
            body = {"status": "ok", "instances_up": up, "instances": len(self.balancer.instances)}
            return web.Response(body=json.dumps(body).encode(), content_type=JSON)
        return error_response(503, self.balancer.down_reason(), "no_upstream")

    async def _openai(self, request: web.BaseRequest) -> web.StreamResponse:
        path = request.path
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self.progress.failed += 1
            return error_response(400, "request body must be a JSON object", "invalid_request")
        progress = self.progress
        progress.in_flight += 1
        started = time.monotonic()
        status = 500
        try:
            if self.interceptors.request:
                self.interceptors.on_request(path, body)
                raw = json.dumps(body, ensure_ascii=False).encode()
            if body.get("stream"):
                response = await self._stream(request, raw)
                status = response.status
                return response
            response, payload, cached = await self._answer(request, path, body, raw)
            status = response.status
            self.request_log.record(path, body, status, payload, cached,
                                    time.monotonic() - started)
            return response
        finally:
            progress.in_flight -= 1
            if 200 <= status < 300:
                progress.done += 1
            else:
                progress.failed += 1

    async def _answer(self, request: web.BaseRequest, path: str, body: dict[str, Any], raw: bytes
                      ) -> tuple[web.Response, bytes, bool]:
        cache = self.cache
        key = cache.key_for(path, body) if cache is not None else None
        payload = cache.get(key) if cache is not None and key is not None else None
        hit = payload is not None
        if payload is not None:
            self.progress.cached += 1
            status, content_type = 200, JSON
        else:
            try:
                answer = await self._send(request, raw)
            except UpstreamFailure as exc:
                return self._failure(exc), b"", False
            status, payload, content_type = answer.status, answer.body, answer.content_type
        ok = 200 <= status < 300
        parsed: Any = _NOT_PARSED
        if ok and self.interceptors.response:
            try:
                parsed = json.loads(payload)
            except ValueError:
                parsed = None  # not JSON: passed through, never cached
        if cache is not None and key is not None and not hit and ok:
            line = _storable(payload, parsed)
            if line is not None:
                cache.put(key, path, status, line)
        if isinstance(parsed, dict) and self.interceptors.on_response(path, parsed):
            payload = json.dumps(parsed, ensure_ascii=False).encode()
        headers = {"X-Hpceval-Cache": "hit" if hit else "miss"}
        return (web.Response(status=status, body=payload, content_type=content_type.split(";")[0],
                             headers=headers), payload, hit)

    async def _stream(self, request: web.BaseRequest, raw: bytes) -> web.StreamResponse:
        """Streamed answers go to the client as they arrive: not cached, not intercepted."""
        try:
            answer = await self._send(request, raw, stream=True)
        except UpstreamFailure as exc:
            return self._failure(exc)
        if answer.stream is None or answer.instance is None:
            return web.Response(status=answer.status, body=answer.body,
                                content_type=answer.content_type.split(";")[0])
        upstream, ok = answer.stream, False
        try:
            response = web.StreamResponse(status=upstream.status)
            response.content_type = answer.content_type.split(";")[0]
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            ok = True
            return response
        finally:
            upstream.release()
            self.balancer.release(answer.instance, ok)

    async def _passthrough(self, request: web.BaseRequest) -> web.StreamResponse:
        raw = await request.read()
        try:
            answer = await self._send(request, raw or None)
        except UpstreamFailure as exc:
            return self._failure(exc)
        return web.Response(status=answer.status, body=answer.body,
                            content_type=answer.content_type.split(";")[0])

    async def _send(self, request: web.BaseRequest, data: bytes | None,
                    stream: bool = False) -> Answer:
        assert self._forwarder is not None, "start() first"
        headers = {h: request.headers[h] for h in FORWARDED_HEADERS if h in request.headers}
        return await self._forwarder.send(request.method, request.path_qs, data, headers, stream)

    def _failure(self, exc: UpstreamFailure) -> web.Response:
        if exc.status == 503:
            self.progress.record_no_upstream(exc.reason)
        log.error("request failed: %s", exc.reason)
        return error_response(exc.status, exc.reason, "upstream_unavailable")


async def serve(config: ProxyConfig) -> None:
    """Run until SIGTERM/SIGINT; SIGUSR1 flushes cache and progress and keeps serving."""
    server = ProxyServer(config)
    await server.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    flushes: set[asyncio.Task[None]] = set()

    def on_usr1() -> None:
        task = loop.create_task(server.flush())
        flushes.add(task)
        task.add_done_callback(flushes.discard)

    loop.add_signal_handler(signal.SIGUSR1, on_usr1)
    entries = len(server.cache) if server.cache is not None else 0
    log.info("hpceval proxy on http://%s:%d -> %d upstream(s); cache: %s (%d entries)",
                config.host, server.port, len(config.upstreams), config.cache_dir, entries)
    try:
        await stop.wait()
    finally:
        log.info("hpceval proxy stopping")
        with contextlib.suppress(Exception):
            await asyncio.gather(*flushes)
        await server.stop()


def raise_open_file_limit() -> None:
    """Each proxied request holds two sockets; a harness at parallelism 1024 would hit the usual
    soft limit of 1024 descriptors and see refused connections. Raise it to the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open file limit from %d: %s", soft, exc)


def run_proxy(config: ProxyConfig) -> None:
    raise_open_file_limit()
    asyncio.run(serve(config))
