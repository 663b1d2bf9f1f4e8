"""The job's port block: which port of it each server instance, Ray node and proxy takes.

A job takes one block of ports (templates/preamble.j2 picks a free one per node). Inside it:
server instances count up from slot 0 (the model's first, then each judge's), the
coordination port of a multi-node instance is half a block above its slot, a Ray instance's
client-server port (Ray's default 10001 is one per node, whoever takes it first) is one
instance count above its slot, the ports of the job's Ray nodes follow the coordination ports
(job node i from ``ray + i * ray_node``: RAY_NODE_OPTIONS, RAY_HEAD_ENV, then its worker
range), and the proxies count down from the top (the model's proxy last slot, then one per
auxiliary deployment).
"""

from __future__ import annotations

from dataclasses import dataclass

_MAX_PORT_SLOTS = 500
# Linux's default net.ipv4.ip_local_port_range starts here: below it, no outgoing connection on
# the node can be holding a job's port by chance.
EPHEMERAL_FIRST = 32768

# Ray listens on more than its GCS (the coordination port) and its client server: every Ray
# node runs a raylet, a dashboard agent, a runtime-env agent and a metrics exporter, and each
# worker process takes a port. Left to Ray, they take fixed defaults (the dashboard agent's
# 52365, the dashboard's 8265, workers 10002-19999) that a second job on the node collides
# with, or random ones that can land in another job's block; and `ray start` refuses to start
# when its worker range holds another of its ports (Ray's default range holds the blocks from
# 10002 to 19999, the GCS and client ports of a job there included). So each node of the job
# gets its own ports in the block, these first (ray start's option names, from Ray's
# python/ray/scripts/scripts.py; --runtime-env-agent-port since Ray 2.7.1). --dashboard-port on
# every node: Ray checks it against the node's other ports although only the head starts one.
RAY_NODE_OPTIONS = ("--node-manager-port", "--object-manager-port", "--runtime-env-agent-port",
                    "--dashboard-agent-grpc-port", "--dashboard-agent-listen-port",
                    "--metrics-export-port", "--dashboard-port")
# The head's autoscaler monitor and dashboard export Prometheus metrics on fixed ports (44217,
# 44227, on every interface, even with --include-dashboard=false) that only these variables
# move (Ray's autoscaler/_private/constants.py, dashboard/consts.py); next in a node's ports.
RAY_HEAD_ENV = ("AUTOSCALER_METRIC_PORT", "DASHBOARD_METRIC_PORT")
# A Ray node's worker range: one port per worker process, vLLM's Ray workers one per GPU of the
# node, plus this margin for the drivers (vLLM's engine, the job's wait for the nodes, each a
# core worker with a port of the range) and whatever tasks Ray runs for them. Idle workers Ray
# would start per CPU are turned off (RAY_NODE in templates/deployment/vllm.j2).
RAY_WORKER_MARGIN = 16


@dataclass(frozen=True)
class PortPlan:
    first: int  # deployment.port: the first port of the first block
    model_instances: int
    aux_instances: tuple[tuple[str, int], ...] = ()  # (name, instances served in the job)
    aux_proxies: tuple[str, ...] = ()  # every auxiliary deployment has a proxy in the job
    # the job's nodes where an instance of the job runs Ray (0: none does): each has its own
    # Ray ports, by its index in the job, so no two nodes' are one even where nodes share a
    # network stack (the dev cluster's); instances across nodes take whole nodes, so one Ray
    # node per job node
    ray_nodes: int = 0
    gpus_per_node: int = 0

    @property
    def served(self) -> int:
        return max(self.model_instances + sum(n for _, n in self.aux_instances), 1)

    @property
    def ray_node(self) -> int:
        """The ports of one Ray node: RAY_NODE_OPTIONS', RAY_HEAD_ENV's (a head's), then its
        worker range."""
        if not self.ray_nodes:
            return 0
        return len(RAY_NODE_OPTIONS) + len(RAY_HEAD_ENV) + self.gpus_per_node + RAY_WORKER_MARGIN

    @property
    def block(self) -> int:
        # lower half: instances, then the Ray client ports; upper half: coordination, the Ray
        # nodes' ports, proxies (from the top); in multiples of 64
        ray = self.ray_nodes * self.ray_node
        half = max(2 * self.served, self.served + ray + len(self.aux_proxies) + 1)
        return 64 * -(-2 * half // 64)

    def first_slot(self, aux: str | None) -> int:
        """The slot of the first instance of the model (None) or of auxiliary deployment aux."""
        if aux is None:
            return 0
        slot = self.model_instances
        for name, count in self.aux_instances:
            if name == aux:
                return slot
            slot += count
        return slot

    def proxy_slot(self, aux: str | None) -> int:
        if aux is None:
            return self.block - 1
        return self.block - 2 - self.aux_proxies.index(aux)

    def ray_ports(self, node: int) -> list[tuple[str, int]]:
        """The ray start options of job node ``node``, each with its port's offset from the
        first Ray port of the block (view's "ray")."""
        own = node * self.ray_node
        named = [(option, own + i) for i, option in enumerate(RAY_NODE_OPTIONS)]
        workers = own + len(RAY_NODE_OPTIONS) + len(RAY_HEAD_ENV)
        return [*named, ("--min-worker-port", workers),
                ("--max-worker-port", own + self.ray_node - 1)]

    def ray_head_env(self, node: int) -> list[tuple[str, int]]:
        """RAY_HEAD_ENV for a head on job node ``node``, with offsets as ray_ports'."""
        own = node * self.ray_node + len(RAY_NODE_OPTIONS)
        return [(name, own + i) for i, name in enumerate(RAY_HEAD_ENV)]

    def view(self) -> dict[str, int]:
        first, block = self.first, self.block
        limit = EPHEMERAL_FIRST if first + block <= EPHEMERAL_FIRST else 65536
        return {"first": first, "block": block, "coord": block // 2, "ray_client": self.served,
                "ray": block // 2 + self.served, "ray_node": self.ray_node,
                "proxy": block - 1,
                "slots": max(1, min(_MAX_PORT_SLOTS, (limit - first) // block))}
