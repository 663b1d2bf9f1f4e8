"""A port taken while the servers start is not the end of the job (review F7: a uid that binds
the vLLM port in the seconds vLLM spends importing failed every job at start): the rendered
start_servers, launch_server and health wait, run in bash with a stand-in `vllm` that binds its
port as vLLM does, and a real listener of another uid (`runuser -u nobody`) on the port.

Before, the server exited with "address already in use" and the job failed. Now the job stops
its servers and starts them once more on the next free port block; a second loss, or a server
that dies of anything else, still fails the job, naming the server.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from render_helpers import RenderFn
from test_job_trust import VLLM_RUN, function

# unix_socket off: a server on a port (a Unix socket in the job's own folder cannot be taken)
RUN = {"deployment": {**VLLM_RUN["deployment"], "runtime": "host", "unix_socket": False},
       "evaluation": {"tasks": [{"name": "boxed_chat"}], "overlap_load": False}}
# evaluation.overlap_load: the proxy and the first tasks start while the servers load, and
# await_servers does the health wait
OVERLAP = {**RUN, "evaluation": {"tasks": [{"name": "boxed_chat"}], "overlap_load": True}}
# vLLM's behaviour at start-up, as far as the job can see it: bind the port (or exit with
# the error vLLM prints), log the ready line, answer GETs. FAKE_VLLM=fail: exit with another
# error; FAKE_VLLM=in-use: always report the port as taken.
FAKE_VLLM = """#!/usr/bin/python3
import http.server, os, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
mode = os.environ.get("FAKE_VLLM", "")
class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")
    def log_message(self, *args):
        pass
if mode == "fail":
    print("RuntimeError: CUDA out of memory", flush=True)
    sys.exit(1)
try:
    if mode == "in-use":
        raise OSError(98, "in use")
    server = http.server.HTTPServer(("127.0.0.1", port), Answer)
except OSError as exc:
    print(f"OSError: [Errno {exc.errno}] error while attempting to bind on address "
          f"('0.0.0.0', {port}): address already in use", flush=True)
    sys.exit(1)
print(f"INFO Starting vLLM server on http://127.0.0.1:{port}", flush=True)
server.serve_forever()
"""
FUNCTIONS = ("wait_pid", "wait_processes", "stop_processes", "forget_servers", "launch_server",
             "server_environment", "start_servers", "listening_ports", "free_port_block",
             "server_failed", "servers_alive", "server_error", "dead_server", "answers",
             "port_lost", "wait_for_servers", "move_servers", "servers_up")


def overlap_steps(script: str) -> list[str]:
    """The overlapped start as the script does it, a task and the proxy standing in as sleeps
    (a second proxy start says so); USR2 to the proxy that is current when the servers serve."""
    return [
        function(script, "await_servers"),
        "TASK_PIDS=() PROXY_PIDS=() PROXY_DIRS=() TASK_KEYS=() NEXT_STEP=2 STARTS=0",
        "start_servers",
        "sleep 300 >/dev/null & TASK_PIDS+=($!)  # a task started while the servers load",
        "start_model_proxy() {",
        "  STARTS=$((STARTS + 1))",
        "  bash -c 'sleep 300 >/dev/null & c=$!; trap \"kill $c; exit 0\" TERM; \\",
        "    trap \"echo released $1; kill $c; exit 0\" USR2; wait' _ $STARTS &",
        "  PROXY_PIDS+=($!) MODEL_PROXY_PID=$! PROXY_DIRS+=(d)",
        "  echo \"proxy $STARTS started\"; sleep 0.5",
        "}",
        "endpoint_urls() { echo 'endpoint urls'; }",
        "start_model_proxy",
        "first_task=${TASK_PIDS[0]}",
        "await_servers; rc=$?",
        'kill -0 "$first_task" 2>/dev/null || echo "first task stopped"',
        'sleep 0.5; echo "NEXT_STEP=$NEXT_STEP tasks=${#TASK_PIDS[@]}"']


@pytest.fixture
def squatted() -> Iterator[int]:
    """A port block's first port, held by another uid (nobody where the tests run as root)."""
    first, block = 8000, 64
    runuser = shutil.which("runuser")
    code = ("import socket, sys, time; s = socket.socket(); "
            "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); print('ok', flush=True); "
            "time.sleep(120)")
    # A block of its own, away from the low ones; a job of the dev cluster may hold a port of
    # any block (by its job id), so one whose first port is taken already is passed over.
    for n in range(150):
        base = first + (200 + (os.getpid() + n) % 150) * block
        if os.geteuid() == 0 and runuser:
            holder = subprocess.Popen([runuser, "-u", "nobody", "--", "/usr/bin/python3", "-c",
                                       code, str(base)], stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True)
            assert holder.stdout is not None
            if holder.stdout.readline().strip() != "ok":  # bind failed: the port is taken
                holder.wait()
                continue
            try:
                yield base
            finally:
                holder.kill()
                holder.wait()
            return
        try:
            server = socket.create_server(("127.0.0.1", base))
        except OSError:
            continue
        with server:
            yield base
        return
    pytest.fail("no block from 20800 to 30335 has its first port free")


def _bring_up(render: RenderFn, tmp_path: Path, port_base: int, mode: str = "",
              overlap: bool = False) -> subprocess.CompletedProcess[str]:
    script = render("local-dev", OVERLAP if overlap else RUN)
    call = re.search(r"^PORT_BASE=\$\(free_port_block (\d+) (\d+) (\d+) ", script, re.M)
    assert call and call.groups() == ("8000", "64", "387"), "the port plan changed"
    pin = re.search(r"^PIN_GPUS='.*?^exit \"\$status\"'$", script, re.M | re.S)
    assert pin, "no PIN_GPUS in the script"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "vllm").write_text(FAKE_VLLM)
    (bin_dir / "vllm").chmod(0o755)
    model_dir = tmp_path / "model"
    (model_dir / "server").mkdir(parents=True, exist_ok=True)
    code = "\n".join([
        'log() { echo "$*"; }', 'job_failure() { echo "job_failure: $*"; }', pin.group(0),
        *(function(script, name) for name in FUNCTIONS),
        "declare -A URL_PIDS", "forget_servers",
        f"MODEL_DIR={model_dir} NODES=(127.0.0.1) PORT_BASE={port_base} HEALTH_TIMEOUT=30",
        "STOPPING=0 HPCEVAL_JOB_TOKEN=t",
        *(overlap_steps(script) if overlap
          else [function(script, "bring_up_servers"), "bring_up_servers; rc=$?"]),
        'echo "PORT_BASE=$PORT_BASE URL=${INSTANCE_URLS[*]}"',
        'stop_processes "${SERVER_PIDS[@]}" "${TASK_PIDS[@]}" "${PROXY_PIDS[@]}"',
        'exit "$rc"'])
    return subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=120,
                          check=False, env={"PATH": f"{bin_dir}:/usr/bin:/bin",
                                            "FAKE_VLLM": mode, "CUDA_VISIBLE_DEVICES": "0,1,2,3"})


def test_a_port_taken_at_start_up_moves_the_servers_to_the_next_free_block(
        render: RenderFn, squatted: int, tmp_path: Path) -> None:
    out = _bring_up(render, tmp_path, squatted)
    assert out.returncode == 0, out.stdout + out.stderr
    moved = int(re.search(r"^PORT_BASE=(\d+)", out.stdout, re.M).group(1))  # type: ignore[union-attr]
    assert moved > squatted and (moved - 8000) % 64 == 0, out.stdout
    assert f"URL=http://127.0.0.1:{moved}" in out.stdout  # the instance the proxy will get
    assert out.stdout.count("starting them again on the next free block") == 1
    assert "job_failure" not in out.stdout
    log = (tmp_path / "model" / "server" / "instance-0.log").read_text()
    assert "address already in use" in log and f"server on http://127.0.0.1:{moved}" in log


def test_the_relaunch_happens_once_and_only_for_a_lost_port(
        render: RenderFn, tmp_path: Path) -> None:
    base = 8000 + (200 + (os.getpid() + 75) % 150) * 64
    twice = _bring_up(render, tmp_path / "twice", base, mode="in-use")
    assert twice.returncode == 1, twice.stdout + twice.stderr
    assert twice.stdout.count("starting them again on the next free block") == 1
    assert re.search(r"job_failure: model server instance 0 .*address already in use.*"
                     r"exited while loading", twice.stdout), twice.stdout
    other = _bring_up(render, tmp_path / "other", base, mode="fail")
    assert other.returncode == 1, other.stdout + other.stderr
    assert "starting them again" not in other.stdout  # not a port: no second try
    assert "job_failure: model server instance 0" in other.stdout
    assert "CUDA out of memory" in other.stdout


def test_overlap_a_lost_port_restarts_proxy_and_tasks_after_the_move(
        render: RenderFn, squatted: int, tmp_path: Path) -> None:
    out = _bring_up(render, tmp_path, squatted, overlap=True)
    assert out.returncode == 0, out.stdout + out.stderr
    moved = int(re.search(r"^PORT_BASE=(\d+)", out.stdout, re.M).group(1))  # type: ignore[union-attr]
    assert moved > squatted and f"URL=http://127.0.0.1:{moved}" in out.stdout
    assert "stopping the 1 task(s) started while the servers loaded" in out.stdout
    assert out.stdout.count("starting them again on the next free block") == 1
    # the first proxy (and task) went without a release; the second proxy got it, and every
    # task starts again from the first
    assert "first task stopped" in out.stdout and "proxy 2 started" in out.stdout, out.stdout
    assert "released 1" not in out.stdout and "released 2" in out.stdout, out.stdout
    assert "endpoint urls" in out.stdout and "NEXT_STEP=1 tasks=0" in out.stdout
    assert "job_failure" not in out.stdout


def test_overlap_servers_that_never_serve_release_nothing(
        render: RenderFn, tmp_path: Path) -> None:
    base = 8000 + (200 + (os.getpid() + 40) % 150) * 64
    out = _bring_up(render, tmp_path, base, mode="fail", overlap=True)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "job_failure: model server instance 0" in out.stdout  # named, as without overlap
    assert "stopping the 1 task(s) started while they loaded" in out.stdout
    assert "released" not in out.stdout  # the proxy never forwards a held request
    assert "starting them again" not in out.stdout
