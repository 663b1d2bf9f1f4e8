"""The proxy's aiohttp sessions: one over TCP, one per upstream on a Unix socket, and one per
pinned certificate (an upstream that must prove it is the job's: a sweep judge's front).

A job's server on a Unix socket has the instance URL ``unix:<path>`` (contract.UNIX_URL).
aiohttp's UnixConnector sends every request of its session to one socket path, so each such
upstream gets a session of its own, and is asked for ``http://localhost<path>`` (Instance.base).
Streamed requests, health probes and /metrics go through these; everything else through the
cheap client (proxy.client), which connects to the same socket itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import aiohttp

if TYPE_CHECKING:
    from hpceval.job.proxy.instance import Instance

# below uvicorn's 5 s default, so pooled connections are not reused just as vLLM closes them
# (that race looks like a dead server); limit=0: harnesses set the concurrency, the proxy must
# not cap it at aiohttp's default of 100.
KEEPALIVE_S = 4.0


class Sessions:
    """Made inside the running event loop (ProxyServer.start); ``close`` at shutdown."""

    def __init__(self, trust_env: bool) -> None:
        # trust_env: an API outside the job is reached the way curl on the node reaches it,
        # through the site's https_proxy/http_proxy (aiohttp ignores them otherwise), minus
        # NO_PROXY. The job's own servers never go through a site proxy.
        self.tcp = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S),
            auto_decompress=True, trust_env=trust_env)
        self._unix: dict[str, aiohttp.ClientSession] = {}
        self._pins: dict[bytes, aiohttp.ClientSession] = {}

    def of(self, inst: Instance) -> aiohttp.ClientSession:
        """The session that reaches ``inst``."""
        if inst.pin is not None:
            return self._pinned(inst.pin)
        if inst.socket is None:
            return self.tcp
        session = self._unix.get(inst.socket)
        if session is None:
            session = aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(inst.socket, limit=0,
                                                keepalive_timeout=KEEPALIVE_S),
                auto_decompress=True)
            self._unix[inst.socket] = session
        return session

    def _pinned(self, pin: bytes) -> aiohttp.ClientSession:
        """A session whose every connection must present the certificate `pin` names
        (aiohttp checks it after the handshake, before the request is sent)."""
        session = self._pins.get(pin)
        if session is None:
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S,
                                               ssl=aiohttp.Fingerprint(pin)),
                auto_decompress=True)
            self._pins[pin] = session
        return session

    async def close(self) -> None:
        for session in [self.tcp, *self._unix.values(), *self._pins.values()]:
            await session.close()
        self._unix.clear()
        self._pins.clear()
