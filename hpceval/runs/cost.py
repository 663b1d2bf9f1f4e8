"""What a run cost: GPU-hours and node-hours per model and per task, from the backends' usage.

A job's usage is what its backend says it held (Slurm: its accounting's AllocTRES gres/gpu and node;
local: the runner's own record) times how long it held it: the allocation budget is charged
for held GPUs, busy or not. A model's cost is every job of its chain (the first submission and
each resume), so failed and timed-out attempts count too; a sweep's judge job (scope: sweep) is
a row of its own, ``auxiliary/<name>``. A task's cost is its own duration (manifest.json) times
the GPUs of the job that ran it; tasks a job ran side by side (max_concurrent_tasks > 1) share
those GPUs, so task figures can add up to more than the model's. Per scored item: a task's
GPU-seconds over the items its results.json says were scored (the most of its metrics'
``n_samples``), what a larger ``limit_samples`` would cost per item.

Usage comes from the scheduler call a refresh makes anyway: `usage_round` names the jobs whose
usage is not known yet to their backends before that call (`Backend.usage(..., ask=False)`),
`collect_usage` reads the answers after it. Usage of ended jobs is kept in the user's cache
(job-usage.json), so a job is asked about until it ends, then never again.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpceval.backends import BACKENDS, Backend, JobUsage, UsageQuery
from hpceval.contract import MANIFEST_FILE, RESULTS_FILE, aux_folder, is_done, task_dir
from hpceval.records import Role, RunFileError, RunRecord, read_run
from hpceval.storage import atomic_write_json, cache_dir, read_json_object

USAGE_FILE = "job-usage.json"
BackendOf = Callable[[str], Backend]  # a run kind -> its backend (Tracker.backend)


@dataclass(frozen=True)
class RunJob:
    """One job (or array task, or local runner) that worked on one model of a run."""

    model: str
    scheduler_id: str
    submitted_at: float
    kind: str  # the backend that ran it (JobEntry.kind)
    run_dir: Path

    @property
    def key(self) -> str:
        # The submit time tells two jobs apart that got the same id (ids restart after a wipe).
        return f"{self.scheduler_id}@{int(self.submitted_at)}"

    @property
    def query(self) -> UsageQuery:
        return UsageQuery(self.scheduler_id, self.submitted_at, self.run_dir, self.model)


def run_jobs(run_dir: Path, run: RunRecord, jobs: Any) -> list[RunJob]:
    """Every attempt of every model of a run (run.json and its hpceval.runs.jobs.Jobs)."""
    out: list[RunJob] = []
    if jobs.kind not in BACKENDS:  # an unknown kind (a damaged jobs.json): nothing to ask
        return out
    for model in run.models:
        out += [RunJob(model.key, e.scheduler_id(model.index), e.submitted_at, e.kind, run_dir)
                for e in jobs.main_for(model.index) if e.kind in BACKENDS]
    # a sweep's judge jobs (scope: sweep) held GPUs for every model: charged as their own row
    for name in run.judge_names:
        out += [RunJob(aux_folder(name), e.id, e.submitted_at, e.kind, run_dir)
                for e in jobs.chain
                if e.role == Role.JUDGE and e.aux == name and e.kind in BACKENDS]
    return out


def _cache_path() -> Path:
    return cache_dir() / USAGE_FILE


class UsageBook:
    """Known job usage: ended jobs from the cache, the rest from this call's accounting records."""

    def __init__(self) -> None:
        self._known: dict[str, JobUsage] = {}
        self._dirty = False
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            data = json.loads(_cache_path().read_text(encoding="utf-8"))
            for key, (elapsed, gpus, nodes) in data.items():
                scheduler_id = key.rsplit("@", 1)[0]
                self._known[key] = JobUsage(scheduler_id, int(elapsed), int(gpus), int(nodes), True)

    def get(self, job: RunJob) -> JobUsage | None:
        return self._known.get(job.key)

    def missing(self, jobs: Iterable[RunJob]) -> list[RunJob]:
        return [j for j in jobs if not (j.key in self._known and self._known[j.key].final)]

    def put(self, job: RunJob, usage: JobUsage | None) -> None:
        """What the job's backend said (None: not accounted yet, skipped)."""
        if usage is None:
            return
        self._known[job.key] = usage
        self._dirty = self._dirty or usage.final

    def save(self) -> None:
        # Only a cache: if it cannot be written, the next call asks the scheduler again.
        if not self._dirty:
            return
        data = {k: [u.elapsed_s, u.gpus, u.nodes] for k, u in self._known.items() if u.final}
        with contextlib.suppress(OSError):
            atomic_write_json(_cache_path(), data)
        self._dirty = False


def _by_kind(jobs: Iterable[RunJob]) -> dict[str, list[RunJob]]:
    grouped: dict[str, list[RunJob]] = {}
    for job in jobs:
        grouped.setdefault(job.kind, []).append(job)
    return grouped


def collect_usage(backend_of: BackendOf, wanted: Iterable[RunJob], book: UsageBook, *,
                  ask: bool = False) -> None:
    """Each backend's answer for the wanted jobs into `book` (ask=False: what the refresh
    just asked; ask=True: one call of each backend's own)."""
    for kind, mine in _by_kind(wanted).items():
        answers = backend_of(kind).usage([j.query for j in mine], ask=ask)
        for job, usage in zip(mine, answers, strict=True):
            book.put(job, usage)
    book.save()


def _task_run_by(manifest: dict[str, Any]) -> str | None:
    slurm = manifest.get("slurm") or {}
    if slurm.get("array_job_id") and slurm.get("array_task_id") is not None:
        return f"{slurm['array_job_id']}_{slurm['array_task_id']}"
    job_id = slurm.get("job_id")
    return str(job_id) if job_id else None


def _items(task_folder: Path) -> int | None:
    """How many items the task scored: the most of its results.json metrics' n_samples."""
    record = read_json_object(task_folder / RESULTS_FILE) or {}
    metrics = record.get("metrics")
    if not isinstance(metrics, list):
        return None
    counts = [m["n_samples"] for m in metrics if isinstance(m, dict)
              and isinstance(m.get("n_samples"), int) and not isinstance(m["n_samples"], bool)
              and m["n_samples"] > 0]
    return max(counts) if counts else None


def _hours(seconds: float, count: int) -> float:
    return round(count * seconds / 3600.0, 6)


def run_cost(run_dir: Path, run: RunRecord, jobs: Any, book: UsageBook) -> dict[str, Any]:
    """{accounted, gpu_hours, node_hours, unknown_jobs, models: [{model, gpu_hours,
    node_hours, elapsed_s, jobs, unknown_jobs, tasks: [{task, duration_s, gpu_hours,
    node_hours, items, gpu_s_per_item}]}]}."""
    attempts = run_jobs(run_dir, run, jobs)
    models: list[dict[str, Any]] = []
    for model in run.models:
        mine = [j for j in attempts if j.model == model.key]
        usages = {j.scheduler_id: u for j in mine if (u := book.get(j)) is not None}
        known = list(usages.values())
        newest = next((u for j in reversed(mine) if (u := usages.get(j.scheduler_id))), None)
        tasks = []
        for task in model.tasks:
            here = task_dir(str(run_dir), model.key, task.key)
            if not is_done(here):
                continue
            manifest = read_json_object(Path(here) / MANIFEST_FILE) or {}
            duration = manifest.get("duration_s")
            usage = usages.get(_task_run_by(manifest) or "", newest)
            if duration is None or usage is None:
                continue
            gpu_hours = _hours(duration, usage.gpus)
            items = _items(Path(here))
            tasks.append({"task": task.task, "duration_s": duration, "gpu_hours": gpu_hours,
                          "node_hours": _hours(duration, usage.nodes), "items": items,
                          "gpu_s_per_item": round(gpu_hours * 3600 / items, 3) if items
                          else None})
        models.append({
            "model": model.key, "jobs": len(mine), "unknown_jobs": len(mine) - len(known),
            "elapsed_s": sum(u.elapsed_s for u in known),
            "gpu_hours": round(sum(u.gpu_hours for u in known), 6),
            "node_hours": round(sum(u.node_hours for u in known), 6), "tasks": tasks})
    for label in map(aux_folder, run.judge_names):
        known = [u for j in attempts if j.model == label and (u := book.get(j)) is not None]
        held = sum(j.model == label for j in attempts)
        models.append({
            "model": label, "jobs": held, "unknown_jobs": held - len(known),
            "elapsed_s": sum(u.elapsed_s for u in known),
            "gpu_hours": round(sum(u.gpu_hours for u in known), 6),
            "node_hours": round(sum(u.node_hours for u in known), 6), "tasks": []})
    return {"accounted": jobs.kind in BACKENDS,  # every backend tells its jobs' usage
            "gpu_hours": round(sum(m["gpu_hours"] for m in models), 6),
            "node_hours": round(sum(m["node_hours"] for m in models), 6),
            "unknown_jobs": sum(m["unknown_jobs"] for m in models), "models": models}


def format_cost(cost: dict[str, Any]) -> str:
    """'1.25 GPU-h, 0.312 node-h' for a run's or a model's cost (+ jobs not accounted yet)."""
    text = f"{cost['gpu_hours']:.3g} GPU-h, {cost['node_hours']:.3g} node-h"
    unknown = cost["unknown_jobs"]
    return text + (f" ({unknown} job(s) not accounted yet)" if unknown else "")


def usage_round(backend_of: BackendOf, runs: Iterable[tuple[Path, RunRecord, Any]],
                book: UsageBook | None = None) -> tuple[UsageBook, list[RunJob]]:
    """Name the jobs of several runs (run dir, run.json, Jobs) whose usage is not known yet
    to their backends, for the scheduler call a refresh makes next: call before it, then
    collect_usage."""
    book = book or UsageBook()
    wanted = book.missing(j for run_dir, run, jobs in runs for j in run_jobs(run_dir, run, jobs))
    for kind, mine in _by_kind(wanted).items():
        backend_of(kind).usage([j.query for j in mine], ask=False)
    return book, wanted


def cost_frame(run_dirs: Iterable[Path], backends: Callable[[], BackendOf]) -> Any:
    """One row per (run, model, task) plus a '(all jobs)' row per model: the `results --cost`
    table. `backends()` gives the backends by kind; they are made (and each scheduler asked,
    once) only when some job's usage is not cached yet."""
    import pandas as pd

    from hpceval.runs.jobs import read_jobs

    loaded = []
    for run_dir in run_dirs:
        try:
            run = read_run(Path(run_dir))
        except RunFileError:  # not a run (a damaged one): no row, as for the results table
            continue
        loaded.append((Path(run_dir), run, read_jobs(Path(run_dir))))
    book = UsageBook()
    wanted = book.missing(j for run_dir, run, jobs in loaded
                          for j in run_jobs(run_dir, run, jobs))
    if wanted:
        collect_usage(backends(), wanted, book, ask=True)
    rows = []
    for run_dir, run, jobs in loaded:
        cost = run_cost(run_dir, run, jobs, book)
        if not cost["accounted"]:
            continue
        for m in cost["models"]:
            base = {"invocation_id": run.invocation_id, "model": m["model"]}
            rows.append({**base, "task": "(all jobs)", "jobs": m["jobs"],
                         "unknown_jobs": m["unknown_jobs"], "duration_s": m["elapsed_s"],
                         "gpu_hours": m["gpu_hours"], "node_hours": m["node_hours"],
                         "items": None, "gpu_s_per_item": None})
            rows += [{**base, "jobs": None, "unknown_jobs": None, **t} for t in m["tasks"]]
    return pd.DataFrame(rows, columns=COST_COLUMNS)


COST_COLUMNS = ["invocation_id", "model", "task", "jobs", "unknown_jobs", "duration_s",
                "gpu_hours", "node_hours", "items", "gpu_s_per_item"]
