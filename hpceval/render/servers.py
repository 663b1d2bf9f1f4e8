"""Server instances of one job: which nodes and GPUs each uses, and its exact command lines.

The layout (config/layout.py) says how many instances tile the allocation; this module turns it
into launches. Every argv item is data (quoted when rendered) except the few ShellCode
fragments built here from fixed text, e.g. ``"$PORT"``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hpceval.config import ResolvedConfig
from hpceval.config.aux_layout import Placement
from hpceval.config.schema import DeploymentSpec
from hpceval.engines import engine_for
from hpceval.engines import model_source as model_source
from hpceval.engines import served_name as served_name
from hpceval.render.ports import PortPlan
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
    # another node of an instance that spans nodes (the head's first worker, a worker's head):
    # the step advertises the address that node reaches it at (reached_at), never loopback
    peer: int | None = None


@dataclass(frozen=True)
class Instance:
    index: int
    nodes: list[int]
    launches: list[Launch] = field(default_factory=list)
    on_socket: bool = False  # it listens on a Unix socket of the job ("$SOCKET"), not a port

    @property
    def head_node(self) -> int:
        return self.nodes[0]


@dataclass(frozen=True)
class Served:
    """One deployment this job serves: the model's, or an auxiliary one (a judge)."""

    dep: DeploymentSpec
    where: str  # its key path: deployment | auxiliary_deployments.<name>
    model_name: str | None  # the name it answers to, or None (refused by served_name)
    placement: Placement


def model_served(resolved: ResolvedConfig) -> Served:
    return Served(resolved.spec.deployment, "deployment", resolved.spec.served_name,
                  resolved.placement)


def auxiliary_served(resolved: ResolvedConfig) -> dict[str, Served]:
    """The judges served in this job (scope job, not type none), by name."""
    specs = resolved.spec.auxiliary_deployments
    return {name: Served(specs[name], f"auxiliary_deployments.{name}",
                         specs[name].served_name, placement)
            for name, placement in resolved.auxiliary.items()}


def runs_ray(served: Served) -> bool:
    """Whether the instances of ``served`` each run a Ray cluster across their nodes."""
    layout = served.placement.layout
    return layout.instances > 0 and engine_for(served.dep.type).uses_ray(
        served.dep, layout.nodes_per_instance)


def build_instances(served: Served, ports: PortPlan, sockets: bool = False) -> list[Instance]:
    """The instances of one deployment, on the job's nodes and GPUs its placement gives it.
    ``ports``: the job's port plan (where a Ray node's ports are); ``sockets``: the deployment
    serves on Unix sockets where it can (serves_on_socket): its single-node instances on the
    job's first node, the node the batch script, the health wait and the proxy run on (a
    socket is reached from its own node only)."""
    place = served.placement
    layout = place.layout
    if not engine_for(served.dep.type).serves or layout.instances == 0:
        return []
    span = layout.nodes_per_instance
    instances: list[Instance] = []
    for i in range(layout.instances):
        if span > 1:
            nodes = [place.first_node + n for n in range(i * span, (i + 1) * span)]
            first, count = 0, 0  # whole nodes: no pinning inside them
        else:
            per_node = max(layout.instances_per_node, 1)
            nodes = [place.first_node + i // per_node]
            count = layout.gpus_per_instance if place.pin else 0
            first = place.gpu_offset + (i % per_node) * layout.gpus_per_instance
        on_socket = sockets and nodes == [0]
        instances.append(Instance(i, nodes, _launches(served, ports, nodes, first, count,
                                                      on_socket), on_socket))
    return instances


def _launches(served: Served, ports: PortPlan, nodes: list[int], first: int, count: int,
              on_socket: bool = False) -> list[Launch]:
    dep = served.dep
    engine = engine_for(dep.type)
    n = len(nodes)
    if on_socket:
        return [Launch("head", nodes[0], first, count, engine.socket_argv(served), True)]
    if not engine.multi_node:  # one process per instance, on its head node
        return [Launch("head", nodes[0], first, count, engine.argv(served, nnodes=n, rank=0),
                       True)]
    build = engine.argv
    if engine.uses_ray(dep, n):
        # Ray wants IP addresses, not hostnames: the job script resolves the head's once
        # (HEAD_IP, from the name every node uses for the head) for the nodes that join it;
        # each node starts with its own address (RAY_NODE adds VLLM_HOST_IP, from its step).
        node = ["bash", "-c", ShellCode('"$RAY_NODE"'), "ray-node", var("RAY_TEMP_DIR")]
        # the head's metrics exporters that only the environment moves (ports.RAY_HEAD_ENV)
        head_env = [ShellCode(f"{name}={_ray_port(offset)}")
                    for name, offset in ports.ray_head_env(nodes[0])]
        ray: list[Launch] = [Launch("ray-head", nodes[0], 0, 0, [
            *node, "env", *head_env, "ray", "start", "--head", "--block", "--port", COORD_PORT,
            "--temp-dir", var("RAY_TEMP_DIR"), "--include-dashboard=false",
            *_ray_ports(ports, nodes[0])], peer=nodes[1])]
        ray += [Launch(f"ray-worker-{r}", node_index, 0, 0, [
            *node, "ray", "start", "--block", "--address", ShellCode('"${HEAD_IP}:${COORD_PORT}"'),
            *_ray_ports(ports, node_index)],
            peer=nodes[0]) for r, node_index in enumerate(nodes[1:], start=1)]
        serve = ["bash", "-c", ShellCode('"$WAIT_FOR_RAY"'), "wait-for-ray", n,
                 ShellCode('"${HEAD_IP}:${COORD_PORT}"'), *build(served, nnodes=n, rank=0)]
        return [*ray, Launch("head", nodes[0], 0, 0, serve, True, peer=nodes[1])]
    launches = [Launch("head", nodes[0], first, count, build(served, nnodes=n, rank=0), True,
                       peer=nodes[1] if n > 1 else None)]
    launches += [Launch(f"worker-{r}", node, 0, 0, build(served, nnodes=n, rank=r),
                        peer=nodes[0]) for r, node in enumerate(nodes[1:], start=1)]
    return launches


def _ray_ports(ports: PortPlan, node: int) -> list[Any]:
    """Every port `ray start` listens on, on job node ``node``: its own of the job's block
    (ports.py), from RAY_PORTS (the block's first Ray port, _instances.j2). The client-server
    port on every node: only the head starts that server, but Ray checks the port (by default
    10001) against the node's other ports and refuses to start on a clash."""
    words: list[Any] = ["--ray-client-server-port", var("RAY_CLIENT_PORT")]
    for option, offset in ports.ray_ports(node):
        words += [option, _ray_port(offset)]
    return words


def _ray_port(offset: int) -> ShellCode:
    return ShellCode(f'"$((RAY_PORTS + {int(offset)}))"')
