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
       "evaluation": {"tasks": [{"name": "boxed_chat"}]}}
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
FUNCTIONS = ("wait_pid", "stop_processes", "forget_servers", "launch_server",
             "server_environment", "start_servers", "listening_ports", "free_port_block",
             "server_failed", "servers_alive", "server_error", "dead_server", "answers",
             "port_lost", "wait_for_servers", "bring_up_servers")


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


def _bring_up(render: RenderFn, tmp_path: Path, port_base: int,
              mode: str = "") -> subprocess.CompletedProcess[str]:
    script = render("local-dev", RUN)
    call = re.search(r"^PORT_BASE=\$\(free_port_block (\d+) (\d+) (\d+) ", script, re.M)
    assert call and call.groups() == ("8000", "64", "387"), "the port plan changed"
    pin = re.search(r"^PIN_GPUS='.*?^exec \"\$@\"'$", script, re.M | re.S)
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
        "bring_up_servers; rc=$?",
        'echo "PORT_BASE=$PORT_BASE URL=${INSTANCE_URLS[*]}"',
        'stop_processes "${SERVER_PIDS[@]}"', 'exit "$rc"'])
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
