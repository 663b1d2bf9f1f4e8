"""A fault injector between the in-job proxy and a real model server (HTTP/1.1, stdlib only).

    python tests/fakes/fault_injector.py --upstream http://HOST:PORT --host H --port 0 \
        --port-file FILE --state DIR

Every request goes on to ``--upstream``, except that a generation request (POST
``/v1/completions`` or ``/v1/chat/completions``) may get a fault, chosen by the SHA-256 of its
body, so the same request gets the same treatment in every job:

* **transient** (hash % 10 == 0): its first attempt only, then it is forwarded. The fault is
  one of, by the hash: ``500`` (a JSON error), ``reset`` (the connection closed without an
  answer), ``truncated`` (a 200 whose body stops at half its Content-Length), ``504`` (a
  gateway timeout's answer: the proxy's own per-attempt timeout is 30 minutes in a job, too
  long for a test). The in-job proxy's retries should absorb every one of them.
* **poisoned** (hash % 10 == 1): a 500 on every attempt while ``DIR/heal`` does not exist:
  more failures than any retry absorbs, until the test heals the server.

Each request's fate is one JSON line in ``DIR/log.jsonl``: ``{"hash", "outcome", "healed"}``,
outcome ``ok`` (forwarded, answered), ``poison``, or the transient fault's name. The port is
written to ``--port-file`` (renamed into place) once it accepts connections.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import json
import os
import socket
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

GENERATION = ("/v1/completions", "/v1/chat/completions")
TRANSIENT = ("500", "reset", "truncated", "504")
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class Injector:
    def __init__(self, upstream: str, state: Path) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.state = state
        self.faulted: set[str] = set()  # transient faults given (each body's first attempt)
        self.lock = threading.Lock()

    def fate(self, digest: str) -> str:
        value = int(digest, 16)
        healed = (self.state / "heal").exists()
        with self.lock:
            if value % 10 == 1 and not healed:
                return "poison"
            if value % 10 == 0 and digest not in self.faulted:
                self.faulted.add(digest)
                return TRANSIENT[(value // 10) % len(TRANSIENT)]
        return "ok"

    def note(self, digest: str, outcome: str) -> None:
        line = json.dumps({"hash": digest, "outcome": outcome,
                           "healed": (self.state / "heal").exists()}) + "\n"
        fd = os.open(self.state / "log.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def handler_for(injector: Injector) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _forward(self, body: bytes | None) -> tuple[int, list[tuple[str, str]], bytes]:
            conn = http.client.HTTPConnection(injector.host, injector.port, timeout=1800)
            try:
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in HOP_HEADERS}
                conn.request(self.command, self.path, body=body, headers=headers)
                answer = conn.getresponse()
                return answer.status, answer.getheaders(), answer.read()
            finally:
                conn.close()

        def _send(self, status: int, headers: list[tuple[str, str]], body: bytes,
                  sent: int | None = None) -> None:
            self.send_response(status)
            for name, value in headers:
                if name.lower() not in HOP_HEADERS:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body if sent is None else body[:sent])
            self.wfile.flush()

        def _cut(self) -> None:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

        def _error(self, status: int, message: str) -> None:
            body = json.dumps({"error": {"message": message, "code": status}}).encode()
            self._send(status, [("Content-Type", "application/json")], body)

        def do_GET(self) -> None:
            self._send(*self._forward(None))

        def do_POST(self) -> None:
            body = self._body()
            if self.path.split("?")[0] not in GENERATION:
                self._send(*self._forward(body))
                return
            digest = hashlib.sha256(body).hexdigest()
            fate = injector.fate(digest)
            if fate in ("poison", "500"):
                self._error(500, f"injected fault: {fate}")
            elif fate == "504":
                self._error(504, "injected fault: gateway timeout")
            elif fate == "reset":
                self._cut()
            else:
                status, headers, answer = self._forward(body)
                if fate == "truncated":
                    self._send(status, headers, answer, sent=len(answer) // 2)
                    self._cut()
                else:
                    self._send(status, headers, answer)
                    fate = "ok" if 200 <= status < 300 else f"upstream {status}"
            injector.note(digest, fate)

    return Handler


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--upstream", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file", type=Path, required=True)
    p.add_argument("--state", type=Path, required=True)
    args = p.parse_args()
    args.state.mkdir(parents=True, exist_ok=True)
    server = ThreadingHTTPServer((args.host, args.port), handler_for(
        Injector(args.upstream, args.state)))
    server.daemon_threads = True
    tmp = args.port_file.with_name(args.port_file.name + ".tmp")
    tmp.write_text(str(server.server_address[1]))
    tmp.rename(args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
