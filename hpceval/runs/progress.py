"""Live progress of a model: the in-job proxy's progress.json, read and summarised.

The proxy replaces the file atomically every ~2 s (hpceval.job.progress), so a read sees a
whole document or none. Every job that starts model servers runs the proxy (one instance or
more); a job against an external endpoint (deployment.type none) has none, so no live request
counts, and status says so rather than inventing numbers.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpceval.contract import PROGRESS_FILE

STALE_AFTER_S = 60.0  # no update for this long: the proxy (or the job) stopped writing


@dataclass(frozen=True)
class Progress:
    """One model's live request counts, from its progress.json (`status` and `status --json`)."""

    done: int  # answered (2xx, from an instance or the cache)
    failed: int
    cached: int
    in_flight: int
    expected: int | None  # the requests its tasks will make, when known
    rate_per_s: float
    eta_s: float | None
    state: str  # the proxy's word: running, draining, ...
    updated_age_s: float  # seconds since the proxy last wrote the file
    stale: bool  # no update for STALE_AFTER_S: the proxy (or the job) stopped writing
    upstream_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The `status --json` form (the same keys as the fields)."""
        return dataclasses.asdict(self)


def read_progress(model_dir: Path) -> Progress | None:
    """THE reader of a model's progress.json; None when there is none (or a torn one)."""
    path = model_dir / PROGRESS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        age = max(0.0, time.time() - path.stat().st_mtime)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    requests = data.get("requests") or {}
    try:
        return Progress(
            done=int(requests.get("done") or 0),
            failed=int(requests.get("failed") or 0),
            cached=int(requests.get("cached") or 0),
            in_flight=int(requests.get("in_flight") or 0),
            expected=requests.get("expected"),
            rate_per_s=float(data.get("rate_per_s") or 0.0),
            eta_s=data.get("eta_s"),
            state=data.get("state", "running"),
            updated_age_s=round(age, 1),
            stale=age > STALE_AFTER_S,
            upstream_error=data.get("upstream_error"))
    except (AttributeError, TypeError, ValueError):  # not what the proxy writes: no counts
        return None


def format_progress(p: Progress | None) -> str:
    if p is None:
        return ""
    text = f"{p.done}/{p.expected}" if p.expected else f"{p.done} requests"
    if p.failed:
        text += f" ({p.failed} failed)"
    return f"{text}, {rate_and_warnings(p)}"


def rate_and_warnings(p: Progress) -> str:
    """The request rate, the ETA and what is wrong: everything but the count."""
    text = f"{p.rate_per_s:.1f}/s"
    if p.eta_s is not None:
        text += f", ETA {format_duration(float(p.eta_s))}"
    if p.stale:
        text += f" (no update for {format_duration(p.updated_age_s)})"
    if p.upstream_error:
        text += f"; {p.upstream_error}"
    return text


def format_duration(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"
