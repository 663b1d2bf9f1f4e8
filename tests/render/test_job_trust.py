"""A job trusts only processes it started: the rendered functions, run in bash.

Each test takes functions out of a real rendered job script and runs them with a real listener
where another user's process would sit, so what is checked is the shell the job runs:

* the port block: the job's first-choice block has a listener in it (IPv4 or IPv6) -> the next
  free block;
* an instance's readiness: something answers /health and /v1/models on its port, but its own
  log never said vLLM serves -> not ready (the job times out instead of using it);
* the server environment: the tasks' secrets (passed by name) are gone, the per-job token is
  there as VLLM_API_KEY.
"""

from __future__ import annotations

import http.server
import re
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from render_helpers import RenderFn

VLLM_RUN = {"deployment": {"type": "vllm", "checkpoint_path": "/m", "served_model_name": "m"},
            "evaluation": {"tasks": [{"name": "judged"}]}}


def function(script: str, name: str) -> str:
    """One top-level bash function of the script, from `name() {` to its closing brace."""
    match = re.search(rf"^{name}\(\) {{.*?^}}$", script, re.S | re.M)
    assert match, f"no function {name} in the script"
    return match.group(0)


def bash(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=60,
                          check=False, env={"PATH": "/usr/bin:/bin", **env})


SEEN: list[tuple[str, str | None]] = []  # (path, Authorization) of what the squatter was sent


@pytest.fixture
def squatter() -> Iterator[int]:
    """A listener of 'someone else': answers 200 to every GET (health, models)."""
    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            SEEN.append((self.path, self.headers.get("Authorization")))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def _listener(family: socket.AddressFamily) -> socket.socket:
    """A socket of 'someone else' that will listen on loopback of this family (IPv6: v6 only,
    so it shows in /proc/net/tcp6 alone); skips where the family has no loopback."""
    sock = socket.socket(family)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            sock.bind(("::1", 0))
        except OSError:
            sock.close()
            pytest.skip("no IPv6 loopback here")
        sock.close()
        sock = socket.socket(family)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    return sock


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6], ids=["ipv4", "ipv6"])
def test_port_block_skips_a_block_someone_listens_in(render: RenderFn,
                                                     family: socket.AddressFamily) -> None:
    script = render("slurm", VLLM_RUN)
    call = re.search(r"^PORT_BASE=\$\(free_port_block (\d+) (\d+) (\d+) ", script, re.M)
    assert call, "PORT_BASE is not chosen by free_port_block"
    first, block, slots = map(int, call.groups())
    assert first + slots * block <= 32768  # below Linux's ephemeral range
    functions = function(script, "listening_ports") + "\n" + function(script, "free_port_block")
    slot = 7
    loopback = "::1" if family == socket.AF_INET6 else "127.0.0.1"
    with _listener(family) as s:  # 'someone else' listens on a port inside slot 7's block
        s.bind((loopback, first + slot * block + 5))
        s.listen()
        out = bash(f"{functions}\nfree_port_block {first} {block} {slots} {slot}")
        kept = bash(f"{functions}\nfree_port_block {first} {block} {slots} {slot + 2}")
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == first + ((slot + 1) % slots) * block, out.stdout
    # a block nobody uses is kept as it is
    assert int(kept.stdout) == first + (slot + 2) * block, kept.stdout


def test_local_jobs_started_at_once_start_from_different_blocks(render: RenderFn) -> None:
    """A local job has no id: its first block is its shell's pid's slot, not always slot 0,
    where two local jobs started at the same moment both found 8000-8063 free and the second
    proxy could not bind 8063 (test_lost_server_local, run twice at once)."""
    script = render("local", {**VLLM_RUN, "deployment": {**VLLM_RUN["deployment"],
                                                         "runtime": "host"}})
    call = re.search(r"^PORT_BASE=\$\(free_port_block (\d+) (\d+) (\d+) .*$", script, re.M)
    assert call, "PORT_BASE is not chosen by free_port_block"
    first, block, slots = map(int, call.groups()[:3])
    functions = function(script, "listening_ports") + "\n" + function(script, "free_port_block")
    bases = set()
    for _ in range(3):
        out = bash(f'{functions}\nHPCEVAL_JOB_ID=\n{call.group(0)}\necho "$$ $PORT_BASE"')
        pid, base = map(int, out.stdout.split())
        assert (base - first) % block == 0 and first <= base < first + slots * block, base
        bases.add(base)
        if base == first + (pid % slots) * block:  # its own slot (unless someone uses it)
            break
    else:
        raise AssertionError(f"no run started from its pid's slot: {bases}")


def health_wait(script: str, ready: str, log: Path, pid: int, port: int,
                log_from: int | None = None) -> str:
    """The script's health wait (`wait_for_servers` and what it calls) for one instance on
    127.0.0.1:`port`, whose server is process `pid` and whose log is `log` (read from byte
    `log_from`), ready once the log has `ready`; bash code taking HEALTH_TIMEOUT as $1."""
    functions = "\n".join(function(script, name) for name in (
        "answers", "server_error", "server_failed", "servers_alive", "dead_server",
        "wait_for_servers"))
    log_offset = "" if log_from is None else f"INSTANCE_LOG_FROM=({log_from})\n"
    return f"""
log() {{ echo "$*"; }}
job_failure() {{ echo "job_failure: $*"; }}
wait_pid() {{ wait "$1"; }}
{functions}
SERVER_PIDS=({pid}); SERVER_LABEL=("instance 0"); SERVER_LOG=({log}); SERVER_CMD=({log})
INSTANCE_URLS=("http://127.0.0.1:{port}"); INSTANCE_LOGS=({log})
INSTANCE_READY=('{ready}'); INSTANCE_HEALTH=(/health)
{log_offset}HEALTH_TIMEOUT="$1" STOPPING=0 HPCEVAL_JOB_TOKEN=t
wait_for_servers
"""


def test_an_answer_on_the_port_is_not_the_jobs_server_until_its_log_says_so(
        render: RenderFn, squatter: int, tmp_path: Path) -> None:
    script = render("slurm", VLLM_RUN)
    ready_line = re.search(r"^INSTANCE_READY\+=\('(.+)'\)$", script, re.M)
    assert ready_line, "the vLLM deployment names no ready line"
    log = tmp_path / "instance-0.log"
    log.write_text("INFO loading weights\n")
    server = subprocess.Popen(["sleep", "60"])  # 'our' server process: alive, still loading
    code = health_wait(script, ready_line.group(1), log, server.pid, squatter)
    try:
        refused = subprocess.run(["bash", "-c", code, "wait", "3"], capture_output=True,
                                 text=True, timeout=60, check=False, env={"PATH": "/usr/bin:/bin"})
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "0 of 1 instance(s) answered" in refused.stdout, refused.stdout
        # review F7: before the ready line, nothing that carries the token goes to the port
        assert [auth for _, auth in SEEN if auth] == [], SEEN
        SEEN.clear()
        log.write_text(log.read_text() + f"INFO {ready_line.group(1)}http://0.0.0.0:{squatter}\n")
        ready = subprocess.run(["bash", "-c", code, "wait", "10"], capture_output=True,
                               text=True, timeout=60, check=False, env={"PATH": "/usr/bin:/bin"})
        assert ready.returncode == 0 and "all instances ready" in ready.stdout, ready.stdout
        # once its log says so it is the job's server: /v1/models gets the token, /health never
        assert ("/v1/models", "Bearer t") in SEEN and ("/health", None) in SEEN, SEEN
        assert all(auth is None for path, auth in SEEN if path == "/health"), SEEN
    finally:
        server.kill()
        server.wait()


def test_servers_get_the_token_but_not_the_tasks_secrets(render: RenderFn) -> None:
    script = render("local-dev", {
        "deployment": {**VLLM_RUN["deployment"], "runtime": "host",
                       "env_vars": {"SERVER_ONLY": "host:MINE"}},  # the server's own, by name
        "evaluation": {"tasks": [{"name": "judged"}],  # needs JUDGE_API_KEY, by name
                       "env_vars": {"JUDGE_URL": "host:JUDGE_URL"}}})
    code = function(script, "server_environment") + """
server_environment
echo "judge=${JUDGE_API_KEY:-unset} url=${JUDGE_URL:-unset} mine=${SERVER_ONLY:-unset}"
echo "key=${VLLM_API_KEY:-unset}"
env | grep -c '^HPCEVAL_JOB_TOKEN=' || true
"""
    # HPCEVAL_JOB_TOKEN is a plain shell variable of the job (never exported): set it as such
    out = subprocess.run(["bash", "-c", "HPCEVAL_JOB_TOKEN=tok123\n" + code],
                         capture_output=True, text=True, timeout=60, check=False,
                         env={"PATH": "/usr/bin:/bin", "JUDGE_API_KEY": "judge-secret",
                              "JUDGE_URL": "http://judge", "MINE": "m1"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "judge=unset url=unset mine=m1", out.stdout
    assert lines[1] == "key=tok123", out.stdout
    assert lines[2] == "0", "the token reached the environment of every child"
    assert "tok123" not in script and "judge-secret" not in script
