"""The job's port block: which port of it each server instance and each proxy takes.

A job takes one block of ports (templates/preamble.j2 picks a free one per node). Inside it:
server instances count up from slot 0 (the model's first, then each judge's), the
coordination port of a multi-node instance is half a block above its slot, a Ray instance's
client-server port (Ray's default 10001 is one per node, whoever takes it first) is one
instance count above its slot, and the proxies count down from the top (the model's proxy last
slot, then one per auxiliary deployment).
"""

from __future__ import annotations

from dataclasses import dataclass

_MAX_PORT_SLOTS = 500
# Linux's default net.ipv4.ip_local_port_range starts here: below it, no outgoing connection on
# the node can be holding a job's port by chance.
EPHEMERAL_FIRST = 32768


@dataclass(frozen=True)
class PortPlan:
    first: int  # deployment.port: the first port of the first block
    model_instances: int
    aux_instances: tuple[tuple[str, int], ...] = ()  # (name, instances served in the job)
    aux_proxies: tuple[str, ...] = ()  # every auxiliary deployment has a proxy in the job

    @property
    def served(self) -> int:
        return max(self.model_instances + sum(n for _, n in self.aux_instances), 1)

    @property
    def block(self) -> int:
        # lower half: instances, then the Ray client ports; upper half: coordination, proxies
        need = max(2 * (self.served + len(self.aux_proxies)) + 2, 4 * self.served)
        return 64 * -(-need // 64)

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

    def view(self) -> dict[str, int]:
        first, block = self.first, self.block
        limit = EPHEMERAL_FIRST if first + block <= EPHEMERAL_FIRST else 65536
        return {"first": first, "block": block, "coord": block // 2, "ray_client": self.served,
                "proxy": block - 1,
                "slots": max(1, min(_MAX_PORT_SLOTS, (limit - first) // block))}
