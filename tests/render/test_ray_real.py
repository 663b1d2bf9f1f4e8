"""The rendered Ray lines run with real Ray: every port the job's Ray cluster listens on is in its
block (hpc-admin-2 D11), checked against what the processes bind, not against the options.

Opt-in: set HPCEVAL_RAY_BIN to a folder holding `ray` and a `python3` that imports ray
(`python3 -m venv /tmp/ray && /tmp/ray/bin/pip install 'ray[default]'`; Ray 2.60 here). The
two nodes of the job run on this host, sharing its network stack as the dev cluster's nodes
do; the container prefix is left out (Ray runs from the host), the rest is the rendered line.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from render_helpers import RenderFn
from test_ray_ports import RAY, block_of, launches


def ray_bin() -> str:
    folder = os.environ.get("HPCEVAL_RAY_BIN")
    if not folder:
        pytest.skip("set HPCEVAL_RAY_BIN to a folder with Ray's `ray` and a python3 importing "
                    "ray (pip install 'ray[default]')")
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) is needed to see what the Ray processes listen on")
    return folder


def host_address() -> str:
    """This host's address on its route out (Ray takes it for 127.0.0.1 anyway)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent
            return str(probe.getsockname()[0])
        except OSError:
            return "127.0.0.1"


def listening() -> dict[int, set[int]]:
    """port -> the pids listening on it, from `ss -ltnpH`."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found: dict[int, set[int]] = {}
    for line in out.splitlines():
        fields = line.split()
        port = int(fields[3].rsplit(":", 1)[1])
        found.setdefault(port, set()).update(int(p) for p in re.findall(r"pid=(\d+)", line))
    return found


def in_sessions(sessions: set[int]) -> set[int]:
    out = subprocess.run(["ps", "-eo", "pid=,sid="], capture_output=True, text=True,
                         check=True).stdout
    return {int(pid) for pid, sid in (line.split() for line in out.splitlines())
            if int(sid) in sessions}


def free_base(first: int, block: int) -> int:
    taken = set(listening())
    k = 20
    while any(port in taken for port in range(first + k * block, first + (k + 1) * block)):
        k += 1
    return first + k * block


DRIVER = """import ray, subprocess
@ray.remote(num_cpus=0)
class Worker:
    def ping(self):
        return 1
workers = [Worker.remote() for _ in range(3)]
assert sum(ray.get([w.ping.remote() for w in workers])) == 3
open("{out}", "w").write(subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout)
print("driver done", flush=True)
"""


def test_a_real_ray_cluster_listens_only_in_the_jobs_block(render: RenderFn,
                                                           tmp_path: Path) -> None:
    folder = ray_bin()
    script = render("slurm", RAY, ["execution.nodes=2"])
    first, block = block_of(script)
    base = free_base(first, block)
    address = host_address()
    calls = {c["role"]: c for c in launches(script, base, tmp_path, address)}
    env = {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}", "VLLM_HOST_IP": address}
    procs: list[subprocess.Popen[bytes]] = []
    temp_dirs = []
    try:
        for role in ("ray-head", "ray-worker-1"):
            argv = calls[role]["argv"]
            argv = argv[argv.index("bash"):]  # the container prefix left out
            if role != "ray-head":  # each node makes its own; here they share one /tmp
                argv[argv.index("ray-node") + 1] += "-node1"
            temp_dirs.append(argv[argv.index("ray-node") + 1])
            # a small object store: the test host is not a GPU node
            argv += ["--object-store-memory", str(100 * 2**20)]
            log = (tmp_path / f"{role}.log").open("wb")
            procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))
            time.sleep(5)
        # the rendered waiter, with a driver that starts workers instead of `vllm serve`
        head = calls["head"]["argv"]
        waiter = head[head.index("bash"):head.index("wait-for-ray") + 3]
        snapshot = tmp_path / "listening"
        driver = subprocess.run([*waiter, "python3", "-c", DRIVER.format(out=snapshot)],
                                env=env, capture_output=True, text=True, timeout=300,
                                check=False, start_new_session=True)
        assert driver.returncode == 0, driver.stdout + driver.stderr
        ours = in_sessions({p.pid for p in procs})
        ports = {}
        for line in snapshot.read_text().splitlines():
            port = int(line.split()[3].rsplit(":", 1)[1])
            pids = {int(p) for p in re.findall(r"pid=(\d+)", line)}
            if pids & ours:
                ports[port] = line
        outside = {p: line for p, line in ports.items() if not base <= p < base + block}
        assert not outside, f"block {base}-{base + block - 1}: {outside}"
        # GCS, client server, per node: 2 raylet, runtime-env, 3 agent, workers; head: 2 metrics
        assert len(ports) >= 14, ports
    finally:
        for proc in procs:
            with_group(proc.pid, signal.SIGTERM)
        deadline = time.time() + 60
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(1, deadline - time.time()))
        for proc in procs:
            with_group(proc.pid, signal.SIGKILL)
        for folder in temp_dirs:
            shutil.rmtree(folder, ignore_errors=True)


def with_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)
