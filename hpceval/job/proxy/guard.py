"""What the in-job proxy lets in, and how much of it at once.

Every process on the node can reach the proxy's port, another user's included (review F3, F5,
F8), so beyond the per-job secret (`ProxyConfig.api_key`, checked in proxy.server) the proxy:

- forwards only the routes hpceval's harnesses use (`allowed`): the OpenAI-style generation
  and model-list endpoints, and vLLM's tokenizer routes (lm-eval's remote tokenizer); `/metrics`,
  `/load`, `/version`, admin and any other route of the server are refused with 404;
- bounds the total, not only each request: the body bytes held by all requests together
  (`body.BodyBudget`, 503 beyond) and the open connections, in all and per peer (`CappedServer`,
  503 and closed beyond);
- logs refused requests and client protocol errors as one line each, at most `burst` lines per
  `window` seconds (`RateLimitedLines`): a flood of bad requests cannot fill the run directory;
- forwards only header values that are plain printable ASCII (`clean_headers`): anything else
  is dropped instead of failing the request with a 500.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections import Counter
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from hpceval.job.cache import CACHED_PATHS
from hpceval.job.proxy import peers

READ = frozenset({"GET", "HEAD"})
WRITE = frozenset({"POST"})
# The job's own servers (vLLM, SGLang, a command server): exact routes and their methods.
ROUTES: dict[str, frozenset[str]] = {
    **{path: WRITE for path in CACHED_PATHS},
    "/v1/models": READ,
    "/tokenize": WRITE, "/detokenize": WRITE, "/tokenizer_info": READ,
}
# Served without the key: lm-eval's remote tokenizer asks /tokenizer_info (then /tokenize) with
# a token of its own (`auth_token` in --model_args, on the command line) or none; refused, it
# falls back to downloading the model's Hugging Face tokenizer. Another uid learns the chat
# template and special tokens from them, nothing of the job's prompts or answers.
KEYLESS = frozenset({"/tokenizer_info", "/tokenize", "/detokenize"})
# An API outside the job may sit under any base path (https://host/openai/v1/...): the same
# OpenAI routes, by their last segments.
EXTERNAL_SUFFIXES: dict[str, frozenset[str]] = {
    "/chat/completions": WRITE, "/completions": WRITE, "/embeddings": WRITE, "/models": READ,
}


def allowed(method: str, path: str, external: bool) -> bool:
    """Whether the proxy forwards `method path` (the health route is the proxy's own)."""
    methods = ROUTES.get(path)
    if methods is None and external:
        methods = next((m for suffix, m in EXTERNAL_SUFFIXES.items() if path.endswith(suffix)),
                       None)
    return methods is not None and method in methods


def _printable(value: str) -> bool:
    return value.isascii() and value.isprintable()


def clean_headers(headers: dict[str, str]) -> dict[str, str]:
    """The forwarded headers whose values go on the wire as they are; a value with other
    characters (aiohttp hands undecodable bytes over as surrogates) is dropped, not a 500."""
    return {name: value for name, value in headers.items() if _printable(value)}


def shown(text: str, limit: int = 120) -> str:
    """A client-chosen string as it goes into a log line: one line, bounded."""
    text = text if len(text) <= limit else text[:limit] + "..."
    return ascii(text)


class RateLimitedLines(logging.Filter):
    """One line per record (a traceback becomes `Type: message`), and at most `burst` lines
    per `window` seconds; the first line after a quiet spell says how many were left out."""

    def __init__(self, burst: int = 20, window: float = 60.0) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self.reset()

    def reset(self) -> None:
        """A fresh window (a new proxy in the same process, tests)."""
        self._start = time.monotonic()
        self._count = 0
        self.dropped = 0  # since the last line that was let through

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if now - self._start >= self.window:
            self._start, self._count = now, 0
        self._count += 1
        if self._count > self.burst:
            self.dropped += 1
            return False
        message = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            message = f"{message}: {type(exc).__name__}: {shown(str(exc))}"
        if self.dropped:
            message += f" ({self.dropped} similar line(s) left out before this one)"
            self.dropped = 0
        record.msg, record.args = message.replace("\n", " "), ()
        record.exc_info = record.exc_text = record.stack_info = None
        return True


def refusal_logger(name: str = "hpceval.job.proxy.refused") -> logging.Logger:
    """The logger for refused requests and protocol errors (aiohttp's "Error handling request"
    included), rate-limited; one filter however often it is asked for."""
    logger = logging.getLogger(name)
    for f in logger.filters:
        if isinstance(f, RateLimitedLines):
            f.reset()
            return logger
    logger.addFilter(RateLimitedLines())
    return logger


_BUSY_BODY = b'{"error": {"message": "too many open connections", "type": "server_busy"}}\n'
BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY))


class CappedServer(web.Server):
    """aiohttp's low-level server with caps on open connections: one beyond `max_connections`,
    or beyond `max_per_peer` from one peer (proxy.peers: a uid on loopback, else an address),
    is answered 503 and closed at once (review F5: ~15,000 trickling connections were held; a
    per-peer share keeps one local user from taking every slot the harness needs). Peers are
    looked up only while the connections outnumber one peer's share: below that, none can be
    over it, and a connection costs no read of /proc/net/tcp."""

    def __init__(self, handler: Any, *, max_connections: int, refused: logging.Logger,
                 max_per_peer: int | None = None, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self.max_connections = max_connections
        self.max_per_peer = max_per_peer
        self._refused = refused
        self._peer_of: dict[RequestHandler, str] = {}
        self._per_peer: Counter[str] = Counter()

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        open_now = len(self._connections)
        if open_now > self.max_connections:
            self._turn_away(transport, f"{open_now - 1} open, the limit is "
                                       f"{self.max_connections}")
        elif self.max_per_peer is not None and open_now > self.max_per_peer:
            peer = self._count_peers(handler)
            if self._per_peer[peer] > self.max_per_peer:
                self._turn_away(transport, f"{peer} has {self._per_peer[peer] - 1} open, its "
                                           f"share is {self.max_per_peer}")

    def connection_lost(self, handler: RequestHandler,
                        exc: BaseException | None = None) -> None:
        peer = self._peer_of.pop(handler, None)
        if peer is not None:
            self._per_peer[peer] -= 1
            if self._per_peer[peer] <= 0:
                del self._per_peer[peer]
        super().connection_lost(handler, exc)

    def _count_peers(self, handler: RequestHandler) -> str:
        """The peer of `handler`; every open connection not yet attributed is attributed now,
        from one read of the socket table."""
        table = peers.socket_uids()
        for h, transport in self._connections.items():
            if h not in self._peer_of:
                key = peers.peer_key(*peers.endpoints(transport), uids=table)
                self._peer_of[h] = key
                self._per_peer[key] += 1
        return self._peer_of[handler]

    def _turn_away(self, transport: asyncio.Transport, why: str) -> None:
        self._refused.warning("refused a connection: %s", why)
        transport.write(BUSY)
        transport.close()


def raise_open_file_limit() -> None:
    """Each proxied request holds two sockets; a harness at parallelism 1024 would hit the usual
    soft limit of 1024 descriptors and see refused connections. Raise it to the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            logging.getLogger(__name__).warning("could not raise the open file limit from %d: %s",
                                                soft, exc)
