"""What the servers were doing while the job ran: the load series sampled from their /metrics,
defined once (the proxy's writer and every view's reader).

While a job's own servers run, the in-job proxy polls each up instance's ``/metrics`` every few
seconds (``job.proxy.server_metrics``: every second while the adaptive budget needs it, else
``--metrics-interval``, default 5 s) and keeps one sample per poll: requests waiting and
running (summed over the instances), KV-cache use (the highest) and the output (generation)
and prompt tokens/s (from vLLM's counters; a restarted server adds no rate for that step). It
writes them to ``models/<key>/server-load.json`` (``contract.SERVER_LOAD_FILE``, beside
progress.json) every progress interval when they changed and at exit, atomically. A server
without /metrics (not vLLM) or an external API gives no file. Schema 1::

    {"schema": 1, "updated": "2026-01-01T12:05:00Z",
     "interval_s": 5.0,            seconds between polls
     "samples": 1234,              polls recorded in all (each one sample)
     "stride": 4,                  samples per point (1, then doubling: see below)
     "last": {"t": 1767268800.0, "waiting": 3, "running": 8, "kv": 0.42,
              "gen_tps": 120.5, "prompt_tps": 900.0} | null,     the newest sample
     "summary": {"waiting": {"peak": 12, "mean": 3.1}, "running": {...}, "kv": {...},
                 "gen_tps": {...}, "prompt_tps": {...}},   over every sample that had the
                                   figure; {"peak": null, "mean": null} where none had
     "columns": ["t", "waiting", "running", "kv", "gen_tps", "prompt_tps"],
     "points": [[1767268800.0, 3, 8, 0.42, 120.5, 900.0], ...]}   oldest first

``t`` is Unix time (a point's: its first sample's); ``kv`` is 0..1; ``gen_tps`` and
``prompt_tps`` are tokens per second; ``kv`` and the rates are null where unknown (no such
metric, the first sample, a restart). Bounded for any job length: at most POINT_LIMIT points.
When they are full, neighbouring pairs are merged (the resolution halves and ``stride``
doubles), and each new point gathers ``stride`` samples: a merged point keeps the highest
waiting, running and KV use of its samples (a short queue spike must stay visible) and the mean
of their rates (tokens/s over the span; a peak of one step is noise). The last point may hold
fewer samples. ``load_server_load`` reads it the way ``runtime_view.load_runtime`` reads
runtime.json: one descriptor, yours, a plain file, at most 1 MiB, every number checked;
anything else is unknown with the reason.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpceval.contract import AUX_DIR, SERVER_LOAD_FILE, aux_dir
from hpceval.results.columns import model_folder, with_column
from hpceval.results.runtime_view import checked_number, load_view, shown

SCHEMA = 1
POINT_LIMIT = 600  # even: a full series merges into exact pairs
COLUMNS = ("t", "waiting", "running", "kv", "gen_tps", "prompt_tps")
FIGURES = COLUMNS[1:]
PEAKED = ("waiting", "running", "kv")  # a merged point keeps their highest; the rates: mean
READ_LIMIT = 1 << 20  # the proxy's file is under 64 KiB
MISSING = (f"no {SERVER_LOAD_FILE} (not started yet, a server without /metrics, an external "
           "endpoint, or an older run)")


class _Point:
    """Samples merged into one point: the peaks of PEAKED, the sums and counts of the rates."""

    __slots__ = ("counts", "n", "peak", "sums", "t")

    def __init__(self, t: float) -> None:
        self.t, self.n = t, 0
        self.peak: dict[str, float] = {}
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, values: dict[str, float | None]) -> None:
        self.n += 1
        for key, value in values.items():
            if value is not None:
                self._take(key, value, 1)

    def merge(self, other: _Point) -> None:
        self.n += other.n
        for key, value in other.peak.items():
            self._take(key, value, 0)
        for key, value in other.sums.items():
            self.sums[key] = self.sums.get(key, 0.0) + value
            self.counts[key] = self.counts.get(key, 0) + other.counts[key]

    def _take(self, key: str, value: float, n: int) -> None:
        if key in PEAKED:
            self.peak[key] = max(self.peak.get(key, value), value)
        else:
            self.sums[key] = self.sums.get(key, 0.0) + value
            self.counts[key] = self.counts.get(key, 0) + n

    def row(self) -> list[float | None]:
        out: list[float | None] = [round(self.t, 1)]
        for key in FIGURES:
            value = self.peak.get(key) if key in PEAKED else (
                self.sums[key] / self.counts[key] if self.counts.get(key) else None)
            out.append(_rounded(key, value))
        return out


def _rounded(key: str, value: float | None) -> float | None:
    """KV use to 0.01 %, the rest to a tenth (a queue of 3.25 requests says no more)."""
    return None if value is None else round(value, 4 if key == "kv" else 1)


class LoadSeries:
    """The series as the proxy builds it (plain attributes: one event loop adds to it)."""

    def __init__(self, interval_s: float, limit: int = POINT_LIMIT) -> None:
        if limit < 2 or limit % 2:
            raise ValueError("the point limit must be an even number >= 2")
        self.interval_s, self.limit = interval_s, limit
        self.points: list[_Point] = []
        self.pending: _Point | None = None
        self.stride = 1
        self.samples = 0
        self.last: dict[str, float | None] | None = None
        # over every sample, for the summary: each figure's peak, sum and count
        self._peak: dict[str, float] = {}
        self._sum: dict[str, float] = {}
        self._count: dict[str, int] = {}

    def add(self, t: float, waiting: float, running: float, kv: float | None,
            gen_tps: float | None, prompt_tps: float | None) -> None:
        values: dict[str, float | None] = {"waiting": waiting, "running": running, "kv": kv,
                                           "gen_tps": gen_tps, "prompt_tps": prompt_tps}
        self.samples += 1
        self.last = {"t": round(t, 1), **{k: _rounded(k, v) for k, v in values.items()}}
        for key, value in values.items():
            if value is not None:
                self._peak[key] = max(self._peak.get(key, value), value)
                self._sum[key] = self._sum.get(key, 0.0) + value
                self._count[key] = self._count.get(key, 0) + 1
        if self.pending is None:
            self.pending = _Point(t)
        self.pending.add(values)
        if self.pending.n >= self.stride:
            self.points.append(self.pending)
            self.pending = None
            if len(self.points) >= self.limit:
                self._halve()

    def _halve(self) -> None:
        merged = []
        for first, second in zip(self.points[::2], self.points[1::2], strict=True):
            first.merge(second)
            merged.append(first)
        self.points = merged
        self.stride *= 2

    def summary(self) -> dict[str, dict[str, float | None]]:
        return {key: {"peak": _rounded(key, self._peak.get(key)),
                      "mean": _rounded(key, self._sum[key] / self._count[key])
                      if self._count.get(key) else None} for key in FIGURES}

    def to_json(self) -> dict[str, Any]:
        rows = [p.row() for p in self.points] + ([self.pending.row()] if self.pending else [])
        return {"schema": SCHEMA, "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "interval_s": self.interval_s, "samples": self.samples, "stride": self.stride,
                "last": self.last, "summary": self.summary(), "columns": list(COLUMNS),
                "points": rows}


def write_server_load(path: Path, data: dict[str, Any], durable: bool = False) -> None:
    """Replace `path` (temp file beside it, then os.replace), as results.runtime.write_runtime."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(data, handle, separators=(",", ":"))
        handle.write("\n")
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(tmp, path)


# -- the reader ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class ServerLoad:
    """A model's server-load.json: its checked facts, or why there are none."""

    facts: dict[str, Any] | None
    problem: str | None = None  # why unknown (None with facts); MISSING without a file
    mtime: float | None = None

    @property
    def missing(self) -> bool:
        return self.facts is None and self.problem == MISSING

    def to_json(self, points: bool = False) -> dict[str, Any] | None:
        """The facts (without the points unless asked: the summary and the last sample are
        what a table needs); {"unknown": why} for a file that cannot be shown; None without
        one."""
        if self.facts is not None:
            return self.facts if points else {k: v for k, v in self.facts.items()
                                               if k not in ("points", "columns")}
        return None if self.missing else {"unknown": self.problem}


def load_server_load(model_dir: str) -> ServerLoad:
    """A model's server-load.json, read once through one descriptor and checked."""
    return load_view(f"{model_dir}/{SERVER_LOAD_FILE}", READ_LIMIT,
                     "the proxy writes under 64 KiB", normalise, ServerLoad, MISSING)


def judges_served_in(model_folder: str, limit: int) -> list[tuple[str, str]]:
    """(name, folder) of the judges served in a model's job: its auxiliary/<name> folders of
    their own (not links), by name, at most ``limit``; their proxies write server-load.json
    there as the model's does in its folder. Status, info and the report list them so."""
    try:
        with os.scandir(os.path.join(model_folder, AUX_DIR)) as entries:
            names = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
    except OSError:  # no judge in its job
        return []
    return [(name, aux_dir(model_folder, name)) for name in names[:limit]]


def with_server_load(frame: Any) -> Any:
    """The results frame plus a ``server_load`` column: on each row its model's
    server-load.json as ``ServerLoad.to_json`` (the summary and the last sample, no points;
    None without a file; {"unknown": why}), each model's file read once."""
    return with_column(frame, "server_load",
                       lambda folder, _run: load_server_load(folder).to_json(), key=model_folder)


def _figure(value: Any, where: str) -> float | None:
    if value is None:
        return None
    return checked_number(value, where, whole=False)


def _time(value: Any, where: str) -> float:
    number = checked_number(value, where, whole=False)
    if number > 1e11:  # past the year 5000: not a Unix time
        raise ValueError(f"has {where} = {number}, not a Unix time")
    return number


def normalise(doc: Any) -> dict[str, Any]:
    """The checked facts of a parsed server-load.json; a ValueError says what is wrong (a
    phrase after the file's name)."""
    if not isinstance(doc, dict):
        raise ValueError(f"is {type(doc).__name__}, not a JSON object")
    schema = doc.get("schema")
    if isinstance(schema, bool) or schema != SCHEMA:
        raise ValueError(f"has schema {shown(schema)}; this hpceval reads schema {SCHEMA}")
    if doc.get("columns") != list(COLUMNS):
        raise ValueError(f"has columns {shown(doc.get('columns'))}, not {list(COLUMNS)}")
    updated = doc.get("updated")
    if updated is not None and (not isinstance(updated, str) or len(updated) > 64):
        raise ValueError(f"has updated = {shown(updated)}, not a short text")
    interval = checked_number(doc.get("interval_s"), "interval_s", whole=False)
    facts: dict[str, Any] = {
        "schema": SCHEMA, "updated": updated, "interval_s": interval,
        "samples": checked_number(doc.get("samples"), "samples", whole=True),
        "stride": checked_number(doc.get("stride"), "stride", whole=True),
        "last": _last(doc.get("last")), "summary": _summary(doc.get("summary")),
        "columns": list(COLUMNS), "points": _points(doc.get("points"))}
    return facts


def _last(value: Any) -> dict[str, float | None] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"has last = {shown(value)}, not an object")
    return {"t": _time(value.get("t"), "last.t"),
            **{k: _figure(value.get(k), f"last.{k}") for k in FIGURES}}


def _summary(value: Any) -> dict[str, dict[str, float | None]]:
    if not isinstance(value, dict):
        raise ValueError(f"has summary = {shown(value)}, not an object")
    out = {}
    for key in FIGURES:
        entry = value.get(key) or {}
        if not isinstance(entry, dict):
            raise ValueError(f"has summary.{key} = {shown(entry)}, not an object")
        out[key] = {s: _figure(entry.get(s), f"summary.{key}.{s}") for s in ("peak", "mean")}
    return out


def _points(value: Any) -> list[list[float | None]]:
    if not isinstance(value, list):
        raise ValueError(f"has points = {shown(value)}, not a list")
    if len(value) > POINT_LIMIT:
        raise ValueError(f"has {len(value)} points; the proxy keeps at most {POINT_LIMIT}")
    rows: list[list[float | None]] = []
    for i, row in enumerate(value):
        if not isinstance(row, list) or len(row) != len(COLUMNS):
            raise ValueError(f"has points[{i}] = {shown(row)}, not {len(COLUMNS)} numbers")
        t = _time(row[0], f"points[{i}].t")
        if rows and t < float(rows[-1][0] or 0.0):
            raise ValueError(f"has points[{i}] before points[{i - 1}]: not oldest first")
        rows.append([t, *(_figure(v, f"points[{i}].{k}") for k, v in zip(
            FIGURES, row[1:], strict=True))])
    return rows
