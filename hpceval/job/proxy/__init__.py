"""The in-job OpenAI-compatible proxy: harnesses -> ProxyServer -> the job's model servers.

Modules by concern: server (lifetime and front door), relay (serving an admitted request), body
and guard (what gets in, and how much), keyless and peers (requests without the key, per-peer
shares), balancer, instance, liveness and sessions (which upstream, and whether it is still the
job's), forward and client (sending upstream), stats (per-task counts), hold (waiting for the
model to load), tls (a sweep judge's front), config and cli (settings), process (signals, the
ready file). `python -m hpceval.job proxy` runs cli.main.

ProxyServer is imported here on purpose: the job script checks its Python on the node with
`import hpceval.job.proxy` (templates/teardown.j2) before any server starts, and that check is
worth something only if it loads what the proxy will load (aiohttp's compiled parts included,
the usual failure on a node of another architecture).
"""

from hpceval.job.proxy.server import ProxyServer

__all__ = ["ProxyServer"]
