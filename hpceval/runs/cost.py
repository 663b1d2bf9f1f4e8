"""What a run cost: GPU-hours and node-hours per model and per task, from Slurm's accounting.

A job's usage is what the accounting says it held (AllocTRES gres/gpu and node) times how long
it held it (Elapsed): the allocation budget is charged for held GPUs, busy or not. A model's
cost is every job of its chain (the first submission and each resume), so failed and timed-out
attempts count too; a sweep's judge job (scope: sweep) is a row of its own,
``auxiliary/<name>``. A task's cost is its own duration (manifest.json) times the GPUs of the
job that ran it; tasks a job ran side by side (max_concurrent_tasks > 1) share those GPUs, so
task figures can add up to more than the model's.

Usage comes from the scheduler call a refresh makes anyway: `register_usage` adds the jobs whose
usage is not known yet to the poller before that call, `collect_usage` reads the records after
it. Usage of ended jobs is kept in the user's cache (job-usage.json), so a job is asked about
until it ends, then never again. Local runs (no Slurm) have no accounting: shown as unknown.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from hpceval.backends import backend_for
from hpceval.backends.slurm.commands import ACCOUNTING
from hpceval.contract import MANIFEST_FILE, aux_folder, is_done, task_dir
from hpceval.records import Role, RunFileError, RunRecord, read_run
from hpceval.storage import atomic_write_json, cache_dir, read_json_object

USAGE_FILE = "job-usage.json"


class UsageSource(Protocol):
    """The part of hpceval.backends.slurm.poller.SacctPoller cost accounting needs."""

    def register(self, job_id: str, *, submitted_at: datetime | None = None) -> None: ...

    def record(self, job_id: str) -> Any: ...

    def status(self, job_id: str) -> Any: ...

    def refresh(self, *, force: bool = False) -> Any: ...


@dataclass(frozen=True)
class JobUsage:
    job_id: str  # as watched: "12", or "12_3" for one array task
    elapsed_s: int
    gpus: int
    nodes: int
    final: bool  # the job ended: these numbers no longer change

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.elapsed_s / 3600.0

    @property
    def node_hours(self) -> float:
        return self.nodes * self.elapsed_s / 3600.0


@dataclass(frozen=True)
class RunJob:
    """One Slurm job (or array task) that worked on one model of a run."""

    model: str
    scheduler_id: str
    submitted_at: float

    @property
    def key(self) -> str:
        # The submit time tells two jobs apart that got the same id (ids restart after a wipe).
        return f"{self.scheduler_id}@{int(self.submitted_at)}"


def run_jobs(run: RunRecord, jobs: Any) -> list[RunJob]:
    """Every Slurm attempt of every model of a run (run.json and its hpceval.runs.jobs.Jobs)."""
    out: list[RunJob] = []
    if not _accounted(jobs.kind):
        return out
    for model in run.models:
        for entry in jobs.main_for(model.index):
            if _accounted(entry.kind):
                out.append(RunJob(model.key, entry.scheduler_id(model.index), entry.submitted_at))
    # a sweep's judge jobs (scope: sweep) held GPUs for every model: charged as their own row
    for name in run.judge_names:
        out += [RunJob(aux_folder(name), e.id, e.submitted_at) for e in jobs.chain
                if e.role == Role.JUDGE and e.aux == name and _accounted(e.kind)]
    return out


def _accounted(kind: str) -> bool:
    """Whether the scheduler that ran jobs of this kind records what they held."""
    try:
        return backend_for(kind).accounted
    except ValueError:  # an unknown kind (a damaged jobs.json): nothing to ask
        return False


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

    def put(self, job: RunJob, record: Any, *, ended: bool) -> None:
        """Usage from a JobRecord (hpceval.backends.slurm.records); one without usage is skipped."""
        if record is None or record.alloc_gpus is None or record.elapsed_s is None:
            return
        usage = JobUsage(job.scheduler_id, record.elapsed_s, record.alloc_gpus,
                         record.alloc_nodes or 0, ended)
        self._known[job.key] = usage
        self._dirty = self._dirty or ended

    def save(self) -> None:
        # Only a cache: if it cannot be written, the next call asks the scheduler again.
        if not self._dirty:
            return
        data = {k: [u.elapsed_s, u.gpus, u.nodes] for k, u in self._known.items() if u.final}
        with contextlib.suppress(OSError):
            atomic_write_json(_cache_path(), data)
        self._dirty = False


def register_usage(source: UsageSource, jobs: Iterable[RunJob], book: UsageBook) -> list[RunJob]:
    """Watch the jobs whose usage is unknown or still growing; returns them for collect_usage."""
    wanted = book.missing(jobs)
    for job in wanted:
        source.register(job.scheduler_id,
                        submitted_at=datetime.fromtimestamp(job.submitted_at).astimezone())
    return wanted


def collect_usage(source: UsageSource, wanted: Iterable[RunJob], book: UsageBook) -> None:
    for job in wanted:
        record = source.record(job.scheduler_id)
        book.put(job, record, ended=bool(source.status(job.scheduler_id).terminal))
    book.save()


def _task_run_by(manifest: dict[str, Any]) -> str | None:
    slurm = manifest.get("slurm") or {}
    if slurm.get("array_job_id") and slurm.get("array_task_id") is not None:
        return f"{slurm['array_job_id']}_{slurm['array_task_id']}"
    job_id = slurm.get("job_id")
    return str(job_id) if job_id else None


def _hours(seconds: float, count: int) -> float:
    return round(count * seconds / 3600.0, 6)


def run_cost(run_dir: Path, run: RunRecord, jobs: Any, book: UsageBook) -> dict[str, Any]:
    """{accounted, gpu_hours, node_hours, unknown_jobs, models: [{model, gpu_hours,
    node_hours, elapsed_s, jobs, unknown_jobs, tasks: [{task, duration_s, gpu_hours,
    node_hours}]}]}."""
    attempts = run_jobs(run, jobs)
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
            tasks.append({"task": task.task, "duration_s": duration,
                          "gpu_hours": _hours(duration, usage.gpus),
                          "node_hours": _hours(duration, usage.nodes)})
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
    return {"accounted": _accounted(jobs.kind),  # local runs: no accounting to ask
            "gpu_hours": round(sum(m["gpu_hours"] for m in models), 6),
            "node_hours": round(sum(m["node_hours"] for m in models), 6),
            "unknown_jobs": sum(m["unknown_jobs"] for m in models), "models": models}


def format_cost(cost: dict[str, Any]) -> str:
    """'1.25 GPU-h, 0.312 node-h' for a run's or a model's cost (+ jobs not accounted yet)."""
    text = f"{cost['gpu_hours']:.3g} GPU-h, {cost['node_hours']:.3g} node-h"
    unknown = cost["unknown_jobs"]
    return text + (f" ({unknown} job(s) not in {ACCOUNTING} yet)" if unknown else "")


def usage_round(source: UsageSource, runs: Iterable[tuple[RunRecord, Any]],
                book: UsageBook | None = None) -> tuple[UsageBook, list[RunJob]]:
    """register_usage over the (run.json, Jobs) of several runs: call before the refresh."""
    book = book or UsageBook()
    wanted = register_usage(source, [j for run, jobs in runs for j in run_jobs(run, jobs)], book)
    return book, wanted


def cost_frame(run_dirs: Iterable[Path], source_factory: Any) -> Any:
    """One row per (run, model, task) plus a '(all jobs)' row per model: the `results --cost`
    table. `source_factory()` gives a poller; it is made (and the scheduler asked, once) only when
    some job's usage is not cached yet."""
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
    if book.missing(j for _, run, jobs in loaded for j in run_jobs(run, jobs)):
        source = source_factory()
        book, wanted = usage_round(source, [(run, jobs) for _, run, jobs in loaded], book)
        source.refresh(force=True)
        collect_usage(source, wanted, book)
    rows = []
    for run_dir, run, jobs in loaded:
        cost = run_cost(run_dir, run, jobs, book)
        if not cost["accounted"]:
            continue
        for m in cost["models"]:
            base = {"invocation_id": run.invocation_id, "model": m["model"]}
            rows.append({**base, "task": "(all jobs)", "jobs": m["jobs"],
                         "unknown_jobs": m["unknown_jobs"], "duration_s": m["elapsed_s"],
                         "gpu_hours": m["gpu_hours"], "node_hours": m["node_hours"]})
            rows += [{**base, "jobs": None, "unknown_jobs": None, **t} for t in m["tasks"]]
    return pd.DataFrame(rows, columns=COST_COLUMNS)


COST_COLUMNS = ["invocation_id", "model", "task", "jobs", "unknown_jobs", "duration_s",
                "gpu_hours", "node_hours"]
