"""runtime.json's facts as words and table cells, the same in `info`, `status` and the report;
and server-load.json's (results.server_load): the servers' latest sample and their peaks and
means; `status`'s live line also leads with the job's phase (results.ledger_view).

COLUMNS is the one list of what a task's row shows, in order; a field the proxy adds later
appears after them by its own name (``Runtime.extra_fields``) until it is given a column here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hpceval.results.ledger_view import now_text
from hpceval.results.runtime_view import TOTALS, Runtime
from hpceval.results.server_load import ServerLoad

MAP_SHOWN = 5  # a {name: count} map shows its largest entries, then "and N more"


def number(value: Any) -> str:
    """1,234 for counts, 85.2 for rates, "?" for unknown."""
    if value is None:
        return "?"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.1f}" if value >= 10 else f"{value:.3g}"


def counts(value: Mapping[str, Any] | None, *, sep: str = " ") -> str:
    """'stop 100, length 20': the largest MAP_SHOWN entries of a {name: count} map."""
    if not value:
        return "?" if value is None else "none"
    ordered = sorted(value.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{k}{sep}{number(v)}" for k, v in ordered[:MAP_SHOWN])
    return text + (f", and {len(ordered) - MAP_SHOWN} more" if len(ordered) > MAP_SHOWN else "")


def infra_errors(stats: Mapping[str, Any] | None) -> tuple[int, str]:
    """(how many of the task's requests failed for good on the infrastructure, their causes
    as text: 'http 500: 3, reset: 1') from a checked runtime.json document; (0, "") without."""
    if not stats:
        return 0, ""
    count = stats.get("infra_errors")
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        return 0, ""
    causes = stats.get("infra_causes")
    return count, counts(causes, sep=": ") if isinstance(causes, dict) and causes else ""


def latency(value: Mapping[str, Any] | None) -> str:
    """'210/900/1500' (p50/p90/p99 in ms); '?' unknown, '-' none (every answer was cached)."""
    if value is None:
        return "-"
    shown = [value.get(p) for p in ("p50", "p90", "p99")]
    # whole milliseconds: a tenth of one says nothing next to a network round trip
    return "/".join("?" if v is None else f"{v:,.0f}" if v >= 10 else f"{v:.3g}" for v in shown)


def extra(value: Any) -> str:
    return counts(value) if isinstance(value, Mapping) else number(value)


@dataclass(frozen=True)
class Column:
    header: str
    cell: Callable[[dict[str, Any]], str]  # from a Runtime's facts


COLUMNS: tuple[Column, ...] = (
    Column("requests", lambda f: number(f.get("requests"))),
    Column("cached", lambda f: number(f.get("cached"))),
    Column("errors", lambda f: number(f.get("errors"))),
    Column("latency p50/p90/p99 ms", lambda f: latency(f.get("latency_ms"))),
    Column("tokens/s", lambda f: number(f.get("tokens_per_s"))),
    Column("prompt tokens", lambda f: number(f.get("prompt_tokens"))),
    Column("completion tokens", lambda f: number(f.get("completion_tokens"))),
    Column("finish reasons", lambda f: counts(f.get("finish_reasons"))),
    Column("retries", lambda f: number(f.get("retries"))),
    Column("infra errors", lambda f: number(f.get("infra_errors"))),
)


def extra_headers(found: list[Runtime]) -> list[str]:
    """The extra fields of any of these files, for a table's extra columns."""
    return sorted({k for r in found for k in r.extra_fields()})


def cells(runtime: Runtime, extras: list[str]) -> list[str]:
    """A table row: COLUMNS, then each extra field ('' where this file lacks it)."""
    facts = runtime.facts or {}
    return [c.cell(facts) for c in COLUMNS] + [
        extra(facts[k]) if k in facts else "" for k in extras]


def task_line(runtime: Runtime) -> str:
    """One task in one line (`hpceval info`): requests (cached), latency, tokens/s, tokens,
    finish reasons, and any extra field by its name."""
    f = runtime.facts
    if f is None:
        return f"unknown: {runtime.problem}"
    parts = [f"{number(f['requests'])} requests ({number(f['cached'])} cached"
             + (f", {number(f['errors'])} errors" if f["errors"] != 0 else "") + ")",
             f"latency p50/p90/p99 {latency(f['latency_ms'])} ms",
             f"{number(f['tokens_per_s'])} tokens/s",
             f"{number(f['prompt_tokens'])} prompt / {number(f['completion_tokens'])} "
             "completion tokens",
             f"finish {counts(f['finish_reasons'])}"]
    if f.get("retries"):
        parts.append(f"{number(f['retries'])} retries ({counts(f.get('retry_causes'))})")
    if f.get("infra_errors"):
        parts.append(f"{number(f['infra_errors'])} failed on the infrastructure "
                     f"({counts(f.get('infra_causes'))})")
    parts += [f"{k} {extra(f[k])}" for k in runtime.extra_fields()]
    return ", ".join(parts)


def total_line(total: Mapping[str, Any]) -> str:
    """A model's sums (runtime_view.totals): requests, tokens, errors, extra whole numbers."""
    if not total["tasks"]:
        return "no runtime.json to sum" + (f" ({total['unknown']} unknown)"
                                           if total["unknown"] else "")
    text = (f"{number(total['requests'])} requests, {number(total['prompt_tokens'])} prompt / "
            f"{number(total['completion_tokens'])} completion tokens, "
            f"{number(total['errors'])} errors")
    text += "".join(f", {number(total[k])} {k.replace('_', ' ')}" for k in
                    ("retries", "infra_errors") if total.get(k))
    text += "".join(f", {k} {number(v)}" for k, v in total.items()
                    if k not in TOTALS and k not in ("tasks", "unknown", "cached"))
    text += f" over {total['tasks']} task(s)"
    return text + (f"; {total['unknown']} runtime.json unknown" if total["unknown"] else "")


def live_text(served: Mapping[str, Any]) -> str:
    """A running model's live figures for `status` (api._track.served's dict): its job's
    phase (its ledger), what its tasks were served, then what its servers are doing now."""
    parts = [now_text(served["ledger"])] if served.get("ledger") else []
    unknown = served.get("unknown") or {}
    if served.get("tasks") or served.get("unread") or unknown:
        rate = served.get("tokens_per_s")
        text = f"served {number(served['requests'])} requests"
        text += f", {number(rate)} tokens/s" if rate is not None else ""
        if served.get("unread"):
            text += f" ({served['unread']} task(s) not read this refresh)"
        parts.append(text)
    if unknown:
        task, why = next(iter(unknown.items()))
        parts.append(f"{task}: {why}" + (f" (and {len(unknown) - 1} more unknown)"
                                        if len(unknown) > 1 else ""))
    server = served.get("server")
    if server:
        parts.append(server_now(server))
    for name, sample in (served.get("judges") or {}).items():  # judges served in its job
        parts.append(f"judge {name}'s {server_now(sample)}")
    return "; ".join(parts)


def _queue(value: Any) -> str:
    """A request count: whole where it is one (a sum of gauges), else one decimal (a mean)."""
    if isinstance(value, (int, float)) and float(value).is_integer():
        return f"{int(value):,}"
    return number(value)


def _rate(value: Any) -> str:
    """Tokens/s, always with its decimal (a JSON round trip makes 5000.0 a 5000)."""
    return number(float(value)) if isinstance(value, (int, float)) else number(value)


def _share(value: Any) -> str:
    return "?" if value is None else f"{value * 100:.0f}%"


def server_now(sample: Mapping[str, Any]) -> str:
    """'server: 3 waiting, 8 running, KV cache 42%, 120.5 tokens/s out, 900.0 in': a load
    sample (server-load.json's "last", with `age_s`), or why it is unknown."""
    if "unknown" in sample:
        return f"server: unknown ({sample['unknown']})"
    text = f"server: {_queue(sample.get('waiting'))} waiting, " \
           f"{_queue(sample.get('running'))} running"
    if sample.get("kv") is not None:
        text += f", KV cache {_share(sample['kv'])}"
    if sample.get("gen_tps") is not None:
        text += f", {_rate(sample['gen_tps'])} tokens/s out"
        if sample.get("prompt_tps") is not None:
            text += f", {_rate(sample['prompt_tps'])} in"
    age = sample.get("age_s")
    if isinstance(age, (int, float)) and age > 60:  # the proxy stopped sampling (or writing)
        text += f" (as of {int(age) // 60} min ago)"
    return text


def load_line(load: ServerLoad) -> str:
    """A model's server-load.json in one line (`hpceval info`): each figure's peak and mean
    over the samples, or why it is unknown."""
    f = load.facts
    if f is None:
        return f"unknown: {load.problem}" if not load.missing else str(load.problem)
    s = f["summary"]

    def pair(key: str, shown: Callable[[Any], str]) -> str:
        peak, mean = s[key]["peak"], s[key]["mean"]
        return "?" if peak is None else f"peak {shown(peak)} (mean {shown(mean)})"

    return (f"waiting {pair('waiting', _queue)}, running {pair('running', _queue)}, "
            f"KV cache {pair('kv', _share)}, tokens/s out {pair('gen_tps', _rate)}, "
            f"in {pair('prompt_tps', _rate)}; {number(f['samples'])} samples every "
            f"{number(f['interval_s'])} s")
