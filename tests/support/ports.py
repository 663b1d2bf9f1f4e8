"""A free TCP port for a test's own listener, and a test server started on one.

The kernel's pick (bind to port 0) comes from the ephemeral range (32768 and up): never a port
a job of the dev cluster takes (jobs take blocks from 8000 up to 32767, by job id), so a test
running beside other people's jobs does not collide with them.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(argv: list[str], port_file: Path, *, timeout: float = 30.0,
            log: Path | None = None) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A test server as its own process that writes its port to ``port_file`` once it accepts
    connections (renamed into place: never half written): (port, process); ended on exit,
    TERM then KILL. Its output goes to ``log`` (default: nowhere)."""
    out = log.open("wb") if log is not None else subprocess.DEVNULL
    process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while not port_file.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{argv[1]} did not start" + (f": see {log}" if log else ""))
            time.sleep(0.05)
        yield int(port_file.read_text().strip()), process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if log is not None:
            out.close()  # type: ignore[union-attr]
