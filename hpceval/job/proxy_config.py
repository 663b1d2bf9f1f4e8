"""Settings of the in-job endpoint proxy: one immutable object, from proxy_cli or the runtime."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ProxyConfig:
    """Everything `run_proxy` needs. Paths live on shared storage; the port is on the first node."""

    upstreams: tuple[str, ...]
    port: int = 0  # 0 = an ephemeral port (tests); the job script passes a fixed one
    host: str = "127.0.0.1"
    cache_dir: Path | None = None  # None = no response cache
    progress_file: Path | None = None
    expected_requests: int | None = None
    # Per attempt. Generations of long reasoning traces take minutes, so the default is generous;
    # a dead node is still found fast through connect_timeout.
    request_timeout: float = 1800.0
    connect_timeout: float = 10.0
    max_retries: int = 3
    retry_backoff: float = 1.0  # first backoff in seconds; doubles per retry, with full jitter
    retry_backoff_max: float = 30.0
    system_prompt: str | None = None
    strip_reasoning: bool = False
    reasoning_start: str = "<think>"
    reasoning_end: str = "</think>"
    add_params: tuple[tuple[str, Any], ...] = ()
    remove_params: tuple[str, ...] = ()
    rename_params: tuple[tuple[str, str], ...] = ()
    log_requests: int = 0  # log the first N request/response pairs
    log_file: Path | None = None  # default: proxy-requests.jsonl beside the progress file
    # The upstream is an API outside the job (deployment.type none): it has no /health, so a
    # down-marked one is re-probed with GET /v1/models, and any answer below 500 means it is up.
    external_upstream: bool = False
    progress_interval: float = 2.0
    probe_interval: float = 2.0  # how often instances marked down are re-probed via /health
    cache_fsync_every: int = 256  # fsync the shard after this many new entries ...
    cache_fsync_interval: float = 5.0  # ... or this many seconds, whichever comes first
    shutdown_grace: float = 10.0  # seconds in-flight requests get to finish on SIGTERM

    def __post_init__(self) -> None:
        if not self.upstreams:
            raise ValueError("the proxy needs at least one upstream URL")
        for url in self.upstreams:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"upstream {url!r} is not an http(s) URL")
        if self.max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if self.request_timeout <= 0 or self.connect_timeout <= 0:
            raise ValueError("timeouts must be positive")
        if self.strip_reasoning and not self.reasoning_end:
            raise ValueError("--strip-reasoning needs a non-empty end marker")

    @property
    def request_log_path(self) -> Path | None:
        if self.log_requests <= 0:
            return None
        if self.log_file is not None:
            return self.log_file
        base = self.progress_file.parent if self.progress_file else (self.cache_dir or Path("."))
        return base / "proxy-requests.jsonl"


def parse_param_value(text: str) -> Any:
    """`--add-param k=v` values: JSON when they parse (numbers, booleans, lists), else a string.

    So `max_tokens=512` sends an integer and `stop=["\\n"]` a list, while `model=foo` stays "foo".
    """
    try:
        return json.loads(text)
    except ValueError:
        return text


def split_pair(text: str, flag: str) -> tuple[str, str]:
    """Split `a=b`; a missing `=` or an empty key is a usage error, not a silent no-op."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"{flag} expects KEY=VALUE, got {text!r}")
    return key, value
