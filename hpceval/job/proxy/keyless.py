"""Requests the proxy serves without the job's key, and their bounds (shared-cluster-4 N3).

lm-eval's remote tokenizer asks `/tokenizer_info`, `/tokenize` and `/detokenize` without the
key (proxy.guard.KEYLESS), so any uid on the node can too. Before, those requests shared the
job's body budget and took bodies up to 64 MiB: another uid could fill the budget (503s for
the job's own generation requests) and stall the harness. Now:

- a keyless body is capped at `MAX_BODY` (1 MiB: a 128k-token prompt is ~0.5 MB of text) and
  held in a budget of its own (`KeylessBudget`, `TOTAL` bytes), apart from the key-carrying
  requests' budget, so it cannot refuse those;
- no peer (a uid on loopback, else an address: proxy.peers) holds more than half of that
  budget, so one other user cannot take what the harness's tokenizer needs. Peers are looked
  up only while more than half is held: below that none can be over its share;
- `/tokenizer_info` is answered from a copy (`TokenizerInfo`) the proxy fetched once with the
  token: a keyless reader costs the server nothing and sees only what the job's server said.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from hpceval.job.proxy import peers
from hpceval.job.proxy.body import BodyBudget, BodyError, BodyLease

MAX_BODY = 1 << 20
TOTAL = 16 << 20
MAX_INFO = 16 << 20  # a tokenizer_info answer larger than this is passed on, not kept


class KeylessLease(BodyLease):
    """A keyless request's share of the KeylessBudget; `peer` is looked up when first needed."""

    def __init__(self, budget: KeylessBudget, request: web.BaseRequest) -> None:
        super().__init__(budget)
        self.keyless = budget
        self.request = request
        self.peer: str | None = None

    def take(self, n: int) -> None:
        budget = self.keyless
        share = budget.limit // 2
        if budget.held + n > share:
            budget.attribute()
            held = sum(lease.size for lease in budget.leases if lease.peer == self.peer)
            if held + n > share:
                raise BodyError(503, f"{self.peer} holds {held} bytes of keyless request "
                                     f"bodies; {n} more would exceed its share of {share}; "
                                     "retry", "server_busy")
        super().take(n)

    def close(self) -> None:
        super().close()
        self.keyless.leases.discard(self)


class KeylessBudget(BodyBudget):
    """The body budget of keyless requests, with a share per peer (see the module doc)."""

    def __init__(self, limit: int = TOTAL) -> None:
        super().__init__(limit)
        self.leases: set[KeylessLease] = set()

    def lease_for(self, request: web.BaseRequest) -> KeylessLease:
        lease = KeylessLease(self, request)
        self.leases.add(lease)
        return lease

    def attribute(self) -> None:
        """Every open lease's peer, from one read of the socket table."""
        if all(lease.peer is not None for lease in self.leases):
            return
        table = peers.socket_uids()
        for lease in self.leases:
            if lease.peer is None:
                lease.peer = peers.peer_key(*peers.endpoints(lease.request.transport),
                                            uids=table)


@dataclass
class TokenizerInfo:
    """The job's server's /tokenizer_info answer, fetched once with the token."""

    body: bytes | None = None
    content_type: str = "application/json"

    def response(self) -> web.Response | None:
        if self.body is None:
            return None
        return web.Response(status=200, body=self.body, content_type=self.content_type)

    def keep(self, status: int, body: bytes, content_type: str) -> None:
        if status == 200 and len(body) <= MAX_INFO:
            self.body, self.content_type = body, content_type
