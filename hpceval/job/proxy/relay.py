"""Answering a request the proxy admitted: cache, interceptors, upstream, counters.

ProxyServer (proxy.server) decides whether a request is served at all (key, route, hold, body
budget); what happens to one it admits lives here, apart from that, so each half reads on its
own: the cached OpenAI routes (`openai`: body parsed and hashed once, the response cache, the
task's interceptor chain, the request log, the progress and per-task counters), a streamed
answer relayed chunk by chunk (not cached, not intercepted), and the few routes passed through
as they are (`passthrough`; `/tokenizer_info` from the copy proxy.keyless keeps).

Made once the event loop runs (ProxyServer.start), with the forwarder and its sessions.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from aiohttp import web

from hpceval.job.cache import ResponseCache, parse_answer, storable
from hpceval.job.interceptors import Interceptors, RequestLog, Routes, prepare
from hpceval.job.progress import Progress
from hpceval.job.proxy import keyless as keyless_bounds
from hpceval.job.proxy.balancer import Balancer
from hpceval.job.proxy.body import BodyLease, decoded_body, off_loop
from hpceval.job.proxy.config import ProxyConfig
from hpceval.job.proxy.forward import (
    REQUEST,
    Answer,
    Forwarder,
    RequestContext,
    UpstreamFailure,
)
from hpceval.job.proxy.guard import clean_headers
from hpceval.job.proxy.judge_successor import JudgeSuccessor
from hpceval.job.proxy.stats import Answered, TaskRecorder

log = logging.getLogger("hpceval.job.proxy")  # the lines proxy.log has always had

FORWARDED_HEADERS = ("Authorization", "Content-Type", "Accept")
JSON = "application/json"


def error_response(status: int, message: str, kind: str, close: bool = False) -> web.Response:
    body = {"error": {"message": message, "type": kind, "code": status}}
    response = web.Response(status=status, body=json.dumps(body).encode(), content_type=JSON)
    if close:  # the rest of the request body is unread: do not parse it as the next request
        response.force_close()
    return response


class Relay:
    """Serves admitted requests; the objects it counts in belong to the ProxyServer."""

    def __init__(self, config: ProxyConfig, forwarder: Forwarder, balancer: Balancer,
                 progress: Progress, routes: Routes, cache: ResponseCache | None,
                 request_log: RequestLog, tasks: TaskRecorder,
                 judge: JudgeSuccessor | None) -> None:
        self.config = config
        self.forwarder = forwarder
        self.balancer = balancer
        self.progress = progress
        self.routes = routes
        self.cache = cache
        self.request_log = request_log
        self.tasks = tasks
        self.judge = judge
        self.tokenizer_info = keyless_bounds.TokenizerInfo()
        # With a client key, the client's Authorization is that key, the proxy's own: it is not
        # passed on (an external judge must not get the job's token); upstreams get theirs.
        self._forwarded = FORWARDED_HEADERS if config.api_key is None else FORWARDED_HEADERS[1:]

    async def read(self, request: web.BaseRequest, lease: BodyLease,
                   keyless: bool = False) -> bytes:
        config = self.config
        sent, inflated = config.max_body_bytes, config.max_inflated_bytes
        if keyless:
            sent, inflated = (min(cap, keyless_bounds.MAX_BODY) for cap in (sent, inflated))
        return await decoded_body(request, sent, inflated, config.body_timeout,
                                  config.body_deadline, lease)

    async def openai(self, request: web.BaseRequest, lease: BodyLease, task: str | None = None,
                     chain: Interceptors | None = None) -> web.StreamResponse:
        path = request.path
        chain = chain or self.routes.default
        raw = await self.read(request, lease)
        prepared = await off_loop(len(raw), prepare, path, raw, chain)
        if prepared is None:
            self.progress.failed += 1
            return error_response(400, "request body must be a JSON object", "invalid_request")
        body, raw, base_key = prepared
        progress = self.progress
        progress.in_flight += 1
        context = RequestContext(task or "")  # its queue behind the budget, its retries
        REQUEST.set(context)
        done = Answered(task, body.get("echo") is True, bool(body.get("stream")),
                        context.retries)
        try:
            if done.streamed:
                response = await self._stream(request, raw)
                done.status = response.status
            else:
                response, payload, done.cached, done.answer = await self._answer(
                    request, path, chain, body, raw, base_key, task is not None)
                done.status = response.status
                self.request_log.record(path, body, done.status, payload, done.cached,
                                        time.monotonic() - done.started, chain.route)
            if not response.prepared:  # (a stream's status went with its first bytes)
                await self.tasks.before_sending(done)
            return response
        finally:
            self.tasks.count(done)
            progress.in_flight -= 1
            if 200 <= done.status < 300:
                progress.done += 1
            else:
                progress.failed += 1

    async def _answer(self, request: web.BaseRequest, path: str, chain: Interceptors,
                      body: dict[str, Any], raw: bytes, base_key: bytes, counted: bool = False
                      ) -> tuple[web.Response, bytes, bool, Any]:
        cache = self.cache
        key = cache.key_for(path, body, base_key) if cache is not None else None
        payload = cache.get(key, path) if cache is not None and key is not None else None
        hit = payload is not None
        if payload is not None:
            self.progress.cached += 1
            status, content_type = 200, JSON
        else:
            try:
                answer = await self._send(request, raw)
            except UpstreamFailure as exc:
                return self._failure(exc), b"", False, None
            status, payload, content_type = answer.status, answer.body, answer.content_type
        ok = 200 <= status < 300
        fresh = cache is not None and key is not None and not hit and ok
        parsed: Any = None
        if fresh or (ok and (chain.response or counted)):
            parsed = await off_loop(len(payload), parse_answer, payload)
        if fresh and cache is not None and key is not None:
            line = storable(path, payload, parsed)
            if line is not None:
                cache.put(key, path, status, line)
        if isinstance(parsed, dict) and chain.on_response(path, parsed):
            payload = json.dumps(parsed, ensure_ascii=False).encode()
        headers = {"X-Hpceval-Cache": "hit" if hit else "miss"}
        return (web.Response(status=status, body=payload, content_type=content_type.split(";")[0],
                             headers=headers), payload, hit, parsed)

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

    async def passthrough(self, request: web.BaseRequest, lease: BodyLease,
                          keyless: bool = False) -> web.StreamResponse:
        info = request.path == "/tokenizer_info"
        kept = self.tokenizer_info.response() if info else None
        if kept is not None:
            return kept
        raw = await self.read(request, lease, keyless)
        try:
            answer = await self._send(request, raw or None)
        except UpstreamFailure as exc:
            return self._failure(exc)
        content_type = answer.content_type.split(";")[0]
        if info:
            self.tokenizer_info.keep(answer.status, answer.body, content_type)
        return web.Response(status=answer.status, body=answer.body, content_type=content_type)

    async def _send(self, request: web.BaseRequest, data: bytes | None,
                    stream: bool = False) -> Answer:
        forwarder = self.forwarder
        headers = clean_headers({h: request.headers[h] for h in self._forwarded
                                 if h in request.headers})

        async def attempt(token: str | None) -> Answer:
            if token is not None:
                headers["Authorization"] = f"Bearer {token}"
            return await forwarder.send(request.method, request.path_qs, data, headers, stream)

        if self.judge is not None:  # a sweep's judge: follow its successor jobs
            return await self.judge.send(attempt)
        return await attempt(self.config.upstream_api_key)

    def _failure(self, exc: UpstreamFailure) -> web.Response:
        if exc.status == 503:
            self.progress.record_no_upstream(exc.reason)
        log.error("request failed: %s", exc.reason)
        return error_response(exc.status, exc.reason, "upstream_unavailable")
