"""What users mean by a run's state: Slurm's answer merged with what the job left on disk.

Markers beat the scheduler: a task with `done` is done whatever the scheduler says (it lags, or
forgot an old job); `failed.json` says why a task failed; the model's `job-failure` says why the
job itself failed (a server died, the results directory is not writable). The scheduler says the
rest: queued, running, resuming, or how the job ended. One `Tracker` serves any number of runs
through their execution backends (hpceval.backends), each asked once per refresh: on Slurm one
accounting call for every job, rate limited, and finished jobs remembered in the user's
cache so later `status` calls never ask about them again.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hpceval.backends import Backend, JobEntry, JobQuery, SchedulerClient, backend_for
from hpceval.contract import (
    AUX_ENDPOINT_FILE,
    AUX_STOP_FILE,
    COMMAND_FILE,
    FAILED_FILE,
    INTERRUPTED_FILE,
    JOB_FAILURE_FILE,
    LOADS_FILE,
    SERVER_DIR,
    TASKS_DIR,
    aux_folder,
    is_done,
    model_dir,
    task_dir,
)
from hpceval.durations import span
from hpceval.phases import JobStatus, Phase
from hpceval.records import ModelRecord, RunRecord, TaskRecord, read_run
from hpceval.runs.index import RunRef, ref_from_dir
from hpceval.runs.jobs import Jobs, read_jobs
from hpceval.runs.progress import Progress, read_progress

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
    progress: Progress | None = None  # the proxy's live counts while it runs
    loads: tuple[tuple[str, int], ...] = ()  # (job id, seconds to healthy) per allocation


@dataclass(frozen=True)
class JudgeState:
    """A sweep's judge job (an auxiliary deployment with scope: sweep)."""

    name: str
    phase: Phase
    reason: str
    job_id: str | None


@dataclass(frozen=True)
class RunState:
    ref: RunRef
    phase: Phase
    reason: str
    models: list[ModelState]
    jobs: Jobs
    run: RunRecord  # run.json
    judges: list[JudgeState] = field(default_factory=list)


__all__ = ["read_run"]  # the one reader of run.json (hpceval.records), as it was named here


class Tracker:
    """Tracks runs through their backends: ONE scheduler call per refresh (rate limited)."""

    def __init__(self, client: SchedulerClient | None = None, *, poller: object | None = None,
                 min_interval_s: float = 2.0) -> None:
        # passed on to every backend, which reads its own: a scheduler client (a fake in
        # tests), a shared status poller, the rate limit of the scheduler's calls
        self._client, self._poller, self._min_interval_s = client, poller, min_interval_s
        self._backends: dict[str, Backend] = {}
        self._runs: dict[Path, RunRef] = {}

    def backend(self, kind: str) -> Backend:
        """The backend of a run kind, made on first use (a local run never makes Slurm's)."""
        if kind not in self._backends:
            self._backends[kind] = backend_for(kind, client=self._client, poller=self._poller,
                                               min_interval_s=self._min_interval_s)
        return self._backends[kind]

    def add(self, ref: RunRef | Path) -> None:
        run_ref = ref if isinstance(ref, RunRef) else ref_from_dir(ref)
        self._runs[run_ref.run_dir] = run_ref

    def refresh(self, *, force: bool = False) -> list[RunState]:
        """Ask each backend once about every job of every run, and build every run's state."""
        loaded = [(ref, read_run(ref.run_dir), read_jobs(ref.run_dir))
                  for ref in self._runs.values()]
        queries: dict[str, list[JobQuery]] = {}
        for ref, run, jobs in loaded:
            for model in run.models:
                entry = jobs.current(model.index)
                if entry is not None:
                    queries.setdefault(entry.kind, []).append(JobQuery(
                        entry, ref.run_dir, model.key, model.index,
                        finished=all_done(ref.run_dir, model)))
            for name in run.judge_names:
                entry = jobs.judge(name)
                if entry is not None:  # asked in the same call as the models' jobs
                    queries.setdefault(entry.kind, []).append(
                        JobQuery(entry, ref.run_dir, aux_folder(name), 0))
        answers: dict[tuple[Path, str], JobStatus] = {}
        for kind, asked in queries.items():
            states = self.backend(kind).states(asked, force=force)
            answers.update({(q.run_dir, q.key): st
                            for q, st in zip(asked, states, strict=True)})
        return [self._run_state(ref, run, jobs, answers) for ref, run, jobs in loaded]

    # -- internals --------------------------------------------------------------------------

    def _run_state(self, ref: RunRef, run: RunRecord, jobs: Jobs,
                   answers: dict[tuple[Path, str], JobStatus]) -> RunState:
        models = [self._model_state(ref.run_dir, m, jobs, answers) for m in run.models]
        phase, reason = combine_models(models)
        queued = all(m.phase is Phase.QUEUED for m in models)
        judges = [judge_state(ref.run_dir, name, jobs.judge(name),
                              answers.get((ref.run_dir, aux_folder(name))), array_queued=queued)
                  for name in run.judge_names]
        return RunState(ref, phase, reason, models, jobs, run, judges)

    def _model_state(self, run_dir: Path, model: ModelRecord, jobs: Jobs,
                     answers: dict[tuple[Path, str], JobStatus]) -> ModelState:
        key, index = model.key, model.index
        folder = model_dir(run_dir, key)
        entry = jobs.current(index)
        attempts = len(jobs.main_for(index))
        job = answers.get((run_dir, key),
                          JobStatus(Phase.UNKNOWN, "no job recorded (submission failed?)"))
        tasks = task_states(folder, model.tasks, job)
        stopped = ""
        if entry is not None and job.phase is Phase.CANCELLED:
            log = self.backend(entry.kind).log_path(run_dir, key, index, entry)
            stopped = stop_point(log, folder, tasks, entry.submitted_at)
        phase, reason = model_phase(job, tasks, attempts, folder, stopped=stopped)
        cause = job_failure(folder, entry.submitted_at) if entry is not None else ""
        if phase is Phase.FAILED and cause:  # the likely cause first, then its effects
            reason = f"{cause}; {reason}" if reason else cause
        job_id = None if entry is None else entry.scheduler_id(index)
        progress = read_progress(folder) if phase is Phase.RUNNING else None
        return ModelState(key, index, phase, reason, job_id, attempts, tasks, progress,
                          read_loads(folder))


def judge_state(run_dir: Path, name: str, entry: JobEntry | None,
                job: JobStatus | None, *, array_queued: bool = False) -> JudgeState:
    """The judge job's phase, with what its folder says: serving (endpoint.json), stopped by
    the aggregation (stop), or why it failed (job-failure). Serving while every model's job
    is still queued (``array_queued``) says how long its GPUs have waited for them since it
    published its endpoint: the cost of starting the judge first (docs/judge-sweep.md)."""
    folder = run_dir / aux_folder(name)
    if entry is None or job is None:
        return JudgeState(name, Phase.UNKNOWN, "no judge job recorded (submission failed?)",
                          None)
    reason = job.reason
    if job.phase is Phase.RUNNING:
        try:
            with open(folder / AUX_ENDPOINT_FILE, encoding="utf-8") as handle:
                published = os.fstat(handle.fileno()).st_mtime
                urls = json.load(handle)["urls"]
            reason = f"serving {len(urls)} instance(s)"
            if array_queued:
                reason += ("; no model's job has left the queue yet: its GPUs have waited "
                           f"{span(max(0.0, time.time() - published))} for them")
        except (OSError, ValueError, KeyError, TypeError):
            reason = "loading (no endpoint.json yet)"
    elif job.phase is Phase.DONE and (folder / AUX_STOP_FILE).exists():
        reason = "stopped after the sweep"
    elif job.terminal:
        cause = job_failure(folder, entry.submitted_at)
        reason = f"{cause}; {reason}" if cause and reason else cause or reason
    return JudgeState(name, job.phase, reason, entry.id)


def task_states(folder: Path, tasks: Sequence[TaskRecord], job: JobStatus
                ) -> list[TaskState]:
    """Each task's state, from the markers in its folder under ``folder`` (models/<key>/)."""
    out: list[TaskState] = []
    for task in tasks:
        here = folder / TASKS_DIR / task.key
        failed = here / FAILED_FILE
        started = here / COMMAND_FILE
        if is_done(here):
            out.append(TaskState(task.key, task.task, Phase.DONE))
            continue
        retrying = (failed.is_file() and started.is_file()
                    and started.stat().st_mtime > failed.stat().st_mtime)
        if job.phase is Phase.RUNNING and started.is_file() and (retrying or not failed.is_file()):
            out.append(TaskState(task.key, task.task, Phase.RUNNING))
        elif failed.is_file():
            out.append(TaskState(task.key, task.task, Phase.FAILED, _failure(failed)))
        elif job.terminal:  # the job ended without finishing it (never "done": no marker)
            phase = Phase.CANCELLED if job.phase is Phase.CANCELLED else Phase.FAILED
            out.append(TaskState(task.key, task.task, phase,
                                 f"not finished (job {job.phase.value})"))
        else:
            out.append(TaskState(task.key, task.task, Phase.QUEUED))
    return out


def stop_point(log: Path | None, model_dir: Path, tasks: list[TaskState],
               since: float) -> str:
    """Where a cancelled job stood, from what it left on disk: a job writes its log once it
    starts (Slurm creates it; the local runner appends to it), and each task it started writes
    command.sh (a task started by an earlier job of the chain has an older one)."""
    if log is None or _mtime(log) < since - 1:
        return "while queued (it never started)"
    begun = [t for t in tasks if _mtime(model_dir / TASKS_DIR / t.key / COMMAND_FILE) >= since]
    # evaluation.overlap_load starts the tasks while the servers load: a job that launched
    # servers and recorded no load since it started stopped in the load, whatever had begun
    launched = any(_mtime(p) >= since for p in (model_dir / SERVER_DIR).glob("*.log"))
    loading = launched and _mtime(model_dir / LOADS_FILE) < since
    if not begun or loading:
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
    if (model_dir / INTERRUPTED_FILE).exists():
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


def read_loads(model_dir: Path) -> tuple[tuple[str, int], ...]:
    """The measured model loads, one per allocation whose servers became healthy (the job
    script appends "<job id> <seconds>"); malformed lines are skipped."""
    try:
        text = (model_dir / LOADS_FILE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ()
    loads = []
    for line in text.splitlines():
        job, _, seconds = line.partition(" ")
        if job and seconds.strip().isdigit():
            loads.append((job, int(seconds)))
    return tuple(loads)


def job_failure(model_dir: Path, since: float) -> str:
    """The job-level cause the newest job recorded; a record older than it is an earlier job's."""
    path = model_dir / JOB_FAILURE_FILE
    try:
        if path.stat().st_mtime < since:
            return ""
        return " ".join(path.read_text(encoding="utf-8", errors="replace").split())
    except OSError:
        return ""


def all_done(run_dir: Path, model: ModelRecord) -> bool:
    return bool(model.tasks) and all(is_done(task_dir(run_dir, model.key, t.key))
                                     for t in model.tasks)


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
