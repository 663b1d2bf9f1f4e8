"""The CLI: argument wiring, usage errors, and a real proxy process with Slurm's signals."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from proxy_fakes import FakeUpstream, chat, running_upstreams
from support.ports import free_port

from hpceval.job.proxy.cli import build_parser, config_from_args, main
from hpceval.job.proxy.config import ProxyConfig

BASE = ["--port", "0", "--upstream", "http://n1:8000", "--upstream", "http://n2:8000/",
        "--cache-dir", "/c", "--progress-file", "/p.json"]


def test_arguments_become_config() -> None:
    chain = [{"name": "log_requests", "config": {"log_requests": 5}},
             {"name": "strip_reasoning", "config": {"strip_reasoning": True,
                                                    "reasoning_start": "<r>",
                                                    "reasoning_end": "</r>"}},
             {"name": "add_params", "config": {"add_params": {"max_tokens": 512, "stop": ["a"]}}},
             {"name": "remove_params", "config": {"remove_params": ["logprobs"]}}]
    args = build_parser().parse_args([
        *BASE, "--request-timeout", "60", "--max-retries", "1",
        f"--interceptors={json.dumps(chain)}", "--expected-requests", "100"])
    config = config_from_args(args)
    assert config.upstreams == ("http://n1:8000", "http://n2:8000/")
    assert config.cache_dir == Path("/c") and config.progress_file == Path("/p.json")
    assert [(i.name, i.config()) for i in config.interceptors] == [
        (entry["name"], {**entry["config"]}) for entry in chain]
    assert config.request_timeout == 60 and config.max_retries == 1
    assert config.expected_requests == 100 and config.log_requests == 5
    assert config.request_log_path == Path("/proxy-requests.jsonl")
    assert config.host == "127.0.0.1"
    assert config_from_args(build_parser().parse_args(BASE)).interceptors == ()


def test_options_left_out_take_the_config_defaults() -> None:
    """The parser's defaults are ProxyConfig's own (declared there once): a job script that
    leaves an option out gets what a ProxyConfig made in Python gets."""
    given = config_from_args(build_parser().parse_args(BASE))
    assert given == ProxyConfig(upstreams=given.upstreams, port=0, cache_dir=Path("/c"),
                                progress_file=Path("/p.json"))


@pytest.mark.parametrize("bad", [["--interceptors", '[{"name": "shout"}]'],
                                 ["--interceptors", "{"],
                                 ["--upstream", "n3:8000"], ["--max-retries", "-1"]])
def test_usage_errors_exit_2(bad: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*BASE, *bad])
    assert exc.value.code == 2


def _proxy_process(tmp_path: Path, port: int, upstream: str, *extra: str,
                   env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from hpceval.job.proxy.cli import main; sys.exit(main(sys.argv[1:]))",
         "--port", str(port), "--upstream", upstream, "--cache-dir", str(tmp_path / "cache"),
         "--progress-file", str(tmp_path / "progress.json"), *extra],
        stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


async def test_proxy_process_flushes_on_usr1_and_stops_on_term(tmp_path: Path) -> None:
    up = FakeUpstream()
    async with running_upstreams(up) as urls:
        progress = tmp_path / "progress.json"
        port = free_port()
        proc = _proxy_process(tmp_path, port, urls[0], "--expected-requests", "3")
        try:
            await _wait_until(lambda: bool(_requests(progress)))
            async with aiohttp.ClientSession() as s:
                for _ in range(2):
                    async with s.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                                      json=chat(temperature=0)) as r:
                        assert r.status == 200
            os.kill(proc.pid, signal.SIGUSR1)
            await _wait_until(lambda: _requests(progress).get("done") == 2)
            assert proc.poll() is None  # USR1 only flushes
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            stderr = proc.communicate()[1]
    final = json.loads(progress.read_text())
    assert final["state"] == "stopped", stderr
    assert final["requests"]["done"] == 2 and final["requests"]["cached"] == 1
    shard = next((tmp_path / "cache").glob("shard-*.jsonl"))
    assert len(shard.read_bytes().splitlines()) == 1 and up.hits == 1


def _requests(progress: Path) -> dict[str, int]:
    try:
        return dict(json.loads(progress.read_text())["requests"])
    except (OSError, ValueError):
        return {}


async def _wait_until(check: Callable[[], bool], seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_api_key_and_limits_from_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOB_TOKEN", "s3cret-token")
    config = config_from_args(build_parser().parse_args(
        [*BASE, "--api-key-env", "JOB_TOKEN", "--max-body-mb", "1.5", "--client-timeout", "7"]))
    assert config.api_key == "s3cret-token" and "s3cret" not in repr(config)
    assert config.max_body_bytes == config.max_inflated_bytes == 3 << 19
    assert config.header_timeout == config.body_timeout == 7
    assert config_from_args(build_parser().parse_args(BASE)).api_key is None
    totals = config_from_args(build_parser().parse_args(
        [*BASE, "--body-deadline", "30", "--max-total-body-mb", "128", "--max-connections", "9"]))
    assert (totals.body_deadline, totals.max_total_body_bytes, totals.max_connections) == \
        (30, 128 << 20, 9)
    with pytest.raises(ValueError, match="at least one largest body"):
        config_from_args(build_parser().parse_args([*BASE, "--max-total-body-mb", "8"]))
    for value in ("", "  "):
        monkeypatch.setenv("JOB_TOKEN", value)
        with pytest.raises(SystemExit) as exc:
            main([*BASE, "--api-key-env", "JOB_TOKEN"])
        assert exc.value.code == 2
    monkeypatch.delenv("JOB_TOKEN")
    with pytest.raises(SystemExit) as exc:
        main([*BASE, "--api-key-env", "JOB_TOKEN"])
    assert exc.value.code == 2


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


async def test_gzip_bomb_does_not_inflate_in_the_proxy_process(tmp_path: Path) -> None:
    """The issue's 102 KB gzip body (100 MB inflated) against a real proxy process with the
    default limits and a token: refused with 413, peak memory far below the inflated size."""
    import gzip

    token = "t0ken-" + os.urandom(8).hex()
    head = json.dumps(chat("x", temperature=0))[:-1].encode()
    data = gzip.compress(head + b" " * (100 << 20) + b"}", 9)
    up = FakeUpstream()
    async with running_upstreams(up) as urls:
        port = free_port()
        proc = _proxy_process(tmp_path, port, urls[0], "--api-key-env", "JOB_TOKEN",
                              env={"JOB_TOKEN": token})
        try:
            await _wait_until(lambda: bool(_requests(tmp_path / "progress.json")))
            before = _peak_rss_kib(proc.pid)
            headers = {"Content-Encoding": "gzip", "Content-Type": "application/json",
                       "Authorization": f"Bearer {token}"}
            async with aiohttp.ClientSession(auto_decompress=False) as s:
                async with s.post(f"http://127.0.0.1:{port}/v1/chat/completions", data=data,
                                  headers=headers) as r:
                    assert r.status == 413
                async with s.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                                  json=chat(temperature=0)) as r:
                    assert r.status == 401
            grown_mib = (_peak_rss_kib(proc.pid) - before) / 1024
            assert token not in Path(f"/proc/{proc.pid}/cmdline").read_text()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            stderr = proc.communicate()[1]
    print(f"peak RSS grew by {grown_mib:.0f} MiB for a {len(data)} byte gzip bomb")
    assert grown_mib < 90, grown_mib  # 64 MiB cap + decoder slack; was > 200 MiB
    assert token not in stderr and up.hits == 0



async def test_upstream_token_replaces_the_clients_header_and_ready_file_names_the_pid(
        tmp_path: Path) -> None:
    """The job's servers require a per-job token: the proxy sends it upstream whatever the
    harness sent (lm-eval sends 'Bearer ' with no key), and says it bound its port by writing its
    pid where the job script looks."""
    token = "t0ken-" + os.urandom(8).hex()
    ready = tmp_path / "proxy.ready"
    up = FakeUpstream()
    async with running_upstreams(up) as urls:
        port = free_port()
        proc = _proxy_process(tmp_path, port, urls[0], "--upstream-api-key-env", "UP_TOKEN",
                              "--ready-file", str(ready), env={"UP_TOKEN": token})
        try:
            await _wait_until(ready.exists)
            assert ready.read_text() == f"{proc.pid}\n"
            async with aiohttp.ClientSession() as s, s.post(
                    f"http://127.0.0.1:{port}/v1/chat/completions", json=chat(temperature=0),
                    headers={"Authorization": "Bearer "}) as r:
                assert r.status == 200
            assert up.headers[-1]["Authorization"] == f"Bearer {token}"
            assert token not in Path(f"/proc/{proc.pid}/cmdline").read_text()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            stderr = proc.communicate()[1]
    assert token not in stderr


def test_a_port_someone_else_holds_never_gets_a_ready_file(tmp_path: Path) -> None:
    """Another process listens on the job's proxy port first: the proxy cannot bind, exits
    non-zero, and writes no ready file, so the job never takes that listener for its proxy."""
    ready = tmp_path / "proxy.ready"
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        proc = _proxy_process(tmp_path, port, "http://127.0.0.1:9", "--ready-file", str(ready))
        assert proc.wait(timeout=60) != 0
        proc.communicate()
    assert not ready.exists()


def test_upstream_token_variable_must_be_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UP_TOKEN", raising=False)
    with pytest.raises(ValueError, match="UP_TOKEN is unset or empty"):
        config_from_args(build_parser().parse_args(
            ["--port", "1", "--upstream", "http://h:1", "--cache-dir", "c", "--progress-file",
             "p", "--upstream-api-key-env", "UP_TOKEN"]))
