"""What users mean by a run's state: Slurm's answer merged with what the job left on disk.

Markers beat the scheduler: a task with `done` is done whatever sacct says (it lags, or forgot
an old job); `failed.json` says why a task failed; the model's `job-failure` says why the job
itself failed (a server died, the results directory is not writable). The scheduler says the
rest: queued, running, resuming, or how the job ended. One `Tracker` serves any number of
runs through ONE shared JobWatcher, so a refresh is one sacct call; finished jobs are
remembered in the user's cache (job-states.json) so later `status` calls never ask about them
again.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpceval.results.store import atomic_write_json, is_done
from hpceval.runs.index import RunRef, cache_dir, ref_from_dir
from hpceval.runs.jobs import JobEntry, Jobs, read_jobs
from hpceval.runs.local import RC_FILE, local_alive
from hpceval.runs.logs import job_log
from hpceval.runs.progress import read_progress
from hpceval.slurm.client import SlurmClient
from hpceval.slurm.states import JobStatus, Phase
from hpceval.slurm.watcher import JobWatcher

STATES_FILE = "job-states.json"
FAILED_FILE = "failed.json"
JOB_FAILURE_FILE = "job-failure"  # one line, by the job script's job_failure (teardown.j2)
RESUME_HINT = "`hpceval resume` continues"
# Ends the scheduler imposed on a job that had nothing wrong with it: rerunning is the remedy.
_SCHEDULER_ENDS = ("TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "PREEMPTED", "DEADLINE")


@dataclass(frozen=True)
class TaskState:
    key: str
    task: str
    phase: Phase
    reason: str = ""


@dataclass(frozen=True)
class ModelState:
    key: str
    index: int
    phase: Phase
    reason: str
    job_id: str | None  # the newest job (or array task) working on this model
    attempts: int  # jobs in its chain
    tasks: list[TaskState]
    progress: dict[str, Any] | None = None


@dataclass(frozen=True)
class RunState:
    ref: RunRef
    phase: Phase
    reason: str
    models: list[ModelState]
    jobs: Jobs
    run: dict[str, Any] = field(default_factory=dict)  # run.json


def read_run(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    return data


class Tracker:
    """Tracks runs through one shared watcher (ONE sacct per refresh, rate limited)."""

    def __init__(self, client: SlurmClient | None = None, *, watcher: JobWatcher | None = None,
                 min_interval_s: float = 2.0) -> None:
        if watcher is None:
            if client is None:
                from hpceval.slurm.client import CommandSlurmClient

                client = CommandSlurmClient()
            watcher = JobWatcher(client, min_interval_s=min_interval_s)
        self.watcher = watcher
        self._runs: dict[Path, RunRef] = {}
        self._cache = _load_cache()
        self._cache_dirty = False

    def add(self, ref: RunRef | Path) -> None:
        run_ref = ref if isinstance(ref, RunRef) else ref_from_dir(ref)
        self._runs[run_ref.run_dir] = run_ref

    def refresh(self, *, force: bool = False) -> list[RunState]:
        """Register what is unfinished, ask sacct once (if due), and build every run's state."""
        loaded = [(ref, read_run(ref.run_dir), read_jobs(ref.run_dir))
                  for ref in self._runs.values()]
        for ref, run, jobs in loaded:
            self._register(ref, run, jobs)
        if any(j.kind == "slurm" for _, _, j in loaded):
            self.watcher.refresh(force=force)
        states = [self._run_state(ref, run, jobs) for ref, run, jobs in loaded]
        if self._cache_dirty:
            _save_cache(self._cache)
            self._cache_dirty = False
        return states

    # -- internals --------------------------------------------------------------------------

    def _register(self, ref: RunRef, run: dict[str, Any], jobs: Jobs) -> None:
        if jobs.kind != "slurm":
            return
        arrays: dict[str, tuple[JobEntry, list[int]]] = {}
        for model in run["models"]:
            entry = jobs.current(model["index"])
            if entry is None or _all_done(ref.run_dir, model):
                continue
            if self._cached(entry, model["index"]) is not None:
                continue
            if entry.array:
                arrays.setdefault(entry.id, (entry, []))[1].append(model["index"])
            else:
                self.watcher.register(entry.id, submitted_at=_dt(entry.submitted_at))
        for base, (entry, indices) in arrays.items():
            known = {j for j in self.watcher.job_ids if j.startswith(f"{base}_")}
            wanted = sorted(set(indices) | {int(j.split("_")[1]) for j in known})
            self.watcher.register_array(base, wanted, submitted_at=_dt(entry.submitted_at))

    def _cached(self, entry: JobEntry, index: int) -> JobStatus | None:
        hit = self._cache.get(_cache_key(entry, index))
        return JobStatus(Phase(hit[0]), hit[1], hit[2]) if hit else None

    def _job_status(self, entry: JobEntry, index: int) -> JobStatus:
        cached = self._cached(entry, index)
        if cached is not None:
            return cached
        status = self.watcher.status(entry.watch_id(index))
        # PREEMPTED / NODE_FAIL jobs may be requeued by Slurm under the same id: not cached.
        if status.terminal and not status.raw_state.startswith(("PREEMPTED", "NODE_FAIL")):
            self._cache[_cache_key(entry, index)] = [status.phase.value, status.reason,
                                                     status.raw_state]
            self._cache_dirty = True
        return status

    def _run_state(self, ref: RunRef, run: dict[str, Any], jobs: Jobs) -> RunState:
        models = [self._model_state(ref.run_dir, m, jobs) for m in run["models"]]
        phase, reason = combine_models(models)
        return RunState(ref, phase, reason, models, jobs, run)

    def _model_state(self, run_dir: Path, model: dict[str, Any], jobs: Jobs) -> ModelState:
        key, index = model["key"], model["index"]
        model_dir = run_dir / "models" / key
        entry = jobs.current(index)
        attempts = len(jobs.main_for(index))
        if entry is None:
            job = JobStatus(Phase.UNKNOWN, "no job recorded (submission failed?)")
        elif entry.kind == "local":
            job = local_status(entry, model_dir)
        else:
            job = self._job_status(entry, index)
        tasks = task_states(model_dir, model["tasks"], job)
        stopped = ""
        if entry is not None and entry.kind == "slurm" and job.phase is Phase.CANCELLED:
            stopped = stop_point(job_log(run_dir, key, index, jobs), model_dir, tasks,
                                 entry.submitted_at)
        phase, reason = model_phase(job, tasks, attempts, model_dir, stopped=stopped)
        cause = job_failure(model_dir, entry.submitted_at) if entry is not None else ""
        if phase is Phase.FAILED and cause:  # the likely cause first, then its effects
            reason = f"{cause}; {reason}" if reason else cause
        job_id = None if entry is None else entry.watch_id(index)
        progress = read_progress(model_dir) if phase is Phase.RUNNING else None
        return ModelState(key, index, phase, reason, job_id, attempts, tasks, progress)


def local_status(entry: JobEntry, model_dir: Path) -> JobStatus:
    rc_file = model_dir / RC_FILE
    if rc_file.is_file():
        text = rc_file.read_text().strip()
        rc = int(text) if text.lstrip("-").isdigit() else 1
        if rc == 0:
            return JobStatus(Phase.DONE, "", "exit 0")
        if entry.cancelled_at:
            return JobStatus(Phase.CANCELLED, "cancelled by hpceval kill", f"exit {rc}")
        why = {124: "walltime reached", 137: "killed at the walltime",
               143: "stopped (signal)"}.get(rc, f"exit code {rc}")
        return JobStatus(Phase.FAILED, why, f"exit {rc}")
    alive = local_alive(entry)
    if alive is None:
        return JobStatus(Phase.UNKNOWN, f"runs on host {entry.host}; ask there")
    if alive:
        log = model_dir / "local.log"
        started = log.is_file() and log.stat().st_mtime >= entry.submitted_at - 1
        return JobStatus(Phase.RUNNING if started else Phase.QUEUED,
                         "" if started else "waiting for the models before it")
    if entry.cancelled_at:
        return JobStatus(Phase.CANCELLED, "cancelled by hpceval kill")
    return JobStatus(Phase.FAILED, "the local runner ended without a status")


def task_states(model_dir: Path, tasks: list[dict[str, str]], job: JobStatus
                ) -> list[TaskState]:
    out: list[TaskState] = []
    for task in tasks:
        task_dir = model_dir / "tasks" / task["key"]
        failed = task_dir / FAILED_FILE
        started = task_dir / "command.sh"
        if is_done(task_dir):
            out.append(TaskState(task["key"], task["task"], Phase.DONE))
            continue
        retrying = (failed.is_file() and started.is_file()
                    and started.stat().st_mtime > failed.stat().st_mtime)
        if job.phase is Phase.RUNNING and started.is_file() and (retrying or not failed.is_file()):
            out.append(TaskState(task["key"], task["task"], Phase.RUNNING))
        elif failed.is_file():
            out.append(TaskState(task["key"], task["task"], Phase.FAILED, _failure(failed)))
        elif job.terminal:  # the job ended without finishing it (never "done": no marker)
            phase = Phase.CANCELLED if job.phase is Phase.CANCELLED else Phase.FAILED
            out.append(TaskState(task["key"], task["task"], phase,
                                 f"not finished (job {job.phase.value})"))
        else:
            out.append(TaskState(task["key"], task["task"], Phase.QUEUED))
    return out


def stop_point(log: Path | None, model_dir: Path, tasks: list[TaskState],
               since: float) -> str:
    """Where a cancelled Slurm job stood, from what it left on disk: Slurm creates its log when
    the job starts, and each task it started writes command.sh (a task started by an earlier
    job of the chain has an older one)."""
    if log is None or not log.exists():
        return "while queued (it never started)"
    begun = [t for t in tasks if _mtime(model_dir / "tasks" / t.key / "command.sh") >= since]
    if not begun:
        return "while the model server was loading (no task had started)"
    done = sum(t.phase is Phase.DONE for t in tasks)
    return f"mid-task ({done}/{len(tasks)} tasks done)"


def model_phase(job: JobStatus, tasks: list[TaskState], attempts: int,
                model_dir: Path, *, stopped: str = "") -> tuple[Phase, str]:
    if tasks and all(t.phase is Phase.DONE for t in tasks):
        return Phase.DONE, ""
    failed = [t for t in tasks if t.phase is Phase.FAILED
              and not t.reason.startswith("not finished")]
    if job.phase is Phase.QUEUED and attempts > 1:
        return Phase.RESUMING, f"attempt {attempts} queued" + (
            f" ({job.reason})" if job.reason else "")
    if not job.terminal:
        note = f"; {len(failed)} task(s) failed" if failed else ""
        return job.phase, job.reason + note
    if job.phase is Phase.CANCELLED:
        where = f" {stopped}" if stopped else ""
        return Phase.CANCELLED, f"{job.reason}{where}; {RESUME_HINT}"
    if failed:
        first = failed[0]
        return Phase.FAILED, f"{len(failed)}/{len(tasks)} task(s) failed: {first.key}: " \
                             f"{first.reason}"
    if (model_dir / "interrupted").exists():
        return Phase.FAILED, f"{job.reason}: stopped before the walltime; {RESUME_HINT}"
    if job.phase is Phase.DONE:
        return Phase.FAILED, "the job ended but tasks are unfinished"
    if job.raw_state.startswith(_SCHEDULER_ENDS):
        return job.phase, f"{job.reason}; {RESUME_HINT}"
    return job.phase, job.reason


def combine_models(models: list[ModelState]) -> tuple[Phase, str]:
    if not models:
        return Phase.UNKNOWN, "no models"
    counts: dict[Phase, int] = {}
    for m in models:
        counts[m.phase] = counts.get(m.phase, 0) + 1
    summary = ", ".join(f"{n} {p.value}" for p, n in counts.items()) if len(models) > 1 else ""
    for phase in (Phase.RUNNING, Phase.RESUMING, Phase.QUEUED, Phase.UNKNOWN, Phase.FAILED,
                  Phase.CANCELLED):
        if phase in counts:
            reason = summary or models[0].reason
            return phase, reason
    return Phase.DONE, summary


def job_failure(model_dir: Path, since: float) -> str:
    """The job-level cause the newest job recorded; a record older than it is an earlier job's."""
    path = model_dir / JOB_FAILURE_FILE
    try:
        if path.stat().st_mtime < since:
            return ""
        return " ".join(path.read_text(encoding="utf-8", errors="replace").split())
    except OSError:
        return ""


def _all_done(run_dir: Path, model: dict[str, Any]) -> bool:
    base = run_dir / "models" / model["key"] / "tasks"
    return bool(model["tasks"]) and all(is_done(base / t["key"]) for t in model["tasks"])


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return float("-inf")


def _failure(path: Path) -> str:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "failed (failed.json unreadable)"
    return str(data.get("reason") or data.get("stage") or "failed")


def _dt(ts: float) -> Any:
    from datetime import datetime

    return datetime.fromtimestamp(ts).astimezone()


def _cache_key(entry: JobEntry, index: int) -> str:
    # The submit time tells two jobs apart that got the same id (ids restart after a wipe).
    return f"{entry.watch_id(index)}@{int(entry.submitted_at)}"


def _load_cache() -> dict[str, list[str]]:
    try:
        data = json.loads((cache_dir() / STATES_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save_cache(cache: dict[str, list[str]]) -> None:
    # Only a cache: if it cannot be written, status still works and asks sacct next time.
    with contextlib.suppress(OSError):
        atomic_write_json(cache_dir() / STATES_FILE, cache)
