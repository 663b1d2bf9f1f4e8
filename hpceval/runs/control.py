"""kill and resume: act on every job of a run, through the chain in jobs.json."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpceval.runs.index import RunRef
from hpceval.runs.jobs import JobEntry, append_jobs, mark_cancelled, read_jobs
from hpceval.runs.rundir import AGGREGATE_SCRIPT, ELEMENT_SCRIPT, changed_scripts, run_umask
from hpceval.runs.state import Tracker, _all_done, read_run
from hpceval.slurm.client import CommandSlurmClient, SlurmClient

# squeue states of a job that still holds (or waits for) resources
_ACTIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED",
           "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED"}


RESUME_LOCK = ".resume.lock"


class ResumeRefused(RuntimeError):
    """The run still has live jobs, or nothing is left to do."""


@dataclass(frozen=True)
class KillReport:
    cancelled: list[str]  # job ids (or local runner ids) that were signalled
    still_active: list[str]  # what squeue (or /proc) still showed at the end: should be empty
    final: dict[str, str]  # job id -> state seen by the last check


def kill_run(ref: RunRef, client: SlurmClient | None = None, *, verify_s: float = 30.0,
             sleep: Callable[[float], None] = time.sleep) -> KillReport:
    """Cancel every job in the chain (array, successors, aggregation), then verify."""
    jobs = read_jobs(ref.run_dir)
    if jobs.kind == "local":
        from hpceval.runs.local import kill_local, local_alive

        live = [e for e in jobs.chain if local_alive(e)]
        mark_cancelled(ref.run_dir, [e.id for e in live])
        left = [e.id for e in live if not kill_local(e)]
        return KillReport([e.id for e in live], left, {e.id: "ended" for e in live})
    slurm = client or CommandSlurmClient()
    ids = jobs.ids
    if not ids:
        return KillReport([], [], {})
    mark_cancelled(ref.run_dir, ids)  # first: status reads "cancelled" even if we are stopped
    slurm.cancel(ids)  # base ids: scancel takes every task of an array with them
    deadline = time.monotonic() + verify_s
    while True:
        queue = slurm.squeue(ids)
        active = sorted(j for j, e in queue.items() if e.state in _ACTIVE)
        if not active or time.monotonic() >= deadline:
            break
        sleep(1.0)
    final = {j: e.state for j, e in queue.items()}
    if not active:
        # squeue forgets jobs after MinJobAge; sacct is the record that stays. One call.
        records = slurm.sacct(ids)
        final.update({j: r.state for j, r in records.items()})
        active = sorted(j for j, r in records.items() if r.state in _ACTIVE - {"COMPLETING"})
    return KillReport(ids, active, final)


def unfinished_models(run_dir: Path) -> list[dict[str, object]]:
    run = read_run(run_dir)
    return [m for m in run["models"] if not _all_done(run_dir, m)]


def resume_run(ref: RunRef, client: SlurmClient | None = None, *, aggregate: bool = True,
               force: bool = False, tracker: Tracker | None = None) -> list[JobEntry]:
    """Resubmit the unfinished models with the same scripts; append the jobs to the chain.

    Done tasks are skipped by the job script itself and the response cache replays the
    requests an interrupted task had already sent, so nothing finished is redone. A filelock
    in the run directory serialises resumes: two users resuming one run at once get one job;
    the second sees it live and is refused ("already resumed as job N").
    """
    from filelock import FileLock, Timeout

    from hpceval.runs.registry import owned_dir

    if not owned_dir(ref.run_dir):  # its lock, jobs.json and scripts are not ours to write
        raise ResumeRefused(f"{ref.invocation_id}: {ref.run_dir} is not a directory of yours; "
                            "only the user who submitted a run can resume it")
    try:
        with run_umask(read_run(ref.run_dir).get("umask")), \
                FileLock(str(ref.run_dir / RESUME_LOCK), timeout=120):
            return _resume_locked(ref, client, aggregate=aggregate, force=force,
                                  tracker=tracker)
    except Timeout as exc:
        raise ResumeRefused(f"{ref.invocation_id}: another `hpceval resume` of this run has "
                            "held its lock for 2 minutes; check `hpceval status`") from exc


def _resume_locked(ref: RunRef, client: SlurmClient | None, *, aggregate: bool, force: bool,
                   tracker: Tracker | None) -> list[JobEntry]:
    run = read_run(ref.run_dir)
    todo = unfinished_models(ref.run_dir)
    if not todo:
        raise ResumeRefused(f"{ref.invocation_id}: every task is done; nothing to resume")
    jobs = read_jobs(ref.run_dir)
    if not force:
        watch = tracker or Tracker(client)
        watch.add(ref)
        (state,) = watch.refresh(force=True)
        live = [m for m in state.models if not m.phase.terminal]
        resumed = [(m, e) for m in live if (e := jobs.current(m.index)) and e.reason == "resume"]
        if resumed:
            model, entry = resumed[0]
            raise ResumeRefused(f"{ref.invocation_id}: already resumed as job {entry.id} "
                                f"({model.phase.value}); follow it with `hpceval status "
                                f"{ref.invocation_id}`")
        if live:
            names = ", ".join(f"{m.key} ({m.phase.value})" for m in live)
            raise ResumeRefused(f"{ref.invocation_id} still has live work: {names}; wait, or "
                                "`hpceval kill` it first (--force resubmits anyway)")
    _check_passed_env(ref, run, todo)
    changed = changed_scripts(ref.run_dir, run)
    if changed:
        raise ResumeRefused(f"{ref.invocation_id}: not resubmitting: {'; '.join(changed)}; "
                            "submit the config again for a new run")
    indices = tuple(sorted(int(str(m["index"])) for m in todo))
    if jobs.kind == "local":
        from hpceval.runs.local import start_local

        entry = start_local(ref.run_dir, indices, [str(m["key"]) for m in todo], "resume")
        append_jobs(ref.run_dir, "local", [entry])
        return [entry]
    slurm = client or CommandSlurmClient()
    entries: list[JobEntry] = []
    submitted_at = time.time()
    if run.get("sweep"):
        spec = ",".join(map(str, indices))
        if run.get("array_parallelism"):
            spec += f"%{run['array_parallelism']}"
        # --array on the command line overrides the script's: the same dispatcher runs only
        # the unfinished elements, each keeping its index (so its model).
        job_id = slurm.submit(ref.run_dir / run["entry"], extra_args=[f"--array={spec}"])
    else:
        job_id = slurm.submit(ref.run_dir / run["entry"])
    entries.append(JobEntry(job_id, "slurm", "main", indices, bool(run.get("sweep")),
                            submitted_at, "resume"))
    append_jobs(ref.run_dir, "slurm", entries)
    if run.get("sweep") and aggregate and (ref.run_dir / AGGREGATE_SCRIPT).is_file():
        agg_at = time.time()
        agg_id = slurm.submit(ref.run_dir / AGGREGATE_SCRIPT, dependency=f"afterany:{job_id}")
        agg = JobEntry(agg_id, "slurm", "aggregate", (), False, agg_at, "resume")
        append_jobs(ref.run_dir, "slurm", [agg])
        entries.append(agg)
    return entries


def _check_passed_env(ref: RunRef, run: dict[str, Any], todo: list[dict[str, Any]]) -> None:
    """Refuse before submitting when a variable the scripts read by name is unset here.

    submit checked them in the submitting shell; a resume may come from another one, and sbatch
    passes this shell's environment to the job, which would otherwise queue, load the model and
    only then stop at ``${NAME:?...}``.
    """
    from hpceval.render.quoting import passed_env_names

    scripts = ([ref.run_dir / "models" / str(m["key"]) / ELEMENT_SCRIPT for m in todo]
               if run.get("sweep") else [ref.run_dir / run["entry"]])
    names = {n for script in scripts if script.is_file()
             for n in passed_env_names(script.read_text(encoding="utf-8"))}
    missing = sorted(n for n in names if n not in os.environ)
    if missing:
        exports = " ".join(f"{n}=..." for n in missing)
        raise ResumeRefused(f"{ref.invocation_id}: the job reads "
                            f"{', '.join('$' + n for n in missing)} by name and this shell does "
                            f"not set it; `export {exports}` and resume again (sbatch passes "
                            "this shell's environment; values are never stored)")
