"""kill and resume: act on every job of a run, through the chain in jobs.json."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path

from hpceval.backends import (
    Backend,
    CancelReport,
    JobEntry,
    JobQuery,
    JobRequest,
    SchedulerClient,
    backend_for,
)
from hpceval.contract import (
    AGGREGATE_SCRIPT,
    AUX_ENDPOINT_FILE,
    AUX_STOP_FILE,
    AUX_TOKEN_FILE,
    EXPORT_SCRIPT,
    JOB_FAILURE_FILE,
    PULL_SCRIPT,
    aux_folder,
    element_script,
)
from hpceval.errors import HpcevalError
from hpceval.images import usable_image_file
from hpceval.records import ModelRecord, Reason, RunFileError, RunRecord, read_run
from hpceval.runs.index import RunRef
from hpceval.runs.jobs import Jobs, cancel_marker, read_jobs
from hpceval.runs.rundir import changed_scripts, run_umask
from hpceval.runs.state import Tracker, all_done
from hpceval.runs.submit import submit_jobs

RESUME_LOCK = ".resume.lock"


class ResumeRefused(HpcevalError, RuntimeError):
    """The run still has live jobs, or nothing is left to do."""


KillReport = CancelReport


class KillRefused(HpcevalError, PermissionError):
    """The run directory is not this user's: its jobs.json may name anyone's jobs."""


def kill_run(ref: RunRef, client: SchedulerClient | None = None, *, verify_s: float = 30.0,
             sleep: Callable[[float], None] = time.sleep) -> KillReport:
    """Cancel every job in the chain (array, successors, aggregation), then verify."""
    from hpceval.trust import dir_problem

    if (why := dir_problem(ref.run_dir)) is not None:  # its jobs.json could name any job of ours
        raise KillRefused(f"{ref.invocation_id}: {ref.run_dir} is not a directory of yours (it "
                          f"{why}); only the user who submitted a run can kill it")
    jobs = read_jobs(ref.run_dir)
    if not jobs.chain:
        return KillReport([], [], {})
    backend = backend_for(jobs.kind, client=client)
    try:
        tagged = read_run(ref.run_dir).jobs_tagged
    except RunFileError:
        tagged = True  # nothing says its jobs predate the tag: the strict check
    return backend.cancel(ref.run_dir, jobs.chain,
                          mark=cancel_marker(ref.run_dir), verify_s=verify_s,
                          sleep=sleep, run_id=ref.invocation_id if tagged else None)


def unfinished_models(run_dir: Path) -> list[ModelRecord]:
    run = read_run(run_dir)
    return [m for m in run.models if not all_done(run_dir, m)]


def resume_run(ref: RunRef, client: SchedulerClient | None = None, *, aggregate: bool = True,
               force: bool = False, tracker: Tracker | None = None) -> list[JobEntry]:
    """Resubmit the unfinished models with the same scripts; append the jobs to the chain.

    Done tasks are skipped by the job script itself and the response cache replays the
    requests an interrupted task had already sent, so nothing finished is redone. A filelock
    in the run directory serialises resumes: two users resuming one run at once get one job;
    the second sees it live and is refused ("already resumed as job N").
    """
    from filelock import FileLock, Timeout

    from hpceval.trust import dir_problem

    if (why := dir_problem(ref.run_dir)) is not None:  # its lock, jobs.json, scripts: not ours
        raise ResumeRefused(f"{ref.invocation_id}: {ref.run_dir} is not a directory of yours (it "
                            f"{why}); only the user who submitted a run can resume it")
    try:
        with run_umask(read_run(ref.run_dir).umask), \
                FileLock(str(ref.run_dir / RESUME_LOCK), timeout=120):
            return _resume_locked(ref, client, aggregate=aggregate, force=force,
                                  tracker=tracker)
    except Timeout as exc:
        raise ResumeRefused(f"{ref.invocation_id}: another `hpceval resume` of this run has "
                            "held its lock for 2 minutes; check `hpceval status`") from exc


def _resume_locked(ref: RunRef, client: SchedulerClient | None, *, aggregate: bool, force: bool,
                   tracker: Tracker | None) -> list[JobEntry]:
    run = read_run(ref.run_dir)
    todo = unfinished_models(ref.run_dir)
    if not todo:
        raise ResumeRefused(f"{ref.invocation_id}: every task is done; nothing to resume")
    jobs = read_jobs(ref.run_dir)
    if not force:
        states = tracker or Tracker(client)
        states.add(ref)
        (state,) = states.refresh(force=True)
        live = [m for m in state.models if not m.phase.terminal]
        resumed = [(m, e) for m in live
                   if (e := jobs.current(m.index)) and e.reason == Reason.RESUME]
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
    indices = tuple(sorted(m.index for m in todo))
    sweep = run.sweep
    main = JobRequest(run.entry, indices, tuple(m.key for m in todo),
                      sweep=sweep, elements=indices if sweep else None,
                      max_parallel=run.array_parallelism, reason=Reason.RESUME)
    with_aggregate = sweep and aggregate and (ref.run_dir / AGGREGATE_SCRIPT).is_file()
    # run.json's kind, not jobs.json's: a run whose first submission failed has no chain yet
    backend = backend_for(run.kind or jobs.kind, client=client)
    with_export = (ref.run_dir / EXPORT_SCRIPT).is_file()  # written only where it is a job
    judges = [(a.name, a.script) for a in run.auxiliary]
    running, stale = _resume_judges(ref.run_dir, backend, jobs, judges)
    main = dataclasses.replace(main, started_after=running)
    # the aggregation job ends the judge: it comes with one whatever --no-aggregate says
    with_aggregate = with_aggregate or (sweep and bool(judges)
                                        and (ref.run_dir / AGGREGATE_SCRIPT).is_file())
    return submit_jobs(ref.run_dir, backend, main, AGGREGATE_SCRIPT if with_aggregate else None,
                       EXPORT_SCRIPT if with_export else None, judges=stale,
                       pull=PULL_SCRIPT if _pull_again(ref, run) else None)


def _missing_images(run_dir: Path, run: RunRecord) -> list[str]:
    """The images the run's pull job writes that are not there (its pull failed, or someone
    removed them): the resumed jobs then wait for that job again. Seen from the login node, on
    the shared storage the jobs read; "there" is the rule that staging and the preflight use
    (hpceval.images.usable_image_file)."""
    if not (run_dir / PULL_SCRIPT).is_file():
        return []
    return [image for image in run.pulled_images if not usable_image_file(image)]


def _pull_again(ref: RunRef, run: RunRecord) -> bool:
    """Whether resume submits the pull job again (an image is missing), refused where that
    would pull into the user's home: submit's rule (home_pull_problem), asked of the run
    directory, for a run submitted under another $HOME or before submit checked it."""
    from hpceval.staging.preflight import home_pull_problem

    missing = _missing_images(ref.run_dir, run)
    problem = home_pull_problem(ref.run_dir, [Path(image).name for image in missing])
    if problem is not None:
        raise ResumeRefused(f"{ref.invocation_id}: not resubmitting: {problem}. Put each image "
                            "there yourself (pull it on the login node with `hpceval stage` "
                            "into an execution.image_dir on scratch, then link it in place: a "
                            "symlink to the file counts), or submit the config again with "
                            "execution.output_dir on scratch")
    return bool(missing)


def _resume_judges(run_dir: Path, backend: Backend, jobs: Jobs,
                   judges: list[tuple[str, str]]) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    """A resumed element needs the sweep's judge again: (ids of judge jobs still serving, which
    the resumed array starts after; (name, script) of the judges to submit again).

    A judge is still serving when its newest job is queued or running and its stop file is
    absent. Otherwise its stale files go (endpoint.json names servers that are gone, token and
    job-failure are an earlier job's, which the models' jobs would trust, and the stop file
    would end the new job at once); a judge job that is still live although its stop
    file exists is ending, and is cancelled first, so that removing the file cannot keep it."""
    running: list[str] = []
    stale: list[tuple[str, str]] = []
    for name, script in judges:
        folder = run_dir / aux_folder(name)
        stop = (folder / AUX_STOP_FILE).exists()
        entry = jobs.judge(name)
        live = False
        if entry is not None:
            query = JobQuery(entry, run_dir, aux_folder(name), 0)
            (state,) = backend.states([query], force=True)
            live = not state.terminal
        if live and not stop and entry is not None:
            running.append(entry.id)
            continue
        if live and entry is not None:
            backend.cancel(run_dir, [entry], mark=cancel_marker(run_dir),
                           verify_s=30.0, sleep=time.sleep)
        # the models' jobs trust these files: none may be an earlier judge job's
        for leftover in (AUX_ENDPOINT_FILE, AUX_TOKEN_FILE, JOB_FAILURE_FILE, AUX_STOP_FILE):
            (folder / leftover).unlink(missing_ok=True)
        stale.append((name, script))
    return tuple(running), stale


def _check_passed_env(ref: RunRef, run: RunRecord, todo: list[ModelRecord]) -> None:
    """Refuse before submitting when a variable the scripts read by name is unset here.

    submit checked them in the submitting shell; a resume may come from another one, and the
    scheduler passes this shell's environment on to the job, which would otherwise queue, load
    the model and only then stop at ``${NAME:?...}``.
    """
    from hpceval.render.quoting import passed_env_names

    scripts = ([ref.run_dir / element_script(m.key) for m in todo]
               if run.sweep else [ref.run_dir / run.entry])
    names = {n for script in scripts if script.is_file()
             for n in passed_env_names(script.read_text(encoding="utf-8"))}
    missing = sorted(n for n in names if n not in os.environ)
    if missing:
        exports = " ".join(f"{n}=..." for n in missing)
        raise ResumeRefused(f"{ref.invocation_id}: the job reads "
                            f"{', '.join('$' + n for n in missing)} by name and this shell does "
                            f"not set it; `export {exports}` and resume again (the job gets this "
                            "shell's environment; values are never stored)")
