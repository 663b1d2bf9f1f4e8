"""Scores against the training step: one hpceval run per checkpoint (``hpceval watch``).

``step_table(points)`` takes (step, run_dir) pairs and gives the long results table of
hpceval.results.table (the same loader, so only tasks with a ``done`` marker count) with
three columns more::

    step          the training step of the run the row came from
    tasks_done    finished tasks of that run, and
    tasks_total   the tasks its run.json lists: a step with tasks_done < tasks_total is
                  partial, and every view says so (its finished tasks are final; the rest
                  are blank, never a stale or half-written number)

A run with no finished task yet has no rows (there is no number to show; ``hpceval status``
shows what is pending). Rows are sorted by step. If one step was evaluated by several runs
(a retry), each metric keeps its newest run's value, as the leaderboard does.

``step_pivot(table)`` is what ``hpceval results WATCH`` prints: one row per step, one column
per task (its primary metric, or ``metric``), plus the step's done/total tasks.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpceval.contract import is_done, task_dir
from hpceval.results.table import COLUMNS, read_run_json, render, run_rows

STEP_COLUMNS = ["step", *COLUMNS, "tasks_done", "tasks_total"]
_METRIC_KEY = ["model", "task", "subtask", "metric", "filter"]


def task_counts(run_dir: Path) -> tuple[int, int]:
    """(finished, listed) tasks of one run, from its run.json and the done markers."""
    run = read_run_json(run_dir)
    listed = [task_dir(Path(run_dir), m.key, t.key)
              for m in (run.models if run else ()) for t in m.tasks]
    return sum(is_done(d) for d in listed), len(listed)


def step_table(points: Sequence[tuple[int, Path]]) -> Any:
    """The long results table of every (step, run_dir), with a step column, sorted by step."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for step, run_dir in points:
        if isinstance(step, bool) or not isinstance(step, numbers.Integral):
            raise TypeError(f"step must be an int, got {step!r} for {run_dir}")
        step = int(step)
        found = run_rows(Path(run_dir))
        if not found:
            continue
        done, total = task_counts(Path(run_dir))
        # The task list can be absent (an old run.json): the finished ones are all we know.
        total = max(total, len({r["task"] for r in found}))
        rows += [{"step": step, **r, "tasks_done": done, "tasks_total": total} for r in found]
    frame = pd.DataFrame(rows, columns=STEP_COLUMNS)
    if frame.empty:
        return frame
    frame = frame.sort_values(["step", "invocation_id"], kind="stable")
    key = ["step", *_METRIC_KEY]
    frame = frame.drop_duplicates(key, keep="last")  # NaN filters compare equal here
    return frame.reset_index(drop=True)


def primary_points(table: Any, metric: str | None = None) -> Any:
    """One row per (step, model, task): its primary metric, or `metric` where reported.

    Column ``series`` says which line a point is on: the model, when some step's run has
    several models; otherwise one line for all steps, named by the newest step's model, so
    that a model key that changes from checkpoint to checkpoint does not break the line."""
    if table.empty:
        return table.assign(series=[])
    chosen = table[table["metric"] == metric] if metric else table[table["primary"]]
    # A metric reported under several subtasks/filters: the task's first row (the primary
    # metric's own subtask and filter come first in the harness's order).
    chosen = chosen.drop_duplicates(["step", "model", "task"], keep="first")
    several = bool((chosen.groupby("step")["model"].nunique() > 1).any())
    series = chosen["model"] if several else str(chosen["model"].iloc[-1]) if len(chosen) else ""
    return chosen.assign(series=series).reset_index(drop=True)


def several_series(points: Any) -> bool:
    return bool(points["series"].nunique() > 1)


def step_pivot(table: Any, metric: str | None = None) -> Any:
    """Index step; a column per task (``model: task`` when a step has several models), its
    primary metric (or `metric`); then the step's tasks_done and tasks_total."""
    import pandas as pd

    chosen = primary_points(table, metric)
    if chosen.empty:
        return pd.DataFrame()
    chosen = chosen.assign(column=chosen["series"] + ": " + chosen["task"]
                           if several_series(chosen) else chosen["task"])
    board = chosen.pivot(index="step", columns="column", values="value")
    board.columns.name = None
    # A retried step: its best-finished run says how complete it is.
    counts = table.groupby("step")[["tasks_done", "tasks_total"]].max()
    return board.join(counts).sort_index()


def is_partial(tasks_done: int, tasks_total: int) -> bool:
    """A step whose run still has tasks without a done marker (running, failed, pending)."""
    return tasks_done < tasks_total


def render_steps(table: Any, fmt: str, *, metric: str | None = None, long: bool = False) -> str:
    """Text of the step table for ``hpceval results``: the pivot (default) or the long rows,
    as table / csv / json / markdown (json: one object per step, like --leaderboard)."""
    if long:
        return render(table, fmt)
    pivot = step_pivot(table, metric)
    if fmt == "table" and pivot.empty:
        return "(no finished tasks at any step)\n"
    return render(pivot, fmt, index=not pivot.empty)

