"""The dev site's HTTP proxy (scripts/slurm/site_proxy.py), run here on loopback: it carries
requests to the outside names (*.outside.test, this machine's loopback), plain and through
CONNECT, and refuses every other destination, so no test traffic leaves the machine."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.ports import free_port

ROOT = Path(__file__).resolve().parents[3]
PROXY = ROOT / "scripts" / "slurm" / "site_proxy.py"


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    port, log, pid = free_port(), tmp_path / "proxy.log", tmp_path / "proxy.pid"
    proc = subprocess.Popen([sys.executable, str(PROXY), "--host", "127.0.0.1", "--port",
                             str(port), "--log", str(log), "--pid-file", str(pid)])
    try:
        deadline = time.monotonic() + 10
        while not pid.exists():
            assert time.monotonic() < deadline and proc.poll() is None, "proxy did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}", log
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[int]:
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "hello.txt").write_text("hello from outside\n")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind",
                             "127.0.0.1", "--directory", str(tmp_path / "www")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while subprocess.run(["curl", "-sf", "--noproxy", "*", f"http://127.0.0.1:{port}/"],
                             capture_output=True).returncode != 0:
            assert time.monotonic() < deadline, "origin did not start"
            time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def curl(proxy: str, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["curl", "-s", "-m", "10", "-x", proxy, *extra, "-w", "\n%{http_code}",
                           url], capture_output=True, text=True, check=False)


def test_the_outside_is_reached_through_the_proxy_and_nothing_else(
        proxy: tuple[str, Path], origin: int) -> None:
    url, log = proxy
    outside = f"http://api.outside.test:{origin}/hello.txt"
    plain = curl(url, outside)
    assert plain.stdout == "hello from outside\n\n200", plain
    tunnelled = curl(url, outside, "--proxytunnel")  # CONNECT, as https goes
    assert tunnelled.stdout == "hello from outside\n\n200", tunnelled
    # kept-alive client connections: each request reaches the origin in origin form
    twice = subprocess.run(["curl", "-s", "-x", url, outside, outside], capture_output=True,
                           text=True, check=False)
    assert twice.stdout == "hello from outside\n" * 2, twice
    for refused in (f"http://127.0.0.1:{origin}/hello.txt", "http://198.18.0.11:80/",
                    "http://example.com/"):
        assert curl(url, refused).stdout.endswith("\n403"), refused
    lines = log.read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == [
        f"GET {outside} 200", f"CONNECT api.outside.test:{origin} 200",
        f"GET {outside} 200", f"GET {outside} 200",
        f"GET http://127.0.0.1:{origin}/hello.txt 403", "GET http://198.18.0.11/ 403",
        "GET http://example.com/ 403"]
