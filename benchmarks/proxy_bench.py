"""Benchmark of the in-job proxy against a direct baseline measured in the same run.

    python benchmarks/proxy_bench.py [--quick] [--latency 0.05] [--soak N]

Three processes on 127.0.0.1: a fixed-latency fake model server (aiohttp), the proxy (started
through its CLI, as in a job) and this load generator. For each parallelism it sends unique chat
requests straight to the fake server, then the same number of new unique requests through the
proxy (all cache misses), and reports throughput, the ratio proxy/direct, added latency and the
proxy's CPU time per request (utime+stime of the proxy process from /proc, over the phase).
Then cache replay (the proxy's requests again: all hits) and a soak run that samples the proxy's
RSS and open descriptors. Linux only (/proc). All three processes share this machine's cores,
so at high parallelism the figures include CPU contention between them.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from hpceval.job.cache import ResponseCache
from hpceval.job.proxy_http import HttpClient

NEMO_CPU_MS = "4-5"  # NeMo Evaluator adapter proxy, CPU ms per request (shared/reference)
ANSWER = (b'{"id":"cmpl-1","object":"chat.completion","model":"bench","choices":[{"index":0,'
          b'"message":{"role":"assistant","content":"' + b"The answer is 42. " * 40 +
          b'"},"finish_reason":"stop"}],"usage":{"prompt_tokens":120,"completion_tokens":200}}')
PROMPT = "Solve the following problem step by step and give the final answer. " * 6


# --- fake model server (runs in its own process) ---------------------------------------------
def serve_upstream(port: int, latency: float) -> None:
    async def generate(request: web.Request) -> web.Response:
        await request.read()
        await asyncio.sleep(latency)
        return web.Response(body=ANSWER, content_type="application/json")

    async def health(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", generate)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


# --- process helpers -------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def wait_ready(url: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            try:
                async with s.get(url + "/health") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not become ready")


# --- load generator --------------------------------------------------------------------------
# The load generator shares the cores with the proxy and the fake server, so it uses the proxy's
# own light HTTP client (a fifth of aiohttp's CPU per request): the figures then measure the
# proxy rather than the client. Direct and proxied runs use the same client.
CLIENT = HttpClient(connect_timeout=10.0)
HEADERS = {"Content-Type": "application/json"}


async def load(url: str, bodies: list[dict[str, Any]], parallelism: int
               ) -> tuple[float, list[float]]:
    """Send `bodies` with `parallelism` workers; (requests per second, latencies)."""
    latencies: list[float] = []
    todo = iter([json.dumps(b).encode() for b in bodies])

    async def worker() -> None:
        for body in todo:
            t0 = time.perf_counter()
            status, _, _ = await CLIENT.request(url, "POST", "/v1/chat/completions", body,
                                                HEADERS, 60.0)
            if status != 200:
                raise RuntimeError(f"HTTP {status} from {url}")
            latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(parallelism)))
    return len(bodies) / (time.perf_counter() - start), latencies


def make_bodies(tag: str, n: int) -> list[dict[str, Any]]:
    return [{"model": "bench", "temperature": 0, "max_tokens": 256,
             "messages": [{"role": "user", "content": f"{tag}-{i}: {PROMPT}"}]}
            for i in range(n)]


def ms(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] * 1000 if len(values) > 1 else 0.0


async def bench(args: argparse.Namespace, upstream: str, proxy: str, pid: int) -> None:
    levels = [1, 16, 64, 256]
    rounds = 1 if args.quick else 3  # direct and proxied runs alternate; medians are reported
    print(f"\nfake model server latency {args.latency * 1000:.0f} ms; cores: {os.cpu_count()}; "
          f"median of {rounds} alternating round(s)\n")
    print("| parallelism | requests | direct req/s | proxy req/s | ratio | "
          "p50 added ms | p99 added ms | proxy CPU ms/req |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    replay: list[dict[str, Any]] = []
    direct_at: dict[int, float] = {}
    for p in levels:
        n = max(60 if args.quick else 200, p * (10 if args.quick else 40))
        d_rates, p_rates, d_lat, p_lat, cpu = [], [], [], [], 0.0
        for r in range(rounds):
            rate, lat = await load(upstream, make_bodies(f"direct{p}-{r}", n), p)
            d_rates.append(rate)
            d_lat += lat
            bodies = make_bodies(f"proxy{p}-{r}", n)
            cpu0 = cpu_seconds(pid)
            rate, lat = await load(proxy, bodies, p)
            cpu += cpu_seconds(pid) - cpu0
            p_rates.append(rate)
            p_lat += lat
            if p == 64:
                replay += bodies
        d_rate, p_rate = statistics.median(d_rates), statistics.median(p_rates)
        direct_at[p] = d_rate
        print(f"| {p} | {n * rounds} | {d_rate:.0f} | {p_rate:.0f} | {p_rate / d_rate:.2f} | "
              f"{ms(p_lat, 50) - ms(d_lat, 50):.2f} | {ms(p_lat, 99) - ms(d_lat, 99):.2f} | "
              f"{cpu / (n * rounds) * 1000:.3f} |")
    cpu0 = cpu_seconds(pid)
    r_rate, _ = await load(proxy, replay, 64)
    cpu_ms = (cpu_seconds(pid) - cpu0) / len(replay) * 1000
    print(f"\ncache replay, parallelism 64, {len(replay)} hits: {r_rate:.0f} req/s "
          f"({r_rate / direct_at[64]:.1f}x direct), proxy CPU {cpu_ms:.3f} ms/req")
    print(f"(reference: NeMo Evaluator's adapter proxy spends {NEMO_CPU_MS} ms CPU per request)")

    total, step = args.soak, max(args.soak // 10, 1)
    print(f"\nsoak: {total} unique requests through the proxy, parallelism 64\n")
    print("| requests | RSS MiB | open fds | proxy CPU ms/req (last step) |")
    print("|---:|---:|---:|---:|")
    print(f"| 0 | {rss_mib(pid):.1f} | {open_fds(pid)} | |")
    for done in range(step, total + 1, step):
        cpu0 = cpu_seconds(pid)
        await load(proxy, make_bodies(f"soak{done}", step), 64)
        cpu_ms = (cpu_seconds(pid) - cpu0) / step * 1000
        print(f"| {done} | {rss_mib(pid):.1f} | {open_fds(pid)} | {cpu_ms:.3f} |")


def time_index_load(cache_dir: Path) -> None:
    """What a resumed job pays at start: reading every shard into the index."""
    start = time.perf_counter()
    cache = ResponseCache(cache_dir)
    elapsed = time.perf_counter() - start
    size = sum(p.stat().st_size for p in cache_dir.glob("shard-*.jsonl")) / 2**20
    print(f"\nindex load at start: {len(cache)} entries ({size:.0f} MiB of shards) "
          f"in {elapsed:.2f} s")
    cache.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer requests (about a minute)")
    parser.add_argument("--latency", type=float, default=0.05, help="fake server latency, s")
    parser.add_argument("--soak", type=int, help="requests in the soak run (100000; quick 10000)")
    parser.add_argument("--role", choices=["bench", "upstream"], default="bench",
                        help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == "upstream":
        serve_upstream(args.port, args.latency)
        return 0
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)  # rows appear as measured, also in a file
    if args.soak is None:
        args.soak = 10_000 if args.quick else 100_000
    work = Path(tempfile.mkdtemp(prefix="proxy-bench-"))
    up_port, proxy_port = free_port(), free_port()
    upstream, proxy = f"http://127.0.0.1:{up_port}", f"http://127.0.0.1:{proxy_port}"
    procs = [subprocess.Popen([sys.executable, __file__, "--role", "upstream",
                               "--port", str(up_port), "--latency", str(args.latency)])]
    try:
        asyncio.run(wait_ready(upstream))
        procs.append(subprocess.Popen([
            sys.executable, "-c",
            "import sys; from hpceval.job.proxy_cli import main; sys.exit(main(sys.argv[1:]))",
            "--port", str(proxy_port), "--upstream", upstream, "--cache-dir", str(work / "cache"),
            "--progress-file", str(work / "progress.json"), "--log-level", "WARNING"]))
        asyncio.run(wait_ready(proxy))
        asyncio.run(bench(args, upstream, proxy, procs[1].pid))
        procs[1].terminate()
        procs[1].wait(timeout=30)
        time_index_load(work / "cache")
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
