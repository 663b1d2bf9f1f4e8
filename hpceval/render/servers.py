"""Server instances of one job: which nodes and GPUs each uses, and its exact command lines.

The layout (config/layout.py) says how many instances tile the allocation; this module turns it
into launches. Every argv item is data (quoted when rendered) except the few ShellCode
fragments built here from fixed text, e.g. ``"$PORT"``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hpceval.config import ResolvedConfig
from hpceval.config.errors import ConfigError
from hpceval.render.quoting import ShellCode, var

# Ports inside a job's block: instance i listens on PORT_BASE+i; the coordination port of a
# multi-node instance (torch master / Ray GCS) is PORT_BASE+block/2+i; the proxy takes the last.
PORT = var("PORT")
COORD_PORT = var("COORD_PORT")


@dataclass(frozen=True)
class Launch:
    """One server process: one srun step on one node."""

    role: str  # head | worker-<r> | ray-head | ray-worker-<r>
    node: int  # index into the job's node list
    gpu_first: int  # first GPU of the node's allocation this process uses
    gpu_count: int  # 0: no pinning (CPU server, or the whole node)
    argv: list[Any]
    serves_http: bool = False


@dataclass(frozen=True)
class Instance:
    index: int
    nodes: list[int]
    launches: list[Launch] = field(default_factory=list)

    @property
    def head_node(self) -> int:
        return self.nodes[0]


def model_source(resolved: ResolvedConfig) -> str:
    dep = resolved.spec.deployment
    source = dep.checkpoint_path or dep.hf_model_handle
    if not source:
        raise ConfigError.at("deployment.checkpoint_path", "no model to serve",
                             "set deployment.checkpoint_path or deployment.hf_model_handle")
    return source


def served_name(resolved: ResolvedConfig) -> str:
    dep, ep = resolved.spec.deployment, resolved.spec.target.api_endpoint
    name = dep.served_model_name or ep.model_id
    if not name:
        raise ConfigError.at("deployment.served_model_name", "no model name for requests")
    return name


def _vllm_argv(resolved: ResolvedConfig, *, nnodes: int, rank: int) -> list[Any]:
    dep = resolved.spec.deployment
    argv: list[Any] = ["vllm", "serve", model_source(resolved),
                       "--served-model-name", served_name(resolved),
                       "--tensor-parallel-size", dep.tensor_parallel_size,
                       "--pipeline-parallel-size", dep.pipeline_parallel_size,
                       "--gpu-memory-utilization", str(dep.gpu_memory_utilization),
                       # lm-eval's API models tokenize through /tokenize and /tokenizer_info;
                       # without them they download a tokenizer from the hub, which offline
                       # compute nodes cannot do.
                       "--enable-tokenizer-info-endpoint"]
    if dep.max_model_len is not None:
        argv += ["--max-model-len", dep.max_model_len]
    if nnodes > 1 and dep.multi_node_backend == "ray":
        argv += ["--distributed-executor-backend", "ray"]
    elif nnodes > 1:  # vLLM's own multi-node (multiprocessing): no Ray cluster to manage
        argv += ["--nnodes", nnodes, "--node-rank", rank, "--master-addr", var("HEAD_NODE"),
                 "--master-port", COORD_PORT]
        if rank > 0:
            return [*argv, "--headless", *dep.extra_args]
    return [*argv, "--port", PORT, *dep.extra_args]


def _sglang_argv(resolved: ResolvedConfig, *, nnodes: int, rank: int) -> list[Any]:
    dep = resolved.spec.deployment
    argv: list[Any] = ["python3", "-m", "sglang.launch_server",
                       "--model-path", model_source(resolved),
                       "--served-model-name", served_name(resolved),
                       "--tp-size", dep.tensor_parallel_size,
                       "--pp-size", dep.pipeline_parallel_size,
                       "--mem-fraction-static", str(dep.gpu_memory_utilization),
                       # SGLang listens on 127.0.0.1 by default; the proxy is on another node
                       "--host", "0.0.0.0", "--port", PORT]
    if dep.max_model_len is not None:
        argv += ["--context-length", dep.max_model_len]
    if nnodes > 1:
        argv += ["--nnodes", nnodes, "--node-rank", rank,
                 "--dist-init-addr", ShellCode('"${HEAD_NODE}:${COORD_PORT}"')]
    return [*argv, *dep.extra_args]


def _command_argv(resolved: ResolvedConfig) -> list[Any]:
    dep = resolved.spec.deployment
    if not dep.command:
        raise ConfigError.at("deployment.command", "required when deployment.type is command")
    # The user's server command is shell by definition; bash runs it with $PORT in its
    # environment. It is one quoted word here, so nothing in it is run by the job script itself.
    return ["bash", "-c", dep.command]


def build_instances(resolved: ResolvedConfig) -> list[Instance]:
    spec, layout = resolved.spec, resolved.layout
    dep = spec.deployment
    if dep.type == "none" or layout.instances == 0:
        return []
    span = layout.nodes_per_instance
    instances: list[Instance] = []
    for i in range(layout.instances):
        if span > 1:
            nodes = list(range(i * span, (i + 1) * span))
            first, count = 0, 0  # whole nodes: no pinning inside them
        else:
            per_node = max(layout.instances_per_node, 1)
            nodes = [i // per_node]
            count = layout.gpus_per_instance if per_node > 1 else 0
            first = (i % per_node) * layout.gpus_per_instance
        instances.append(Instance(i, nodes, _launches(resolved, nodes, first, count)))
    return instances


def _launches(resolved: ResolvedConfig, nodes: list[int], first: int, count: int) -> list[Launch]:
    dep = resolved.spec.deployment
    n = len(nodes)
    if dep.type == "command":
        return [Launch("head", nodes[0], first, count, _command_argv(resolved), True)]
    build = _vllm_argv if dep.type == "vllm" else _sglang_argv
    if n > 1 and dep.type == "vllm" and dep.multi_node_backend == "ray":
        # Ray wants the head's IP address, not its hostname: the job script resolves it once
        # (HEAD_IP, from the name every node uses for the head) before the launches.
        ray: list[Launch] = [Launch("ray-head", nodes[0], 0, 0, [
            "ray", "start", "--head", "--block", "--port", COORD_PORT,
            "--node-ip-address", var("HEAD_IP")])]
        ray += [Launch(f"ray-worker-{r}", node, 0, 0, [
            "ray", "start", "--block", "--address", ShellCode('"${HEAD_IP}:${COORD_PORT}"')])
            for r, node in enumerate(nodes[1:], start=1)]
        serve = ["bash", "-c", ShellCode('"$WAIT_FOR_RAY"'), "wait-for-ray", n,
                 *build(resolved, nnodes=n, rank=0)]
        return [*ray, Launch("head", nodes[0], 0, 0, serve, True)]
    launches = [Launch("head", nodes[0], first, count, build(resolved, nnodes=n, rank=0), True)]
    launches += [Launch(f"worker-{r}", node, 0, 0, build(resolved, nnodes=n, rank=r))
                 for r, node in enumerate(nodes[1:], start=1)]
    return launches
