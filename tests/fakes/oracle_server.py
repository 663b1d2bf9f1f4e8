"""A deterministic OpenAI-compatible server that answers GSM8K from an answer key.

Run as a process, like a real model server, so it can sit on a compute node inside a Slurm job
as well as beside a test::

    python tests/fakes/oracle_server.py --port 0 --port-file /tmp/oracle.port

It binds 127.0.0.1 (0.0.0.0 when $PORT is set: see ``--host``; an ephemeral port with
``--port 0``) and writes the port to ``--port-file`` once it accepts connections; the file
is renamed into place, so a reader never sees it half written. Standard library only.

Endpoints: ``/v1/completions`` and ``/v1/chat/completions`` (generation only: ``echo`` with
``logprobs`` is refused, so a log-likelihood task fails loudly instead of scoring noise),
``/v1/models``, ``/health``, ``/stats`` (request counters), and vLLM's tokenizer endpoints
``/tokenizer_info``, ``/tokenize``, ``/detokenize``. lm-eval's ``local-completions`` probes the
last three and then uses this server's tokenizer instead of downloading one from the hub, the
same path it takes against ``vllm serve --enable-tokenizer-info-endpoint``. Tokens are Unicode
code points: lossless, and no vocabulary to ship.

Failure drills (tests/integration/test_resume_drills.py) use three more options, all off by
default:

* ``--request-log FILE``: one JSON line per answered generation request, appended with a single
  ``write`` on an ``O_APPEND`` descriptor, so several instances (processes, nodes, jobs) can share
  one file: ``{"hash": ..., "pid": ..., "time": ..., "job": ..., "node": ..., "path": ...,
  "known": ...}``. ``hash`` is ``prompt_hash`` of the prompt (completions) or messages (chat):
  the same request in a later job has the same hash. A line is written only once the whole
  answer has been written to the socket, so a logged request is one the client could receive.
* ``--delay SECONDS``: sleep that long before answering each generation request (a run slow
  enough to interrupt).
* ``--die-after N``: after the N-th answered generation request, exit at once with status 3
  (``os._exit``: no shutdown, open connections are dropped), like a crashed instance.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # answer_key, when run as a script
from answer_key import AnswerKey, reply

UNKNOWN_REPLY = " I do not know."
EOS = "<|endoftext|>"
DIE_STATUS = 3  # --die-after's exit status


def prompt_hash(prompt_or_messages: Any) -> str:
    """A stable hash of a request's prompt (completions) or messages (chat): sha256 of canonical
    JSON, so it depends neither on the process nor on the other request fields."""
    text = json.dumps(prompt_or_messages, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class RequestLog:
    """Appends one line per answered request; one write per line on an O_APPEND descriptor, so
    lines from several processes sharing the file never interleave."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.job = os.environ.get("SLURM_JOB_ID")
        self.node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename

    def record(self, path: str, digest: str, known: bool) -> None:
        line = json.dumps({"hash": digest, "pid": os.getpid(), "time": round(time.time(), 6),
                           "job": self.job, "node": self.node, "path": path, "known": known},
                          separators=(",", ":")) + "\n"
        os.write(self.fd, line.encode("utf-8"))  # short only on errors, which should fail loudly


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts = {"requests": 0, "answered": 0, "unknown": 0}
        self.delivered = 0  # generation answers written to the socket (for --die-after)

    def add(self, key: str) -> None:
        with self.lock:
            self.counts[key] += 1

    def deliver(self) -> int:
        with self.lock:
            self.delivered += 1
            return self.delivered


def _prompts(prompt: Any) -> list[str]:
    """OpenAI ``prompt``: a string, a list of strings, token ids, or a list of token-id lists."""
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return ["".join(map(chr, prompt))]
    if isinstance(prompt, list):
        return [p if isinstance(p, str) else "".join(map(chr, p)) for p in prompt]
    raise ValueError("prompt must be a string, a list of strings or token ids")


def _cut(text: str, stop: Any, max_tokens: Any) -> tuple[str, str]:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    finish = "stop"
    for s in stops:
        if s and s in text:
            text = text[:text.index(s)]
    if isinstance(max_tokens, int) and 0 <= max_tokens < len(text):
        text, finish = text[:max_tokens], "length"
    return text, finish


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: lm-eval pools its connections
    server: OracleServer

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"error": {"message": message, "type": "invalid_request_error"}})

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": self.server.model,
                                                         "object": "model"}]})
        elif self.path == "/tokenizer_info":
            self._send(200, {"eos_token": EOS, "bos_token": None, "pad_token": None,
                             "tokenizer_class": "UnicodeCodePoints", "model_max_length": 32768})
        elif self.path == "/stats":
            with self.server.stats.lock:
                self._send(200, dict(self.server.stats.counts))
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            routes = {"/v1/completions": self._completions,
                      "/v1/chat/completions": self._chat,
                      "/tokenize": self._tokenize, "/detokenize": self._detokenize}
            route = routes.get(self.path)
            if route is None:
                self._error(404, f"no route {self.path}")
            else:
                route(body)
        except (ValueError, KeyError, TypeError) as exc:
            self._error(400, str(exc))

    def _answer(self, prompt: str) -> str:
        stats = self.server.stats
        stats.add("requests")
        item = self.server.key.lookup(prompt)
        stats.add("answered" if item else "unknown")
        return reply(item) if item else UNKNOWN_REPLY

    def _delivered(self, digest: str, known: bool) -> None:
        """A generation answer has been written: log it, then die if that was the last one."""
        server = self.server
        if server.request_log is None and server.die_after is None:
            return
        self.wfile.flush()
        if server.request_log is not None:
            server.request_log.record(self.path, digest, known)
        n = server.stats.deliver()
        if server.die_after is not None and n >= server.die_after:
            print(f"oracle server: --die-after {server.die_after} reached, exiting with status "
                  f"{DIE_STATUS}", file=sys.stderr, flush=True)
            os._exit(DIE_STATUS)

    def _completions(self, body: dict[str, Any]) -> None:
        if body.get("echo") or body.get("logprobs"):
            self._error(400, "the oracle serves generation only (no echo/logprobs scoring)")
            return
        if self.server.delay:
            time.sleep(self.server.delay)
        known = True
        choices = []
        for index, prompt in enumerate(_prompts(body["prompt"])):
            answer = self._answer(prompt)
            known = known and answer != UNKNOWN_REPLY
            text, finish = _cut(answer, body.get("stop"), body.get("max_tokens"))
            choices.append({"index": index, "text": text, "finish_reason": finish,
                            "logprobs": None})
        self._send(200, {"id": "cmpl-oracle", "object": "text_completion",
                         "created": int(time.time()), "model": self.server.model,
                         "choices": choices})
        self._delivered(prompt_hash(body["prompt"]), known)

    def _chat(self, body: dict[str, Any]) -> None:
        users = [m for m in body["messages"] if m.get("role") == "user"]
        content = users[-1]["content"] if users else ""
        if isinstance(content, list):  # OpenAI content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if self.server.delay:
            time.sleep(self.server.delay)
        answer = self._answer(str(content))
        text, finish = _cut(answer.strip(), body.get("stop"), body.get("max_tokens"))
        self._send(200, {"id": "chatcmpl-oracle", "object": "chat.completion",
                         "created": int(time.time()), "model": self.server.model,
                         "choices": [{"index": 0, "finish_reason": finish,
                                      "message": {"role": "assistant", "content": text}}]})
        self._delivered(prompt_hash(body["messages"]), answer != UNKNOWN_REPLY)

    def _tokenize(self, body: dict[str, Any]) -> None:
        tokens = [ord(c) for c in str(body["prompt"])]
        self._send(200, {"tokens": tokens, "count": len(tokens), "max_model_len": 32768})

    def _detokenize(self, body: dict[str, Any]) -> None:
        self._send(200, {"prompt": "".join(map(chr, body["tokens"]))})


class OracleServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, port: int, model: str, verbose: bool = False, *,
                 request_log: Path | None = None, delay: float = 0.0,
                 die_after: int | None = None) -> None:
        super().__init__((host, port), Handler)
        self.model = model
        self.verbose = verbose
        self.key = AnswerKey()
        self.stats = Stats()
        self.request_log = RequestLog(request_log) if request_log is not None else None
        self.delay = delay
        self.die_after = die_after


def write_port_file(path: Path, port: int) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{port}\n", encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Run by hpceval's `command` deployment ($PORT set), the job reaches the server at its node's
    # name, which on a site (and the dev cluster's site in a box) is the node's own network
    # address, not loopback: listen on every address there, as a real server is told to.
    parser.add_argument("--host", default="0.0.0.0" if os.environ.get("PORT") else "127.0.0.1",
                        help="default: 0.0.0.0 when $PORT is set, else 127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT") or 0),
                        help="0: an ephemeral port (default: $PORT, which hpceval's `command` "
                             "deployment sets, else 0)")
    parser.add_argument("--port-file", type=Path, help="write the bound port here")
    parser.add_argument("--model", default="oracle", help="served model name")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    parser.add_argument("--request-log", type=Path, metavar="FILE",
                        help="append one JSON line per answered generation request (shareable "
                             "by several server processes)")
    parser.add_argument("--delay", type=float, default=0.0, metavar="SECONDS",
                        help="sleep this long before answering each generation request")
    parser.add_argument("--die-after", type=int, metavar="N",
                        help=f"exit with status {DIE_STATUS} right after the N-th answered "
                             "generation request (a crashed instance)")
    args = parser.parse_args(argv)
    if args.delay < 0:
        parser.error("--delay must be >= 0")
    if args.die_after is not None and args.die_after < 1:
        parser.error("--die-after must be >= 1")
    server = OracleServer(args.host, args.port, args.model, args.verbose,
                          request_log=args.request_log, delay=args.delay,
                          die_after=args.die_after)
    port = server.server_address[1]
    # serve_forever runs in this thread; SIGTERM (scancel, test teardown) stops it from another.
    signal.signal(signal.SIGTERM,
                  lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    if args.port_file:
        write_port_file(args.port_file, port)
    print(f"oracle server on http://{args.host}:{port} ({len(server.key.items)} items)",
          flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
