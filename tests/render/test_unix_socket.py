"""Which servers listen on a Unix socket (deployment.unix_socket, render/deployments.py
serves_on_socket): vLLM from the host, single-node instances on the job's first node, in the
job's own 0700 folder. Everything else keeps its port: containers, instances across nodes or
on other nodes, SGLang and command servers, a sweep's judge job (the models' jobs, elsewhere,
are its clients), and any deployment with unix_socket false."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from render_helpers import context, resolve
from test_golden import MODEL, TASKS
from test_judge_sweep_render import JUDGE, with_aux

from hpceval.render import render_job
from hpceval.render.judge_job import render_judge_job

HOST_VLLM = {"type": "vllm", "runtime": "host", **MODEL}


def listens(script: str) -> list[str]:
    """Per server command line in the script, in order: "socket" or "port"."""
    return ["socket" if flag == "--uds" else "port"
            for flag in re.findall(r"^ +(--uds|--port) ", script, re.M)]


def render(profile: str, deployment: dict[str, Any], tmp_path: Path,
           execution: dict[str, Any] | None = None) -> str:
    resolved = resolve(profile, {"execution": execution or {"gpus_per_node": 1},
                                 "deployment": deployment,
                                 "evaluation": {"tasks": TASKS}}, tmp_path)
    return render_job(resolved, context(resolved))


def test_a_single_node_host_vllm_listens_on_a_socket_in_the_jobs_own_folder(
        tmp_path: Path) -> None:
    script = render("local-dev", HOST_VLLM, tmp_path)
    assert listens(script) == ["socket"]
    assert 'SOCKET_DIR=$(mktemp -d /tmp/hpceval-XXXXXXXX)' in script  # 0700, a fresh name
    assert 'SOCKET="$SOCKET_DIR/server-0.sock"' in script
    assert 'INSTANCE_URLS+=("unix:$SOCKET")' in script
    assert 'rm -rf "$SOCKET_DIR"' in script  # at the end of the job
    # first thing in cleanup: a cancel's grace before KILL ran out while the processes were
    # stopped, and the folder stayed in /tmp (shared-cluster-4 N9)
    cleanup = script[script.index("\ncleanup() {"):]
    assert cleanup.index('rm -rf "$SOCKET_DIR"') < cleanup.index("stop_processes")
    assert "--port" not in script.split("vllm serve", 1)[1].split("\n\n", 1)[0]


@pytest.mark.parametrize(("profile", "deployment", "execution", "expected"), [
    ("local-dev", {**HOST_VLLM, "unix_socket": False}, {"gpus_per_node": 1}, ["port"]),
    # apptainer: the image's vLLM keeps its port (no socket folder bound in)
    ("slurm", {"type": "vllm", "image": "/images/vllm.sif", **MODEL}, {"gpus_per_node": 1},
     ["port"]),
    # one instance across two nodes: its head is reached as a multi-node server
    # (its head has the port; the headless rank on the other node none)
    ("local-dev", {**HOST_VLLM, "tensor_parallel_size": 8}, {"nodes": 2}, ["port"]),
    # four instances on two nodes: the first node's on sockets, the second's on ports
    ("local-dev", {**HOST_VLLM, "tensor_parallel_size": 2}, {"nodes": 2},
     ["socket", "socket", "port", "port"]),
], ids=["off", "container", "across-nodes", "two-nodes"])
def test_what_keeps_a_port(tmp_path: Path, profile: str, deployment: dict[str, Any],
                           execution: dict[str, Any], expected: list[str]) -> None:
    script = render(profile, deployment, tmp_path, execution)
    assert listens(script) == expected
    assert ("SOCKET_DIR=" in script) == ("socket" in expected)


def test_sglang_and_command_servers_keep_their_ports(tmp_path: Path) -> None:
    for deployment in ({"type": "sglang", "runtime": "host", **MODEL},
                       {"type": "command", "command": "serve --port $PORT", "runtime": "host",
                        "served_model_name": "m"}):
        script = render("local-dev", deployment, tmp_path)
        assert "SOCKET_DIR=" not in script and "unix:$SOCKET" not in script


def test_a_sweeps_judge_job_keeps_its_port_its_clients_are_other_jobs(tmp_path: Path) -> None:
    resolved = resolve("local-dev", {"deployment": HOST_VLLM, "evaluation": {"tasks": TASKS}},
                       tmp_path)
    judge = dataclasses.replace(JUDGE, runtime="host", image=None, tensor_parallel_size=1)
    resolved = with_aux(resolved, judge=judge)
    text = render_judge_job(resolved, "judge", context(resolved))
    assert "vllm serve" in text and "SOCKET_DIR=" not in text and "--uds" not in text
