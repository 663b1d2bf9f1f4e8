"""Settings of the in-job endpoint proxy: one immutable object, from proxy.cli or the runtime."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from hpceval.contract import SERVER_LOAD_FILE, UNIX_URL, is_proxy_budget, unix_socket
from hpceval.interceptors import Interceptor
from hpceval.interceptors.log_requests import LogRequests

# The variable a job script puts its per-job client key in (a random value made in the job,
# never written to a file): the proxy's `--api-key-env`; the harnesses get it as their API key.
CLIENT_KEY_ENV = "HPCEVAL_CLIENT_TOKEN"


@dataclass(frozen=True)
class ProxyConfig:
    """Everything `run_proxy` needs. Paths live on shared storage; the port is on the first node."""

    upstreams: tuple[str, ...]
    port: int = 0  # 0 = an ephemeral port (tests); the job script passes a fixed one
    host: str = "127.0.0.1"
    cache_dir: Path | None = None  # None = no response cache
    progress_file: Path | None = None
    tasks_dir: Path | None = None  # models/<key>/tasks: runtime.json per task (proxy.stats)
    expected_requests: int | None = None
    # Per attempt. Generations of long reasoning traces take minutes, so the default is generous;
    # a dead node is still found fast through connect_timeout.
    request_timeout: float = 1800.0
    connect_timeout: float = 10.0
    max_retries: int = 3
    retry_backoff: float = 1.0  # first backoff in seconds; doubles per retry, with full jitter
    retry_backoff_max: float = 30.0
    # evaluation.interceptors, the active ones in chain order (hpceval.interceptors): what the
    # proxy changes in requests and answers, and log_requests (the first N pairs logged)
    interceptors: tuple[Interceptor, ...] = ()
    # Tasks with a chain of their own (evaluation.tasks[].interceptors): (task key, chain), the
    # task's requests under /task/<task key>/ (job.interceptors.Routes)
    task_interceptors: tuple[tuple[str, tuple[Interceptor, ...]], ...] = ()
    log_file: Path | None = None  # default: proxy-requests.jsonl beside the progress file
    # The upstream is an API outside the job (deployment.type none): it has no /health, so a
    # down-marked one is re-probed with GET /v1/models, and any answer below 500 means it is up.
    external_upstream: bool = False
    # Per upstream (same order): the pids of the processes the job started for it. An instance
    # whose process exited is down for good (proxy.liveness); () = not given (external, tests).
    upstream_pids: tuple[tuple[int, ...], ...] = ()
    progress_interval: float = 2.0
    # Seconds between polls of the job's own servers' /metrics for the load series
    # (server_load_path); every second instead while the adaptive budget needs them.
    metrics_interval: float = 5.0
    probe_interval: float = 2.0  # how often instances marked down are re-probed via /health
    cache_fsync_every: int = 256  # fsync the shard after this many new entries ...
    cache_fsync_interval: float = 5.0  # ... or this many seconds, whichever comes first
    shutdown_grace: float = 10.0  # seconds in-flight requests get to finish on SIGTERM
    # Hostile or broken clients stay bounded (another uid on the node can reach 127.0.0.1).
    # 64 MiB holds a million-token prompt or dozens of base64 images; a gzip body is capped both
    # as sent and as inflated, so 100 KB of gzip cannot become 100 MB in memory.
    max_body_bytes: int = 64 << 20  # request body as sent (Content-Encoding applied)
    max_inflated_bytes: int = 64 << 20  # request body after decompression
    header_timeout: float = 60.0  # a connection idle or without a complete request head is closed
    body_timeout: float = 60.0  # seconds without progress while reading a request body: 408
    body_deadline: float = 120.0  # seconds for a whole request body, however it trickles: 408
    # Totals, not per request (review F5): body bytes held by all requests at once (503
    # beyond) and open connections (503 and closed beyond). A harness's requests are a few KB;
    # each proxied request holds two descriptors, so the cap stays well below the fd limit.
    max_total_body_bytes: int = 512 << 20
    max_connections: int = 4096
    # Open connections from one peer (a uid on loopback, else an address: proxy.peers), so one
    # local user cannot take every slot; half the total leaves the harness at least as many.
    # None: no per-peer cap.
    max_connections_per_peer: int | None = 2048
    # Per-job secret the harnesses send as `Authorization: Bearer ...`; None = no authentication.
    # Never printed: repr=False keeps it out of logs and tracebacks.
    api_key: str | None = field(default=None, repr=False)
    # The job's model servers require this token (vLLM's VLLM_API_KEY): the proxy sends it
    # upstream in place of whatever the client sent, so harnesses need no key of their own and
    # nobody else on the node can use the job's servers. None: none is sent (the client's header
    # is forwarded only by a proxy that asks for no key of its own: api_key None).
    upstream_api_key: str | None = field(default=None, repr=False)
    # Written with the proxy's pid once its port is bound: the job script trusts the port only
    # then, never because *something* answers there (another user could be listening).
    ready_file: Path | None = None
    # In-flight requests per upstream instance (hpceval.job.proxy.budget): "off" (harness
    # parallelism alone), "adaptive" (AIMD from 8) or a fixed number.
    budget: str = "off"
    # A sweep's judge job (scope: sweep) that may be followed by a successor job: its folder
    # (auxiliary/<name>/). When the judge fails the proxy, it re-reads the record there and
    # follows it, waiting up to judge_wait seconds for one (hpceval.job.proxy.judge_successor).
    judge_dir: Path | None = None
    judge_wait: float = 600.0
    # (certificate, key): serve https (a sweep judge's front; its clients pin the certificate)
    tls: tuple[Path, Path] | None = None
    # Requests wait, unforwarded, until SIGUSR2 (the job saw every instance serve), at most this
    # many seconds after the start (hpceval.job.proxy.hold); None: nothing is held.
    hold: float | None = None

    def __post_init__(self) -> None:
        if not self.upstreams:
            raise ValueError("the proxy needs at least one upstream URL")
        for url in self.upstreams:
            socket = unix_socket(url)
            if socket is not None and not os.path.isabs(socket):
                raise ValueError(f"upstream {url!r}: a Unix socket's path must be absolute")
            if socket is None and not url.startswith(("http://", "https://")):
                raise ValueError(f"upstream {url!r} is not an http(s) URL nor "
                                 f"{UNIX_URL}<socket path>")
        if self.upstream_pids and len(self.upstream_pids) != len(self.upstreams):
            raise ValueError(f"{len(self.upstream_pids)} --upstream-pids for "
                             f"{len(self.upstreams)} --upstream: give one per upstream")
        if self.max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if self.request_timeout <= 0 or self.connect_timeout <= 0:
            raise ValueError("timeouts must be positive")
        if min(self.max_body_bytes, self.max_inflated_bytes) <= 0:
            raise ValueError("body size limits must be positive")
        if min(self.header_timeout, self.body_timeout, self.body_deadline) <= 0:
            raise ValueError("client timeouts must be positive")
        if self.max_total_body_bytes < self.max_body_bytes:
            raise ValueError("the total body budget must hold at least one largest body")
        if self.hold is not None and self.hold <= 0:
            raise ValueError("hold must be positive")
        if self.metrics_interval <= 0:
            raise ValueError("metrics_interval must be positive")
        if self.judge_wait <= 0:
            raise ValueError("judge_wait must be positive")
        if self.max_connections <= 0:
            raise ValueError("max_connections must be positive")
        if self.max_connections_per_peer is not None and self.max_connections_per_peer <= 0:
            raise ValueError("max_connections_per_peer must be positive")
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("the proxy's API key is empty")
        if self.upstream_api_key is not None and not self.upstream_api_key.strip():
            raise ValueError("the upstream API key is empty")
        if not is_proxy_budget(self.budget):
            raise ValueError(f"budget {self.budget!r}: use off, adaptive or a number above 0")
        chains = [("interceptors", self.interceptors)] + [
            (f"task_interceptors.{key}", chain) for key, chain in self.task_interceptors]
        problems = [str(issue) for where, chain in chains for i in chain
                    for issue in i.issues(where)]
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def log_limits(self) -> dict[str, int]:
        """Request/response pairs to log per route ("" the job's chain, else a task key): the
        log_requests interceptor's of each chain, if in it."""
        chains = [("", self.interceptors), *self.task_interceptors]
        return {key: max((i.log_requests for i in chain if isinstance(i, LogRequests)),
                         default=0) for key, chain in chains}

    @property
    def log_requests(self) -> int:
        """Whether any route logs pairs (the most any one logs)."""
        return max(self.log_limits.values())

    @property
    def server_load_path(self) -> Path | None:
        """Where the load series sampled from the servers' /metrics goes (results.server_load):
        beside the progress file; None without one, or for an API outside the job."""
        if self.external_upstream or self.progress_file is None:
            return None
        return self.progress_file.with_name(SERVER_LOAD_FILE)

    @property
    def request_log_path(self) -> Path | None:
        if self.log_requests <= 0:
            return None
        if self.log_file is not None:
            return self.log_file
        base = self.progress_file.parent if self.progress_file else (self.cache_dir or Path("."))
        return base / "proxy-requests.jsonl"
