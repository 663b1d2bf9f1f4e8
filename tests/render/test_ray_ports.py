"""Ray on nodes other jobs share (hpc-admin-2 D11): every port a Ray node listens on is inside the
job's port block, on the head and on every node that joins it.

Ray listens on more than its GCS and client server: each node runs a raylet (node manager and
object manager), a dashboard agent (HTTP on 52365 by default, and gRPC), a runtime-env agent, a
metrics exporter, and one port per worker process (10002-19999 by default); the head also
runs the autoscaler's and the dashboard's metrics exporters (44217, 44227). Left to Ray, two
jobs on a node collide on the fixed defaults, and a random or default one can land in another
job's block. The test runs the rendered start_servers in bash (srun stubbed: launch_server
records its arguments), reads the ports each `ray start` got, and checks them against the
options of Ray's own CLI (python/ray/scripts/scripts.py), written out here, not imported.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from render_helpers import RenderFn
from test_job_trust import VLLM_RUN

from hpceval.render.ports import PortPlan

# The ports `ray start` binds on every node (Ray's option names); --dashboard-port: Ray checks
# it against the others on every node, although only the head starts a dashboard.
NODE_PORTS = ("--node-manager-port", "--object-manager-port", "--runtime-env-agent-port",
              "--dashboard-agent-grpc-port", "--dashboard-agent-listen-port",
              "--metrics-export-port", "--dashboard-port", "--ray-client-server-port")
HEAD_PORTS = ("--port",)  # the GCS
# the head's autoscaler and dashboard Prometheus exporters (fixed 44217, 44227 by default): only
# their environment variables move them (Ray's autoscaler and dashboard constants)
HEAD_ENV = ("AUTOSCALER_METRIC_PORT", "DASHBOARD_METRIC_PORT")
GPUS = 8  # the slurm profile's gpus_per_node

RAY = {**VLLM_RUN, "deployment": {**VLLM_RUN["deployment"], "tensor_parallel_size": 8,
                                  "pipeline_parallel_size": 2, "multi_node_backend": "ray"}}
# a judge on a node of its own (Ray is for the model only): its instance and proxy in the block
RAY_JUDGE = {**RAY, "evaluation": {"tasks": [{"name": "judged", "params": {"extra": {"judge": {
    "url": "auxiliary_deployments.judge.chat_url",
    "model_id": "auxiliary_deployments.judge.model_id"}}}}]},
    "auxiliary_deployments": {"judge": {
        "type": "vllm", "image": "/images/vllm.sif", "checkpoint_path": "/j",
        "served_model_name": "j", "tensor_parallel_size": 8}}}
SHAPES = {"one instance on 2 nodes": (RAY, ["execution.nodes=2"]),
          "two instances on 4 nodes": (RAY, ["execution.nodes=4"]),
          "a judge on a third node": (RAY_JUDGE, ["execution.nodes=2"])}


def block_of(script: str) -> tuple[int, int]:
    """deployment.port and the block size the script's free_port_block is called with."""
    match = re.search(r"^PORT_BASE=\$\(free_port_block (\d+) (\d+) ", script, re.M)
    assert match, "no PORT_BASE line"
    return int(match.group(1)), int(match.group(2))


def start_servers(script: str) -> str:
    """The rendered start_servers function. Functions it defines end with a `}` in column 0
    too: its own end is the first such line after which the text is whole bash."""
    start = script.index("\nstart_servers() {\n") + 1
    end = script.index("\n}\n", start)
    while subprocess.run(["bash", "-n"], input=script[start:end + 3], text=True,
                         capture_output=True, check=False).returncode:
        end = script.index("\n}\n", end + 1)
    return script[start:end + 3]


def launches(script: str, port_base: int, tmp_path: Path,
             address: str = "") -> list[dict[str, Any]]:
    """Run the script's start_servers with PORT_BASE set; each launch_server call's role, node
    and command words, as bash expanded them. Node names resolve to 10.0.0.<n>, or all to
    ``address``."""
    record = tmp_path / f"launches-{port_base}"
    resolved = address or "10.0.0.$(( ${#2} % 200 + 1 ))"
    stubs = f"getent() {{ echo \"{resolved} STREAM $2\"; }}" + """
log() { :; }; job_failure() { echo "job_failure: $*" >&2; }
launch_server() { printf '%s\\0' "$@" >> "$RECORD"; printf '\\n\\0' >> "$RECORD"; }
declare -A URL_PIDS
NODES=(node-a node-bb node-ccc node-dddd)
"""
    code = f"{stubs}\n{start_servers(script)}\nPORT_BASE={port_base}\nstart_servers\n"
    proc = subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=60,
                          check=False, env={"PATH": os.environ["PATH"], "RECORD": str(record),
                                            "MODEL_DIR": str(tmp_path), "HPCEVAL_JOB_ID": "7"})
    assert proc.returncode == 0, proc.stderr
    calls = record.read_text().split("\n\0")[:-1]
    out = []
    for call in calls:
        words = call.split("\0")[:-1]
        out.append({"role": words[1], "node": words[2], "argv": words[6:]})
    return out


def ray_options(argv: list[str]) -> dict[str, str]:
    """The options of the `ray start` in a launch's argv (after the container prefix)."""
    start = next(i for i in range(len(argv) - 1) if argv[i:i + 2] == ["ray", "start"])
    opts: dict[str, str] = {}
    words = argv[start + 2:]
    for i, word in enumerate(words):
        if word.startswith("--") and "=" not in word and i + 1 < len(words) \
                and not words[i + 1].startswith("--"):
            opts[word] = words[i + 1]
    return opts


def ray_env(argv: list[str]) -> dict[str, str]:
    """The NAME=VALUE words of an `env` before the `ray start` of a launch's argv."""
    start = next(i for i in range(len(argv) - 1) if argv[i:i + 2] == ["ray", "start"])
    env = argv[argv.index("env") + 1:start] if "env" in argv[:start] else []
    return dict(word.split("=", 1) for word in env)


def bound_ports(call: dict[str, Any]) -> list[int]:
    """What one `ray start` binds: its named ports and its worker range; the client server, the
    dashboard and the metrics exporters of HEAD_ENV on the head only."""
    head = call["role"] == "ray-head"
    opts = ray_options(call["argv"])
    named = [o for o in NODE_PORTS if head or o not in ("--ray-client-server-port",
                                                         "--dashboard-port")]
    ports = [int(opts[o]) for o in (*named, *(HEAD_PORTS if head else ()))]
    if head:
        ports += [int(v) for v in ray_env(call["argv"]).values()]
    return ports + list(range(int(opts["--min-worker-port"]), int(opts["--max-worker-port"]) + 1))


@pytest.mark.parametrize("shape", SHAPES)
def test_every_port_ray_listens_on_is_in_the_jobs_block(render: RenderFn, shape: str,
                                                       tmp_path: Path) -> None:
    run, overrides = SHAPES[shape]
    script = render("slurm", run, overrides)
    first, block = block_of(script)
    base = first + 3 * block
    calls = launches(script, base, tmp_path)
    rays = [c for c in calls if c["role"].startswith("ray-")]
    assert rays and any(c["role"] == "ray-head" for c in rays), calls
    taken: dict[int, str] = {}
    for call in rays:
        head = call["role"] == "ray-head"
        opts = ray_options(call["argv"])
        missing = [o for o in (*NODE_PORTS, "--min-worker-port", "--max-worker-port",
                               *(HEAD_PORTS if head else ())) if o not in opts]
        env = ray_env(call["argv"])
        missing += [name for name in HEAD_ENV if head and name not in env]
        assert not missing, f"{call['role']} on {call['node']}: {missing} left to Ray's defaults"
        ports = [int(opts[o]) for o in opts if o.endswith("-port") or o == "--port"]
        ports += [int(env[name]) for name in HEAD_ENV if name in env]
        assert all(base <= p < base + block for p in ports), (call["role"], opts, base, block)
        # Ray refuses to start when two of a node's ports are one (its pre-selected port check,
        # the worker range included): the client port a joining node is given counts there too
        own = [int(opts[o]) for o in NODE_PORTS] + list(
            range(int(opts["--min-worker-port"]), int(opts["--max-worker-port"]) + 1))
        assert len(own) == len(set(own)), (call["role"], opts)
        # a worker port per GPU of the node (vLLM's Ray workers), and room for the drivers
        workers = int(opts["--max-worker-port"]) - int(opts["--min-worker-port"]) + 1
        assert workers >= GPUS + 4, (call["role"], opts)
        # no two nodes' ports are one: the dev cluster's nodes share one network stack
        for port in bound_ports(call):
            assert port not in taken, f"{call['role']}: {port} is {taken[port]}'s too"
            taken[port] = f"{call['node']} {call['role']}"
    # and none is a port of the job's servers or proxies
    servers = {base + int(m) for m in re.findall(r"^PORT=\$\(\(PORT_BASE \+ (\d+)\)\)$", script,
                                                  re.M)}
    assert servers and not servers & set(taken)
    assert base + block - 1 not in taken  # the model's proxy


@pytest.mark.parametrize("shape", SHAPES)
def test_two_jobs_blocks_share_no_ray_port(render: RenderFn, shape: str, tmp_path: Path) -> None:
    run, overrides = SHAPES[shape]
    script = render("slurm", run, overrides)
    first, block = block_of(script)

    def ports(base: int) -> set[int]:
        got: set[int] = set()
        for call in launches(script, base, tmp_path):
            if call["role"].startswith("ray-"):
                got |= set(bound_ports(call))
        return got

    one, two = ports(first), ports(first + block)
    assert one and two and not one & two


def test_ray_starts_no_worker_per_cpu_on_the_first_driver(render: RenderFn,
                                                         tmp_path: Path) -> None:
    """Ray starts an idle worker per CPU it sees when the first driver connects (a node's 128
    cores: 128 ports), more than the job's worker range holds; RAY_NODE turns that off on
    every node. Run as the step runs it, with `env` as the Ray command (in `bash -c`, which
    takes the options RAY_NODE appends as its own arguments)."""
    script = render("slurm", RAY, ["execution.nodes=2"])
    node = re.search(r"^RAY_NODE='(.*?)'$", script, re.S | re.M)
    assert node
    proc = subprocess.run(["bash", "-c", node.group(1), "ray-node", str(tmp_path / "ray"),
                           "bash", "-c", "env", "ray"],
                          capture_output=True, text=True, timeout=30, check=False,
                          env={"PATH": os.environ["PATH"], "VLLM_HOST_IP": "10.0.0.1"})
    assert proc.returncode == 0, proc.stderr
    assert "RAY_prestart_worker_first_driver=0" in proc.stdout.splitlines()


@pytest.mark.parametrize("served,aux,proxies,nodes", [
    (1, (), (), 0), (1, (), (), 2), (2, (), (), 4), (1, (("j", 1),), ("j",), 3),
    (3, (("j", 2), ("k", 1)), ("j", "k"), 8), (40, (), (), 0), (1, (), (), 32)])
def test_the_block_parts_never_overlap(served: int, aux: tuple[tuple[str, int], ...],
                                       proxies: tuple[str, ...], nodes: int) -> None:
    plan = PortPlan(8000, served, aux, proxies, ray_nodes=nodes, gpus_per_node=GPUS)
    view = plan.view()
    n = plan.served
    parts = {"instances": range(0, n), "ray client": range(view["ray_client"],
                                                           view["ray_client"] + n),
             "coordination": range(view["coord"], view["coord"] + n),
             "ray nodes": range(view["ray"], view["ray"] + nodes * view["ray_node"]),
             "proxies": range(view["proxy"] - len(proxies), view["proxy"] + 1)}
    used: dict[int, str] = {}
    for name, part in parts.items():
        for offset in part:
            assert 0 <= offset < view["block"], (name, offset, view)
            assert offset not in used, f"{name} and {used[offset]} share offset {offset}"
            used[offset] = name
    if nodes:
        ray = [plan.ray_ports(node) for node in range(nodes)]
        for node, options in enumerate(ray):
            options = options + plan.ray_head_env(node)
            offsets = dict(options)
            workers = range(offsets["--min-worker-port"], offsets["--max-worker-port"] + 1)
            assert len(workers) >= GPUS + 4
            named = [off for name, off in options if not name.endswith("-worker-port")]
            assert len(set(named)) == len(named) and not set(named) & set(workers), options
            assert all(node * view["ray_node"] <= off < (node + 1) * view["ray_node"]
                       for _, off in options)
