"""The in-job proxy as a process (`python -m hpceval.job proxy`): the ProxyServer of
hpceval.job.proxy.server, run until the job stops it, with the signals a job sends it and the ready
file the job waits for.

SIGTERM and SIGINT stop it (in-flight requests get the grace period, then cache and progress
are made durable); SIGUSR1, Slurm's pre-timeout signal, flushes cache and progress and keeps
serving; SIGUSR2, the job's "every instance serves" (evaluation.overlap_load), releases the
requests it holds (hpceval.job.proxy.hold). The ready file appears once the port is bound,
where only the job can write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from pathlib import Path

from hpceval.job.proxy import guard
from hpceval.job.proxy.config import ProxyConfig
from hpceval.job.proxy.server import ProxyServer

log = logging.getLogger("hpceval.job.proxy")  # the proxy's one logger, as before the split


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
    # the job's "all instances ready" (steps.j2, await_servers): held requests go on
    loop.add_signal_handler(signal.SIGUSR2, server.hold.release)
    entries = len(server.cache) if server.cache is not None else 0
    if config.ready_file is not None:  # the port is ours now: say so where only we can write
        await asyncio.to_thread(write_ready_file, config.ready_file)
    log.info("hpceval proxy on http://%s:%d -> %d upstream(s); cache: %s (%d entries)",
                config.host, server.port, len(config.upstreams), config.cache_dir, entries)
    try:
        await stop.wait()
    finally:
        log.info("hpceval proxy stopping")
        with contextlib.suppress(Exception):
            await asyncio.gather(*flushes)
        await server.stop()


def write_ready_file(path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{os.getpid()}\n", encoding="ascii")
    os.replace(tmp, path)


def run_proxy(config: ProxyConfig) -> None:
    guard.raise_open_file_limit()
    asyncio.run(serve(config))
