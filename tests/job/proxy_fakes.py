"""Helpers for the in-job proxy tests: a scriptable fake model server and a running proxy, both
on real sockets on 127.0.0.1 with ephemeral ports."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
from aiohttp import web
from support.ports import free_port

from hpceval.contract import UNIX_URL
from hpceval.job.proxy.config import ProxyConfig
from hpceval.job.proxy.server import ProxyServer


def chat(content: str = "hi", **params: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": content}], **params}


async def status_of(base: str, method: str, path: str, headers: dict[str, str],
                    data: bytes | None = None) -> int:
    """The status one request to the proxy at `base` gets (its body read and dropped)."""
    async with aiohttp.ClientSession() as s, \
            s.request(method, base + path, data=data, headers=headers) as r:
        await r.read()
        return r.status


def dead_url() -> str:
    """A URL on which nothing listens: connections are refused."""
    return f"http://127.0.0.1:{free_port()}"


class FakeUpstream:
    """A vLLM stand-in. `fail` answers that many generation requests with `fail_status` first;
    `reply(body, n)` gives the assistant text (default: unique per request, "answer <n>")."""

    def __init__(self, delay: float = 0.0, fail: int = 0, fail_status: int = 500,
                 reply: Callable[[dict[str, Any], int], str] | None = None) -> None:
        self.delay = delay
        self.fail = fail
        self.fail_status = fail_status
        self.drop = 0  # close that many connections mid-request, without an answer
        self.raw_answer: bytes | None = None  # answer generation requests with these bytes (200)
        self.reply = reply or (lambda _body, n: f"answer {n}")
        self.health_status = 200
        # /metrics: None answers as before (a JSON body, not Prometheus text); a text, or a
        # function of the how-manieth /metrics request this is (1, 2, ...), is served as
        # Prometheus text with `metrics_status`
        self.metrics: str | Callable[[int], str] | None = None
        self.metrics_status = 200
        self.metrics_asked = 0
        self.hits = 0
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []  # every request's path, /health included
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self, ssl_context: ssl.SSLContext | None = None, host: str = "127.0.0.1",
                    unix: str | None = None, port: int = 0) -> str:
        """``ssl_context``: serve https; ``host``: the name the URL gives (it must resolve to
        127.0.0.1 for the client, or be known to a proxy in between); ``unix``: listen on
        this Unix socket path instead (the URL is then "unix:<path>", as a job gives it)."""
        @web.middleware
        async def record(request: web.Request, handler: Any) -> web.StreamResponse:
            self.paths.append(request.path)
            return await handler(request)

        app = web.Application(middlewares=[record])
        app.router.add_post("/v1/chat/completions", self._generate)
        app.router.add_post("/v1/completions", self._generate)
        app.router.add_post("/v1/embeddings", self._embed)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_get("/tokenizer_info", self._tokenizer_info)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        # vLLM's other routes: what the proxy must not forward to anyone
        for path in ("/version", "/load"):
            app.router.add_get(path, self._models)
        app.router.add_post("/abort_requests", self._models)
        app.router.add_post("/v1/load_lora_adapter", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        if unix is not None:
            await web.UnixSite(self._runner, unix).start()
            self.url = f"{UNIX_URL}{unix}"
            return self.url
        site = web.TCPSite(self._runner, "127.0.0.1", port, ssl_context=ssl_context,
                           reuse_address=True)
        await site.start()
        scheme = "https" if ssl_context is not None else "http"
        self.url = f"{scheme}://{host}:{self._runner.addresses[0][1]}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.hits += 1
        n = self.hits
        self.bodies.append(body)
        self.headers.append(dict(request.headers))
        if self.drop > 0 and request.transport is not None:
            self.drop -= 1
            request.transport.close()
            return web.Response()
        if self.fail > 0:
            self.fail -= 1
            return web.json_response({"error": {"message": "boom"}}, status=self.fail_status)
        await asyncio.sleep(self.delay)
        if self.raw_answer is not None:
            return web.Response(body=self.raw_answer, content_type="application/json")
        text = self.reply(body, n)
        if body.get("stream"):
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for word in text.split():
                chunk = {"choices": [{"index": 0, "delta": {"content": word}}]}
                await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        if request.path == "/v1/completions":
            choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": "stop"}
            return web.json_response({"id": f"c{n}", "object": "text_completion",
                                      "model": body.get("model"), "choices": [choice]})
        choice = {"index": 0, "message": {"role": "assistant", "content": text},
                  "finish_reason": "stop"}
        return web.json_response({"id": f"c{n}", "object": "chat.completion",
                                  "model": body.get("model"), "choices": [choice]})

    async def _embed(self, request: web.Request) -> web.Response:
        self.hits += 1
        await request.read()
        if self.raw_answer is not None:
            return web.Response(body=self.raw_answer, content_type="application/json")
        return web.json_response({"object": "list", "data": [{"embedding": [0.1, 0.2]}]})

    async def _models(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m"}]})

    async def _metrics(self, request: web.Request) -> web.Response:
        self.metrics_asked += 1
        if self.metrics is None:
            return await self._models(request)
        text = self.metrics(self.metrics_asked) if callable(self.metrics) else self.metrics
        return web.Response(status=self.metrics_status, text=text, content_type="text/plain")

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"tokens": [1, 2, 3], "count": 3, "echo": body})

    async def _tokenizer_info(self, _request: web.Request) -> web.Response:
        return web.json_response({"tokenizer_class": "Fake"})

    async def _health(self, _request: web.Request) -> web.Response:
        return web.Response(status=self.health_status)


@contextlib.asynccontextmanager
async def running_upstreams(*fakes: FakeUpstream) -> AsyncIterator[list[str]]:
    urls = [await f.start() for f in fakes]
    try:
        yield urls
    finally:
        for f in fakes:
            await f.stop()


@contextlib.asynccontextmanager
async def running_proxy(config: ProxyConfig) -> AsyncIterator[tuple[ProxyServer, str]]:
    server = ProxyServer(config)
    await server.start()
    try:
        yield server, f"http://127.0.0.1:{server.port}"
    finally:
        await server.stop()
