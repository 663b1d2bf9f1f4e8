"""What a benchmark reads of a process it started, from /proc (Linux only), and a free port.

cpu_seconds (utime + stime) is the figure the benchmarks compare: steady on a noisy machine,
unlike requests per second. pin moves a process's threads onto cores of its own, so that it
can cost the others only rate and latency, not their CPU.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path


def pin(pid: int, cores: set[int]) -> None:
    """Every thread of process `pid` (threads started later inherit it) onto `cores`."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(task.name), cores)


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
