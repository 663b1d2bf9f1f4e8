"""A model server process dies under load: no request may be lost, the instance goes down."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Callable

import aiohttp
from proxy_fakes import chat, running_proxy
from support.ports import free_port

from hpceval.job.proxy.config import ProxyConfig

SERVER = """
import asyncio, sys
from aiohttp import web
async def generate(request):
    body = await request.json()
    await asyncio.sleep(0.1)
    text = body["messages"][-1]["content"]
    return web.json_response({"choices": [{"message": {"role": "assistant", "content": text}}]})
async def health(request):
    return web.Response(text="ok")
app = web.Application()
app.router.add_post("/v1/chat/completions", generate)
app.router.add_get("/health", health)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


async def wait_up(url: str) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(200):
            try:
                async with s.get(url + "/health") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError(f"{url} did not start")


async def test_killing_an_instance_under_load_loses_no_request(
        make_config: Callable[..., ProxyConfig]) -> None:
    ports = [free_port(), free_port()]
    procs = [subprocess.Popen([sys.executable, "-c", SERVER, str(p)]) for p in ports]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    try:
        for url in urls:
            await wait_up(url)
        async with running_proxy(make_config(urls, max_retries=2)) as (server, base), \
                aiohttp.ClientSession() as session:
            todo = iter(range(240))
            answers: dict[int, tuple[int, str]] = {}

            async def worker() -> None:
                for n in todo:
                    async with session.post(base + "/v1/chat/completions",
                                            json=chat(f"q{n}", temperature=0)) as r:
                        body = await r.json()
                        answers[n] = (r.status, body["choices"][0]["message"]["content"]
                                      if r.status == 200 else str(body))

            load = asyncio.gather(*(worker() for _ in range(24)))
            await asyncio.sleep(0.35)  # mid-load, with requests in flight on both
            procs[0].send_signal(signal.SIGKILL)
            await load
            dead, alive = server.balancer.instances
            assert not dead.up and alive.up and alive.done > dead.done
        assert answers == {n: (200, f"q{n}") for n in range(240)}
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
