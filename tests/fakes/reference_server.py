#!/usr/bin/env python3
"""A deterministic OpenAI-compatible server for tests (stdlib only, no model).

    python3 reference_server.py --port 8000 [--model NAME] [--startup-delay S] [--fail]
                                [--request-log DIR]

GET /health, GET /v1/models, POST /v1/chat/completions, POST /v1/completions. The answer to a
prompt is a pure function of the prompt: "2+2" style sums are answered, everything else is
echoed, so tests can check exact outputs. `--fail` exits 1 at once (a server that cannot start);
`--startup-delay` keeps /health unready for S seconds (a slow model load); `--request-log DIR`
appends every POST (path and body, as the server got it, and whether it came while /health
still said loading) to DIR/requests-<port>.jsonl. The port
defaults to $PORT, which the `command` deployment sets.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_SUM = re.compile(r"(-?\d+)\s*\+\s*(-?\d+)")


def answer(prompt: str) -> str:
    m = _SUM.search(prompt)
    if m:
        return str(int(m.group(1)) + int(m.group(2)))
    return f"echo: {prompt}"


class Handler(BaseHTTPRequestHandler):
    server: ReferenceServer

    def log_message(self, fmt: str, *args: Any) -> None:
        sys.stderr.write(f"[reference-server:{self.server.port}] {fmt % args}\n")

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Served-By", f"{socket.gethostname()}:{self.server.port}")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if not self.server.ready():
            self._send(503, {"error": "loading"})
        elif self.path == "/health":
            self._send(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [
                {"id": self.server.model, "object": "model", "owned_by": "hpceval-tests"}]})
        else:
            self._send(404, {"error": f"no route {self.path}"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            self._send(400, {"error": "body is not JSON"})
            return
        self.server.log_request_body(self.path, body)
        if self.path == "/v1/chat/completions":
            messages = body.get("messages") or [{}]
            prompt = str(messages[-1].get("content", ""))
            choice: dict[str, Any] = {"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": answer(prompt)}}
        elif self.path == "/v1/completions":
            prompt = str(body.get("prompt", ""))
            choice = {"index": 0, "finish_reason": "stop", "text": answer(prompt)}
        else:
            self._send(404, {"error": f"no route {self.path}"})
            return
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
        self._send(200, {"id": f"cmpl-{digest}", "object": "chat.completion", "created": 0,
                         "model": body.get("model", self.server.model), "choices": [choice],
                         "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": 1,
                                   "total_tokens": len(prompt.split()) + 1}})


class ReferenceServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, model: str, startup_delay: float,
                 request_log: str | None = None) -> None:
        super().__init__(("0.0.0.0", port), Handler)
        self.port = port
        self.model = model
        self._ready_at = time.monotonic() + startup_delay
        self._log = os.path.join(request_log, f"requests-{port}.jsonl") if request_log else None
        self._log_lock = threading.Lock()

    def log_request_body(self, path: str, body: Any) -> None:
        if self._log is None:
            return
        line = json.dumps({"path": path, "body": body, "loading": not self.ready()}) + "\n"
        with self._log_lock, open(self._log, "a", encoding="utf-8") as f:
            f.write(line)

    def ready(self) -> bool:
        return time.monotonic() >= self._ready_at


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    ap.add_argument("--model", default="reference-model")
    ap.add_argument("--startup-delay", type=float, default=0.0)
    ap.add_argument("--fail", action="store_true", help="exit 1 immediately")
    ap.add_argument("--request-log", metavar="DIR",
                    help="append each POST to DIR/requests-PORT.jsonl")
    args = ap.parse_args(argv)
    if args.fail:
        print("reference server: asked to fail at start-up", file=sys.stderr)
        return 1
    server = ReferenceServer(args.port, args.model, args.startup_delay, args.request_log)
    print(f"reference server: {args.model} on port {args.port}", file=sys.stderr, flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
