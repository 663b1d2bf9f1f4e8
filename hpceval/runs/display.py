"""Run states as JSON-ready dicts, plain text, and rich renderables (for `status --watch`)."""

from __future__ import annotations

import time
from typing import Any

from hpceval.runs.progress import (
    Progress,
    format_duration,
    format_progress,
    rate_and_warnings,
)
from hpceval.runs.state import ModelState, RunState

_STYLE = {"queued": "yellow", "running": "cyan", "resuming": "magenta", "done": "green",
          "failed": "red", "cancelled": "bright_black", "unknown": "white"}


def judge_row(name: str) -> str:
    """The row of a sweep's judge job in the text and rich views, and its key (beside the
    models' keys, which have no space) in their ``served`` lines."""
    return f"judge {name}"


def state_to_dict(state: RunState) -> dict[str, Any]:
    return {
        "invocation_id": state.ref.invocation_id, "run_dir": str(state.ref.run_dir),
        "kind": state.ref.kind, "sweep": state.ref.sweep, "user": state.ref.user,
        "submitted_at": state.ref.submitted_at, "state": state.phase.value,
        "reason": state.reason, "jobs": [e.to_json() for e in state.jobs.chain],
        "models": [model_to_dict(m) for m in state.models],
        "judges": [{"name": j.name, "state": j.phase.value, "reason": j.reason,
                    "job_id": j.job_id} for j in state.judges],
    }


def model_to_dict(m: ModelState) -> dict[str, Any]:
    return {"model": m.key, "index": m.index, "state": m.phase.value, "reason": m.reason,
            "job_id": m.job_id, "attempts": m.attempts,
            "progress": m.progress.as_dict() if m.progress else None,
            "loads": [{"job_id": job, "seconds": s} for job, s in m.loads],
            "tasks": [{"task": t.task, "key": t.key, "state": t.phase.value,
                       "reason": t.reason} for t in m.tasks]}


def _age(ts: float) -> str:
    return format_duration(max(0.0, time.time() - ts)) + " ago" if ts else "?"


def _model_costs(costs: dict[Any, dict[str, Any]] | None, st: RunState
                 ) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any]]]:
    cost = (costs or {}).get(st.ref.run_dir)
    if cost is None or not cost["accounted"]:
        return None, {}
    return cost, {m["model"]: m for m in cost["models"]}


def format_states(states: list[RunState], *, tasks: bool = True,
                  costs: dict[Any, dict[str, Any]] | None = None,
                  flags: dict[tuple[str, str, str], list[str]] | None = None,
                  served: dict[tuple[str, str], str] | None = None) -> str:
    """Plain text; `costs` (run_dir -> hpceval.runs.cost.run_cost) adds GPU-hours; `flags`
    ((run_dir, model key, task key) -> "code: message" texts, from results.flags) marks the
    finished tasks whose scores look wrong; `served` ((run_dir, model key) -> a line, from its
    job's ledger, its tasks' runtime.json and its server-load.json:
    hpceval.results.runtime_text.live_text) follows a running model, and ((run_dir,
    judge_row(name)) -> its servers' load) a running sweep judge job."""
    from hpceval.runs.cost import format_cost

    lines: list[str] = []
    for st in states:
        head = f"{st.ref.invocation_id}  {st.phase.value.upper()}"
        if st.reason:
            head += f"  ({st.reason})"
        lines.append(head)
        lines.append(f"  {st.ref.kind}{' sweep' if st.ref.sweep else ''}, submitted "
                     f"{_age(st.ref.submitted_at)} by {st.ref.user or '?'}: {st.ref.run_dir}")
        cost, by_model = _model_costs(costs, st)
        if cost is not None:
            lines.append(f"  cost: {format_cost(cost)}")
        width = max((len(m.key) for m in st.models), default=5)
        for m in st.models:
            done = sum(t.phase.value == "done" for t in m.tasks)
            detail = format_progress(m.progress) or m.reason
            job = m.job_id or "-"
            if m.attempts > 1:
                job += f" (attempt {m.attempts})"
            spent = (f"  {by_model[m.key]['gpu_hours']:.3g} GPU-h" if m.key in by_model
                     else "")
            if m.loads:  # the newest measured load: a slow one explains a walltime stop
                spent += f"  load {format_duration(m.loads[-1][1])}"
            lines.append(f"  {m.key:<{width}}  {m.phase.value:<9}  {done}/{len(m.tasks)} tasks"
                         f"  job {job}{spent}" + (f"  {detail}" if detail else ""))
            live = (served or {}).get((str(st.ref.run_dir), m.key))
            if live:
                lines.append(f"    {live}")
            if tasks:
                for t in m.tasks:
                    lines.append(f"    {t.task:<40} {t.phase.value:<9} {t.reason}".rstrip())
                    for text in (flags or {}).get((str(st.ref.run_dir), m.key, t.key), []):
                        lines.append(f"      FLAGGED {text}")
            else:
                flagged = sum(bool((flags or {}).get((str(st.ref.run_dir), m.key, t.key)))
                              for t in m.tasks)
                if flagged:
                    lines.append(f"    {flagged} task(s) FLAGGED (hpceval status shows why)")
        for j in st.judges:  # a sweep's judge job (scope: sweep)
            lines.append(f"  {judge_row(j.name)}  {j.phase.value:<9}  job {j.job_id or '-'}"
                         + (f"  {j.reason}" if j.reason else ""))
            live = (served or {}).get((str(st.ref.run_dir), judge_row(j.name)))
            if live:
                lines.append(f"    {live}")
        lines.append("")
    return "\n".join(lines)


def bar(done: int, total: int, *, width: int = 12) -> Any:
    """A progress bar readable without colour: filled and empty cells are different glyphs
    (rich's ProgressBar draws both as the same line, so 0/1 looked like a full bar)."""
    from rich.text import Text

    filled = round(width * done / total) if total > 0 else 0
    filled = min(width, max(0, filled))
    text = Text("█" * filled, style="green")
    text.append("░" * (width - filled), style="bright_black")
    text.append(f" {done}/{total}")
    return text


def _requests(p: Progress | None) -> Any:
    from rich.text import Text

    if p is None:
        return Text("")
    if p.expected:
        return bar(p.done, int(p.expected), width=20)
    return Text(f"{p.done}")


def _detail(m: ModelState) -> str:
    """The request rate, ETA and warnings; the count itself is in the requests column."""
    p = m.progress
    if p is None:
        return m.reason
    text = rate_and_warnings(p)
    return f"{p.failed} failed, {text}" if p.failed else text


def rich_states(states: list[RunState], costs: dict[Any, dict[str, Any]] | None = None,
                served: dict[tuple[str, str], str] | None = None) -> Any:
    """A rich renderable: one table per run, progress bars for tasks and requests; `served`
    (as format_states') adds a column to the runs that have it."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from hpceval.runs.cost import format_cost

    parts: list[Any] = []
    for st in states:
        cost, by_model = _model_costs(costs, st)
        table = Table(title=f"{st.ref.invocation_id}  [{_STYLE[st.phase.value]}]"
                      f"{st.phase.value}[/]  {st.reason}", title_justify="left",
                      caption=f"cost: {format_cost(cost)}" if cost else None,
                      caption_justify="left", expand=False, show_edge=False)
        rows = [m.key for m in st.models] + [judge_row(j.name) for j in st.judges]
        live = {row: text for row in rows
                if (text := (served or {}).get((str(st.ref.run_dir), row)))}
        for name in ("model", "state", "job", "tasks", "requests", "GPU-h", "detail",
                     *(("served",) if live else ())):
            table.add_column(name)
        for m in st.models:
            done = sum(t.phase.value == "done" for t in m.tasks)
            spent = f"{by_model[m.key]['gpu_hours']:.3g}" if m.key in by_model else "-"
            table.add_row(m.key, Text(m.phase.value, style=_STYLE[m.phase.value]),
                          m.job_id or "-", bar(done, len(m.tasks)), _requests(m.progress),
                          spent, _detail(m), *((live.get(m.key, ""),) if live else ()))
        for j in st.judges:
            row = judge_row(j.name)
            table.add_row(row, Text(j.phase.value, style=_STYLE[j.phase.value]),
                          j.job_id or "-", "", "", "", j.reason,
                          *((live.get(row, ""),) if live else ()))
        parts.append(table)
    return Group(*parts)
