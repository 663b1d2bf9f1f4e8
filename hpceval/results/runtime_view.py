"""A task's runtime.json as every view shows it (status, info, results --json, the report):
its facts, checked, or unknown with the reason.

The file is written by the in-job proxy (``results.runtime``), but it lies in a run directory
that others may read and, on a shared cluster, one whose files a run of someone else's or a
hand edit may have put there. So a view reads it once, on one descriptor: not a link (it is
written by ``os.replace``, never as one), a plain file (a FIFO would block, /dev/zero would
never end), owned by you and not writable by others (``trust.stat_problem`` on ``os.fstat``
of that descriptor, never the path twice), at most READ_LIMIT bytes, valid JSON of schema 1,
every field the views know of the right kind. Anything else is ``Runtime.problem``: shown as
unknown with that reason, and nothing of the file is used. ``read_json_once`` is that read, and
``checked_number`` that check of a number, for the proxy's other file too (server-load.json:
results.server_load).

Fields the proxy adds later (another column) need no change here to be shown: an unknown
field holding a number or a {name: number} map is kept under its own name (``extra_fields``)
and shown after the known ones; other unknown fields are left out. To give one a place and
a check of its own, add it to FIELDS (and a column in ``results.runtime_text``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from hpceval.contract import RUNTIME_FILE
from hpceval.results.columns import with_column
from hpceval.results.runtime import SCHEMA
from hpceval.trust import Unread, read_own_file

READ_LIMIT = 1 << 20  # the proxy's file is about 1 KiB; one this large is not its file
EXTRA_LIMIT = 16  # unknown fields kept at most (a table gets one column each)

COUNT, NUMBER, PERCENTILES, COUNTS_BY, TEXT = "count", "number", "percentiles", "counts", "text"
# What each field of schema 1 must hold. Absent or null is unknown ("scored" came after the
# first files of schema 1), never an error; the wrong kind of value is.
FIELDS: dict[str, str] = {
    "updated": TEXT, "requests": COUNT, "errors": COUNT, "cached": COUNT,
    "latency_ms": PERCENTILES, "prompt_tokens": COUNT, "completion_tokens": COUNT,
    "tokens_per_s": NUMBER, "choices": COUNT, "scored": COUNT, "finish_reasons": COUNTS_BY,
    "empty_with_reasoning": COUNT, "streamed": COUNT, "infra_errors": COUNT,
    "infra_causes": COUNTS_BY, "client_closed": COUNT, "retries": COUNT,
    "retry_causes": COUNTS_BY}
# The counts a model's total sums (with every extra field that holds a whole number).
TOTALS = ("requests", "errors", "cached", "prompt_tokens", "completion_tokens", "retries",
          "infra_errors")

MISSING = "no runtime.json (not started yet, no in-job proxy, or an older run)"


@dataclass(frozen=True)
class Runtime:
    """One task's runtime.json: its checked facts, or why there are none."""

    facts: dict[str, Any] | None  # schema 1's fields that were there, and the extra ones
    problem: str | None = None  # why unknown (None with facts); MISSING without a file
    mtime: float | None = None  # when the proxy last wrote it (fstat of the read descriptor)

    @property
    def missing(self) -> bool:
        return self.facts is None and self.problem == MISSING

    def to_json(self) -> dict[str, Any] | None:
        """The facts; {"unknown": why} for a file that cannot be shown; None without one."""
        if self.facts is not None:
            return self.facts
        return None if self.missing else {"unknown": self.problem}

    def extra_fields(self) -> list[str]:
        """The fields beyond FIELDS that the file held (numbers or {name: number} maps)."""
        return [k for k in (self.facts or {}) if k != "schema" and k not in FIELDS]


def load_runtime(task_dir: str) -> Runtime:
    """The task's runtime.json, read once through one descriptor (see the module doc)."""
    return load_view(f"{task_dir}/{RUNTIME_FILE}", READ_LIMIT, "the proxy writes about 1 KiB",
                     normalise, Runtime, MISSING)


V = TypeVar("V")


def load_view(path: str, limit: int, typical: str, check: Callable[[Any], dict[str, Any]],
              view: Callable[[dict[str, Any] | None, str | None, float | None], V],
              missing: str) -> V:
    """A file the proxy writes, as ``view(facts, problem, mtime)``: read once through one
    descriptor (read_json_once), checked by ``check`` (a ValueError's text is a phrase after
    the file's name); ``missing`` is the problem when there is no file."""
    name = path.rsplit("/", 1)[-1]
    try:
        doc, mtime = read_json_once(path, limit, typical)
    except Unread as exc:
        return view(None, missing if exc.missing else f"{name} {exc}", None)
    try:
        return view(check(doc), None, mtime)
    except ValueError as exc:
        return view(None, f"{name} {exc}", None)


def read_json_once(path: str, limit: int, typical: str) -> tuple[Any, float]:
    """(the parsed JSON, its mtime) of a file the in-job proxy writes into a run directory,
    read through one descriptor with the checks of the module doc; `typical` says how large
    the writer's file is. Otherwise trust.Unread: a phrase after the file's name, `missing`
    when there is none."""
    try:
        data, st = read_own_file(path, limit)
    except Unread as exc:
        if exc.missing:
            raise Unread("is missing", missing=True) from None
        if exc.too_large:
            raise Unread(f"is larger than {limit >> 10} KiB ({typical}): not read") from None
        raise
    try:
        return json.loads(data), st.st_mtime
    except RecursionError:  # [[[[... nested deeper than the parser goes
        raise Unread("is not valid JSON (nested too deep)") from None
    except ValueError:  # cut short (a killed writer before os.replace was used), not UTF-8
        raise Unread("is not valid JSON (truncated?)") from None


def checked_number(value: Any, where: str, *, whole: bool) -> int | float:
    """`value` if it is a finite number >= 0 (whole: an int); a ValueError says why not."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"has {where} = {shown(value)}, not a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"has {where} = {value}, not a finite number")
    if value < 0:
        raise ValueError(f"has {where} = {value}, below 0")
    if whole and not isinstance(value, int):
        raise ValueError(f"has {where} = {value}, not a whole number")
    return value


def shown(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _map(value: Any, where: str, *, whole: bool) -> dict[str, int | float]:
    if not isinstance(value, dict):
        raise ValueError(f"has {where} = {shown(value)}, not an object of numbers")
    return {str(k): checked_number(v, f"{where}.{k}", whole=whole) for k, v in value.items()}


def _field(key: str, kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == COUNT:
        return checked_number(value, key, whole=True)
    if kind == NUMBER:
        return checked_number(value, key, whole=False)
    if kind == PERCENTILES:
        return _map(value, key, whole=False)
    if kind == COUNTS_BY:
        return _map(value, key, whole=True)
    if not isinstance(value, str) or len(value) > 64:
        raise ValueError(f"has {key} = {shown(value)}, not a short text")
    return value


def _extra(value: Any) -> Any:
    """An unknown field's value when it is one the views can show, else None (left out)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else None
    if isinstance(value, dict) and value and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for v in value.values()):
        return {str(k): v for k, v in value.items()}
    return None


def normalise(doc: Any) -> dict[str, Any]:
    """The checked facts of a parsed runtime.json; a ValueError says what is wrong (a phrase
    after the file's name: "has requests = "12", not a number")."""
    if not isinstance(doc, dict):
        raise ValueError(f"is {type(doc).__name__}, not a JSON object")
    schema = doc.get("schema")
    if isinstance(schema, bool) or schema != SCHEMA:
        raise ValueError(f"has schema {shown(schema)}; this hpceval reads schema {SCHEMA}")
    facts: dict[str, Any] = {"schema": SCHEMA}
    for key, kind in FIELDS.items():
        facts[key] = _field(key, kind, doc.get(key))
    kept = 0
    for key in sorted(k for k in doc if isinstance(k, str) and k not in facts):
        value = _extra(doc[key])
        if value is not None and kept < EXTRA_LIMIT:
            facts[key] = value
            kept += 1
    return facts


def totals(found: Iterable[Runtime]) -> dict[str, Any]:
    """A model's sums over its tasks' runtime.json: TOTALS and every whole-number extra field;
    ``tasks``: files summed, ``unknown``: files that could not be shown."""
    out: dict[str, Any] = {"tasks": 0, "unknown": 0, **dict.fromkeys(TOTALS, 0)}
    for runtime in found:
        if runtime.facts is None:
            out["unknown"] += not runtime.missing
            continue
        out["tasks"] += 1
        for key, value in runtime.facts.items():
            if (key in TOTALS or (key not in FIELDS and key != "schema")) \
                    and isinstance(value, int):
                out[key] = out.get(key, 0) + value
    return out


def live_tokens_per_s(found: Iterable[Runtime], now: float, window_s: float) -> float | None:
    """tokens/s summed over the files written in the last `window_s` (the tasks being served
    now; each file's figure is its task's average so far); None when none was."""
    rates = [r.facts.get("tokens_per_s") for r in found
             if r.facts is not None and r.mtime is not None and now - r.mtime <= window_s]
    known = [v for v in rates if isinstance(v, (int, float))]
    return round(sum(known), 2) if known else None


def with_runtime(frame: Any) -> Any:
    """The results frame plus a ``runtime`` column: on each row its task's runtime.json as
    ``Runtime.to_json`` (the facts; None without a file; {"unknown": why} for one that cannot
    be shown), each file read once."""
    return with_column(frame, "runtime", lambda folder, _run: load_runtime(folder).to_json())
