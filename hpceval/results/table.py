"""Results across runs as pandas tables: one row per metric, and a leaderboard.

Only finished tasks count: a task's results.json is read when its `done` marker exists, so a
half-written or superseded result never reaches a table. Columns of the long table::

    invocation_id, model, task, harness, harness_version, subtask, metric, filter,
    value, stderr, n_samples, primary, run_dir, task_dir, created_at

The primary metric of a task (the leaderboard's number) is, in order: the metric named by
``extra.primary_metric`` in results.json; else the first metric reported for the task itself
(``subtask`` equal to the task's short name, or the only subtask); else the first metric.
Harness adapters list the headline metric first, so "first" is meaningful and stable.

``aggregate(run_dir)`` (``python -m hpceval.job aggregate``: the sweep's dependent job) writes
DIR/results.csv and, when pyarrow is importable, DIR/results.parquet.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from hpceval.contract import (
    MODELS_DIR,
    RESULTS_FILE,
    is_done,
    tasks_dir,
)
from hpceval.records import RunFileError, RunRecord, read_run
from hpceval.storage import atomic_write_text

log = logging.getLogger(__name__)

COLUMNS = ["invocation_id", "model", "task", "harness", "harness_version", "subtask", "metric",
           "filter", "value", "stderr", "n_samples", "primary", "run_dir", "task_dir", "created_at"]
FORMATS = ("table", "csv", "json", "markdown", "parquet")


def parquet_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None


def read_run_json(run_dir: Path) -> RunRecord | None:
    """The run's record; None for a directory without a readable one (its rows come from
    what is on disk, under the directory's name)."""
    try:
        return read_run(run_dir)
    except RunFileError:
        return None


def _primary_index(task: str, extra: dict[str, Any], metrics: list[dict[str, Any]]) -> int:
    wanted = extra.get("primary_metric")
    if wanted:
        for i, m in enumerate(metrics):
            if m["name"] == wanted:
                return i
    short = task.rsplit(".", 1)[-1]
    subtasks = {m["task"] for m in metrics}
    for i, m in enumerate(metrics):
        if m["task"] == short or len(subtasks) == 1:
            return i
    return 0


def _finished_result(task_dir: str) -> dict[str, Any] | None:
    """results.json of a finished task as the plain dict TaskResult.to_json wrote, else None.

    Plain dicts and os.path strings, not TaskResult and Path: a table over 10,000 tasks spent
    most of its time building objects (benchmarks/aggregate_bench.py). The done marker is
    written after results.json, so it alone says the results are final.
    """
    # plain "/" joins: os.path.join cost a fifth of a 10,000-task table (report_bench)
    if not is_done(task_dir):
        return None
    path = f"{task_dir}/{RESULTS_FILE}"
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # truncated, not UTF-8, unreadable: this task only
        _skip(path, str(exc.strerror) if isinstance(exc, OSError) else "not valid JSON")
        return None
    if not isinstance(data, dict) or not isinstance(data.get("metrics"), list) \
            or not isinstance(data.get("task"), str):
        _skip(path, "not a results object (task, metrics)")
        return None
    return data


def primary_metric(task_dir: str) -> tuple[str, dict[str, Any]] | None:
    """(task name, its primary metric as results.json has it) of a finished task, else None."""
    result = _finished_result(task_dir)
    if result is None or not result["metrics"]:
        return None
    metrics = result["metrics"]
    try:
        return result["task"], metrics[_primary_index(result["task"], result.get("extra") or {},
                                                      metrics)]
    except (KeyError, TypeError):
        return None


def _skip(path: str, why: str) -> None:
    log.warning("hpceval: skipping %s: %s", path, why)


def run_rows(run_dir: Path) -> list[dict[str, Any]]:
    """Rows for every finished task of one run directory."""
    run = read_run_json(run_dir)
    invocation, run_dir_text = run.invocation_id if run else run_dir.name, str(run_dir)
    created = run.created_at if run else 0.0
    models: list[tuple[str, list[str] | None]] = (
        [(m.key, [t.key for t in m.tasks]) for m in run.models] if run and run.models
        else [(p.name, None) for p in sorted((run_dir / MODELS_DIR).glob("*")) if p.is_dir()])
    rows: list[dict[str, Any]] = []
    for model, listed in models:
        folder = tasks_dir(run_dir_text, model)
        keys = (listed if listed is not None
                else sorted(e.name for e in _scandir(folder) if e.is_dir()))
        for key in keys:
            task_dir = f"{folder}/{key}"
            result = _finished_result(task_dir)
            if result is None:
                continue
            try:
                rows.extend(_task_rows(result, invocation, model, run_dir_text,
                                       task_dir, created))
            except (KeyError, TypeError, AttributeError) as exc:
                _skip(f"{task_dir}/{RESULTS_FILE}", f"malformed metric ({exc!r})")
    return rows


def _task_rows(result: dict[str, Any], invocation: str, model: str, run_dir_text: str,
               task_dir: str, created: float) -> list[dict[str, Any]]:
    metrics = result["metrics"]
    primary = _primary_index(result["task"], result.get("extra") or {}, metrics)
    rows: list[dict[str, Any]] = []
    for i, m in enumerate(metrics):
        rows.append({
            "invocation_id": invocation, "model": model,
            "task": result["task"], "harness": result["harness"],
            "harness_version": result.get("harness_version"), "subtask": m["task"],
            "metric": m["name"], "filter": m.get("filter"), "value": m["value"],
            "stderr": m.get("stderr"), "n_samples": m.get("n_samples"),
            "primary": i == primary, "run_dir": run_dir_text, "task_dir": task_dir,
            "created_at": created})
    return rows


def _scandir(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as entries:
            return list(entries)
    except FileNotFoundError:
        return []


def results_frame(run_dirs: Iterable[Path], *, models: Sequence[str] = (),
                  tasks: Sequence[str] = ()) -> Any:
    """The long table (a pandas DataFrame) for these runs, filtered by model / task name."""
    import pandas as pd

    rows = [row for run_dir in run_dirs for row in run_rows(Path(run_dir))]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    if models:
        frame = frame[frame["model"].isin(models)]
    if tasks:
        short = frame["task"].str.rsplit(".", n=1).str[-1]
        frame = frame[frame["task"].isin(tasks) | short.isin(tasks)]
    return frame.reset_index(drop=True)


def leaderboard(frame: Any, metric: str | None = None) -> Any:
    """One row per model, one column per task: its primary metric (or `metric`), their mean,
    and ``run``: the run behind the model's numbers.

    A model evaluated in several runs shows, per task, the run `counting_rows` picks (the
    newest one that finished the task); ``run`` is then each run with its tasks
    ("RUN1 (task, task); RUN2 (task)"), so no number is shown without its run."""
    import pandas as pd

    if frame.empty:
        return pd.DataFrame()
    chosen = counting_rows(frame[frame["metric"] == metric] if metric else frame[frame["primary"]])
    board = chosen.pivot(index="model", columns="task", values="value")
    board.columns.name = None
    board["mean"] = board.mean(axis=1, numeric_only=True)
    board["run"] = pd.Series(_runs_of(chosen)).reindex(board.index)
    return board.sort_values("mean", ascending=False)


def _runs_of(chosen: Any) -> dict[str, str]:
    """model -> the run its numbers come from, or each run with its tasks where several."""
    tasks: dict[str, dict[str, list[str]]] = {}
    pairs = chosen[["model", "invocation_id", "task"]].drop_duplicates()
    for model, run, task in sorted(pairs.itertuples(index=False, name=None)):
        tasks.setdefault(str(model), {}).setdefault(str(run), []).append(str(task))
    return {model: (next(iter(runs)) if len(runs) == 1 else "; ".join(
        f"{run} ({', '.join(names)})" for run, names in runs.items()))
        for model, runs in tasks.items()}


def counting_rows(rows: Any) -> Any:
    """Which run counts: per (model, task), the rows of the newest run that finished it.

    The one place this is decided (leaderboard, report, compare and gate all call it). Only
    finished tasks reach the table, so "newest" is the newest complete run of that model and
    task: the latest run.json ``created_at`` (the submission time), then the invocation id
    (which starts with that time, to the second) for runs without one. Naming runs
    (hpceval results RUN..., compare RUN:MODEL) narrows the frame before this rule applies.
    """
    if rows.empty:
        return rows
    keys = [c for c in ("created_at", "invocation_id") if c in rows.columns]
    order = rows.sort_values(keys)
    newest = order.drop_duplicates(["model", "task"], keep="last")[
        ["model", "task", "invocation_id"]]
    return rows.merge(newest, on=["model", "task", "invocation_id"], how="inner")


def render(frame: Any, fmt: str, *, index: bool = False) -> str:
    """Text for table / csv / json / markdown (parquet is binary: use write_parquet)."""
    if fmt == "csv":
        text: str = frame.to_csv(index=index)
        return text
    if fmt == "json":
        data = frame.reset_index() if index else frame
        return json.dumps(json.loads(data.to_json(orient="records")), indent=2) + "\n"
    if fmt == "markdown":
        return _markdown(frame.reset_index() if index else frame)
    if fmt == "table":
        if frame.empty:
            return "(no finished tasks)\n"
        shown = frame.drop(columns=[c for c in ("run_dir", "task_dir", "created_at", "primary")
                                    if c in frame.columns])
        return str(shown.to_string(index=index, float_format=lambda v: f"{v:.4g}")) + "\n"
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


def _markdown(frame: Any) -> str:
    # pandas' to_markdown needs the `tabulate` package; a plain pipe table needs nothing.
    cols = [str(c) for c in frame.columns]

    def cell(v: Any) -> str:
        text = f"{v:.4g}" if isinstance(v, float) else ("" if v is None else str(v))
        return text.replace("|", "\\|")

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |"
              for row in frame.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def write_parquet(frame: Any, path: Path) -> None:
    if not parquet_available():
        raise RuntimeError("parquet needs pyarrow, which is not installed here "
                           "(pip install pyarrow); use --format csv or json")
    tmp = path.with_name(f".{path.name}.tmp")
    frame.to_parquet(tmp, index=False)
    tmp.replace(path)


def aggregate(run_dir: Path) -> Any:
    frame = results_frame([run_dir])
    atomic_write_text(run_dir / "results.csv", render(frame, "csv"))
    if parquet_available():
        write_parquet(frame, run_dir / "results.parquet")
    return frame


if __name__ == "__main__":
    # Job scripts rendered before the aggregation step moved to `python -m hpceval.job
    # aggregate` name this module (`... results.table aggregate --run-dir DIR`): the same step.
    import runpy

    runpy.run_module("hpceval.job", run_name="__main__", alter_sys=True)
