"""Submit: write the run directory, hand the entry script to the run's backend, record the jobs.

One submission per run: a single model is one job, a sweep is one array job (or as few as the
scheduler allows: Slurm's MaxArraySize bounds an array's indices). A sweep on a backend that
runs aggregation as a job of its own (Slurm) adds one dependent CPU job that writes the results
table once every array has ended. A sweep's judge (an auxiliary deployment with scope: sweep)
is one job submitted before them; the arrays start once it has started (--dependency=after), and
the aggregation job, which always comes with a judge, ends it. Where the backend pulls images
ahead (Slurm), a CPU job that pulls the run's unstaged images (servers', harnesses') comes
first of all, and every job that holds GPUs waits for it to end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hpceval.backends import Backend, JobEntry, JobRequest, SchedulerClient, backend_for
from hpceval.config import ResolvedConfig
from hpceval.contract import AGGREGATE_SCRIPT, EXPORT_SCRIPT, PULL_SCRIPT
from hpceval.errors import ConfigError, HpcevalError
from hpceval.records import Role
from hpceval.runs.jobs import append_jobs, cancel_marker
from hpceval.runs.registry import check_writable, register_run
from hpceval.runs.rundir import PreparedRun, prepare_run, run_umask, write_run

_ID_ATTEMPTS = 5


@dataclass(frozen=True)
class Submitted:
    invocation_id: str
    run_dir: Path
    job_ids: tuple[str, ...]  # main job first, then aggregation / export / judge jobs if any
    kind: str
    models: tuple[str, ...]
    what: str = ""  # how the backend names the main job ("array job 12 (4 models)")
    roles: tuple[str, ...] = ()  # each job id's role (main, aggregate, export, judge <name>)


def create_run(configs: ResolvedConfig | Sequence[ResolvedConfig], *,
               python: str | None = None, aggregate: bool = True,
               client: SchedulerClient | None = None) -> PreparedRun:
    """Prepare and write a new run directory; a clashing invocation id gets a fresh one.

    Preflight runs first: a missing image, checkpoint, staged data or secret stops the run
    before anything is written or queued (ConfigError, exit 2, with the command that fixes it),
    and so does a scheduler that would refuse one of its jobs after queueing the others (its
    limit on a user's queued jobs: Backend.submit_issues, for the jobs submit_prepared
    submits with ``aggregate``, asked through ``client`` as submit_prepared will submit).
    """
    from hpceval.staging.preflight import check_preflight

    check_preflight(configs)
    first = configs if isinstance(configs, ResolvedConfig) else configs[0]
    with run_umask(first.spec.execution.umask):
        for attempt in range(_ID_ATTEMPTS):
            run = prepare_run(configs, python=python)
            if attempt == 0 and (issues := backend_for(run.kind, client=client).submit_issues(
                    run.resolved.spec.execution, planned_jobs(run, aggregate=aggregate))):
                raise ConfigError(issues)
            check_writable(run.run_dir.parent)  # before anything is written or submitted
            try:
                write_run(run)
            except FileExistsError:
                continue
            return run
    raise RuntimeError(f"could not create a new run directory in {run.run_dir.parent} after "
                       f"{_ID_ATTEMPTS} tries")


def planned_jobs(run: PreparedRun, *, aggregate: bool) -> list[Role]:
    """The role of each job submit_prepared submits for ``run``, one per job the scheduler
    counts (a sweep's models: one array element each, Role.MAIN)."""
    return [*([Role.PULL] if run.pull is not None else []), *(Role.JUDGE for _ in run.judges),
            *(Role.MAIN for _ in run.models),
            *([Role.AGGREGATE] if _with_aggregate(run, aggregate) else []),
            *([Role.EXPORT] if run.export is not None else [])]


def _with_aggregate(run: PreparedRun, aggregate: bool) -> bool:
    # A judge job is ended by the aggregation job's stop file: with a judge it always comes.
    return run.aggregate is not None and (aggregate or bool(run.judges))


def submit_prepared(run: PreparedRun, client: SchedulerClient | None = None, *,
                    aggregate: bool = True, written: bool = False) -> Submitted:
    """Submit a prepared run (writing its directory first unless `written`)."""
    with run_umask(run.resolved.spec.execution.umask):
        return _submit_prepared(run, client, aggregate=aggregate, written=written)


def _submit_prepared(run: PreparedRun, client: SchedulerClient | None, *, aggregate: bool,
                     written: bool) -> Submitted:
    check_writable(run.run_dir.parent)  # before submitting: never a job without a registry entry
    if not written:
        write_run(run)
    backend = backend_for(run.kind, client=client)
    main = JobRequest(run.entry, tuple(m.index for m in run.models), sweep=run.sweep,
                      max_parallel=run.resolved.spec.execution.array_parallelism)
    entries = submit_jobs(run.run_dir, backend, main,
                          AGGREGATE_SCRIPT if _with_aggregate(run, aggregate) else None,
                          EXPORT_SCRIPT if run.export is not None else None,
                          judges=tuple(run.judges.items()),
                          pull=PULL_SCRIPT if run.pull is not None else None)
    mains = [e for e in entries if e.role == Role.MAIN]
    result = Submitted(run.invocation_id, run.run_dir, tuple(e.id for e in entries), run.kind,
                       tuple(m.key for m in run.models),
                       "; ".join(backend.describe(e, len(e.models)) for e in mains),
                       tuple(f"judge {e.aux}" if e.aux else e.role for e in entries))
    _register(run, result)
    return result


def submit_jobs(run_dir: Path, backend: Backend, main: JobRequest,
                aggregate: str | None = None, export: str | None = None, *,
                judges: Sequence[tuple[str, str]] = (), pull: str | None = None
                ) -> list[JobEntry]:
    """Submit a run's pull job (if `pull` names its script), its judge jobs (`judges`:
    (name, script)) and its main job, which start once the pull job has ended (the main job
    once the judges have started too), then (if `aggregate` / `export` name a script) the
    aggregation and export jobs that wait for the main job (for all of its jobs: a sweep may
    be several arrays); each entry goes into jobs.json as soon as it exists (the main
    entries first in the returned list). Submit and resume both come here.

    All or none: when the scheduler refuses one of them, those it queued before are cancelled
    (and marked so in jobs.json) and SubmitWithdrawn names them, so no part of the run runs
    without the rest (a sweep without its aggregation, a judge serving no array)."""
    queued: list[JobEntry] = []

    def submit(request: JobRequest) -> list[JobEntry]:
        # recorded at once: if a later submission fails, they are known (and cancelled)
        entries = backend.submit(run_dir, request)
        append_jobs(run_dir, backend.name, entries)
        queued.extend(entries)
        return entries

    try:
        return _submit_in_order(submit, main, aggregate, export, judges, pull)
    except HpcevalError as exc:
        if not queued:
            raise
        _withdraw(run_dir, backend, queued)
        raise SubmitWithdrawn(f"{exc}; the {len(queued)} job(s) of the run queued before it "
                              f"were cancelled ({', '.join(e.id for e in queued)}), so none "
                              "of it runs") from exc


def _submit_in_order(submit: Callable[[JobRequest], list[JobEntry]], main: JobRequest,
                     aggregate: str | None, export: str | None,
                     judges: Sequence[tuple[str, str]], pull: str | None) -> list[JobEntry]:
    pulled: list[JobEntry] = []
    if pull is not None:
        pulled = submit(JobRequest(pull, role=Role.PULL, reason=main.reason))
        main = dataclasses.replace(main, after=(*main.after, *(e.id for e in pulled)))
    judged: list[JobEntry] = []
    for name, script in judges:
        judged += submit(JobRequest(script, role=Role.JUDGE, after=tuple(e.id for e in pulled),
                                    reason=main.reason, aux=name))
    if judged:
        main = dataclasses.replace(
            main, started_after=(*main.started_after, *(j.id for j in judged)))
    entries = submit(main)
    after = tuple(e.id for e in entries)
    for dependent, role in ((aggregate, Role.AGGREGATE), (export, Role.EXPORT)):
        if dependent is not None:
            entries += submit(JobRequest(dependent, after=after, role=role, reason=main.reason))
    return [*entries, *judged, *pulled]


class SubmitWithdrawn(HpcevalError):
    """The scheduler refused one of a run's jobs after queueing others, which were cancelled."""


def _withdraw(run_dir: Path, backend: Backend, entries: Sequence[JobEntry]) -> None:
    with contextlib.suppress(HpcevalError):  # the refusal is the error to report
        backend.cancel(run_dir, entries, mark=cancel_marker(run_dir), verify_s=10.0,
                       sleep=time.sleep)


def submit_configs(configs: ResolvedConfig | Sequence[ResolvedConfig],
                   client: SchedulerClient | None = None, *, aggregate: bool = True,
                   python: str | None = None) -> Submitted:
    run = create_run(configs, python=python, aggregate=aggregate, client=client)
    return submit_prepared(run, client, aggregate=aggregate, written=True)


def _register(run: PreparedRun, result: Submitted) -> None:
    from hpceval.runs.index import remember_output_dir
    from hpceval.runs.rundir import current_user

    output_dir = run.run_dir.parent
    register_run(output_dir, {
        "invocation_id": run.invocation_id, "run_dir": str(run.run_dir), "kind": run.kind,
        "models": list(result.models), "sweep": run.sweep, "jobs": list(result.job_ids),
        "user": current_user(), "submitted_at": time.time()})
    # A read-only home must not turn a submitted run into an error.
    with contextlib.suppress(OSError):
        remember_output_dir(output_dir)
