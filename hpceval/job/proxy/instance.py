"""One upstream model server as the proxy sees it: its address, its state, who it must be.

Apart from the balancer (which picks among them) because the sessions (proxy.sessions) and the
cheap client need an instance's socket and certificate pin too, and the balancer needs the
sessions to probe: with both in balancer.py they imported each other.
"""

from __future__ import annotations

from typing import Any

from hpceval.contract import unix_socket


class Instance:
    """One upstream model server and what the proxy knows about it."""

    __slots__ = ("base", "done", "down_since", "failures", "held_until", "last_error",
                 "outstanding", "pids", "pin", "probing", "socket", "token", "up", "url")

    def __init__(self, url: str, pids: tuple[int, ...] = (), token: str | None = None,
                 pin: bytes | None = None) -> None:
        # A server's base URL; "http://n:8000/v1" (the OpenAI client convention) means the
        # same server, and keeping /v1 would send requests to /v1/v1/... and probes to /v1/health.
        # "unix:<path>": a job's server on a Unix socket (url names it in logs and progress;
        # requests go to base over the socket, proxy.sessions and proxy.client).
        self.socket = unix_socket(url)
        if self.socket is None:
            url = url.rstrip("/")
            url = url[:-3] if url.endswith("/v1") else url
        self.url = url
        self.base = url if self.socket is None else "http://localhost"
        self.outstanding = 0
        self.up = True  # the job runtime health-waits before starting the proxy
        self.done = 0
        self.failures = 0
        self.last_error: str | None = None
        self.down_since: float | None = None
        self.probing = False
        self.held_until = 0.0  # time.monotonic() before which nothing goes to it (SETTLE_S)
        self.pids = pids  # the job's processes for this instance; () = not known (external)
        # The key this server takes, where servers differ (a sweep judge and its successor):
        # sent with every request to it, whatever the request was built with. None: the
        # request's own Authorization stands.
        self.token = token
        # https: the SHA-256 of the certificate this server must present (a sweep judge's
        # front, its record's tls_sha256). Checked before a byte is sent, the token included:
        # whoever takes the port after the judge has gone cannot present it.
        self.pin = pin

    def snapshot(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "state": "up" if self.up else "down",
            "outstanding": self.outstanding,
            "done": self.done,
            "failures": self.failures,
            "last_error": self.last_error,
            "down_since": self.down_since,
        }
