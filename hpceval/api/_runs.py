"""The run verbs: plan, render, preflight, submit, status, info, logs, kill, resume."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from hpceval.api._load import ConfigSource, RunSource, find, find_watch, load
from hpceval.contract import CONFIG_FILE, model_dir, task_dir
from hpceval.errors import ConfigError, ConfigIssue, HpcevalError
from hpceval.records import RunRecord, read_run

if TYPE_CHECKING:
    from hpceval.backends import CancelReport, JobEntry, SchedulerClient
    from hpceval.results.ledger import JobLedger
    from hpceval.results.runtime_view import Runtime
    from hpceval.results.server_load import ServerLoad
    from hpceval.runs.index import RunRef
    from hpceval.runs.jobs import Jobs
    from hpceval.runs.rundir import PreparedRun
    from hpceval.runs.submit import Submitted


class SubmitFailed(HpcevalError):
    """The run directory was written but its submission failed: it is kept to look at."""


def plan(config: ConfigSource, overrides: Sequence[str] = (), *,
         profile: str | None = None) -> PreparedRun:
    """The run submit would create: its run directory, invocation id and scripts (nothing
    written; secrets are checked by name at submit time only)."""
    from hpceval.runs.rundir import prepare_run

    return prepare_run(load(config, overrides, profile=profile, check_environment=False))


def render(config: ConfigSource, overrides: Sequence[str] = (), *,
           profile: str | None = None) -> dict[str, str]:
    """The scripts submit would write, by path inside the run directory (nothing written)."""
    return plan(config, overrides, profile=profile).scripts


@dataclass(frozen=True)
class Preflight:
    """The login node's checks before a submission: what would refuse it, and what works but
    costs every job (a docker:// image pulled at run time)."""

    issues: tuple[ConfigIssue, ...]  # submit refuses these (ConfigError, exit 2)
    notes: tuple[ConfigIssue, ...]


def preflight(config: ConfigSource, overrides: Sequence[str] = (), *,
              profile: str | None = None, notes_only: bool = False) -> Preflight:
    """Images, checkpoints, staged data and secrets checked as submit checks them (submit
    runs this itself and refuses on an issue); ``notes_only`` skips the refusing checks."""
    from hpceval.staging.preflight import preflight_all, preflight_notes

    configs = load(config, overrides, profile=profile)
    return Preflight(() if notes_only else tuple(preflight_all(configs)),
                     tuple(preflight_notes(configs)))


def submit(config: ConfigSource, overrides: Sequence[str] = (), *, profile: str | None = None,
           aggregate: bool = True, client: SchedulerClient | None = None) -> Submitted:
    """Validate, write the run directory and submit (one submission; a sweep is one array job).

    Returns ``hpceval.runs.submit.Submitted`` (invocation_id, run_dir, job_ids, roles, kind,
    models, what: how the backend names the main job). execution.type local starts the same
    job on this machine in the background. Raises ConfigError before anything is written;
    SubmitFailed (naming the run directory, which is kept) if the backend refused the job."""
    from hpceval.runs.submit import create_run, submit_prepared

    run = create_run(load(config, overrides, profile=profile), aggregate=aggregate,
                     client=client)
    try:
        return submit_prepared(run, client, aggregate=aggregate, written=True)
    except ConfigError:
        raise
    except HpcevalError as exc:  # whatever the backend: the run directory is worth a look
        raise SubmitFailed(f"submission failed: {exc} (run directory kept for inspection: "
                           f"{run.run_dir})") from exc


def status(runs: Sequence[RunSource] | None = None, *, limit: int = 5,
           output_dirs: Iterable[str | Path] = (),
           client: SchedulerClient | None = None) -> list[dict[str, Any]]:
    """States of runs (ids, prefixes or run dirs; default: the newest `limit`), as the dicts
    of ``hpceval status --json`` (without cost and flags). One scheduler call whatever the number
    of runs and jobs."""
    from hpceval.runs.display import state_to_dict
    from hpceval.runs.index import list_runs
    from hpceval.runs.state import Tracker

    dirs = list(output_dirs)
    refs = ([find(r, dirs) for r in runs] if runs
            else list_runs([Path(d) for d in dirs])[:limit])
    tracker = Tracker(client)
    for ref in refs:
        tracker.add(ref)
    return [state_to_dict(s) for s in tracker.refresh(force=True)] if refs else []


@dataclass(frozen=True)
class RunInfo:
    """What `hpceval info` shows: paths, the job chain, the scripts, the run record, what
    the server did for each task and how loaded each model's servers were."""

    ref: RunRef
    run: RunRecord  # run.json as written at submit (its ``data``: the file as read)
    jobs: Jobs  # the whole chain, successors and cancelled ones included
    scripts: tuple[Path, ...]  # the entry script first, then each model's own
    config: Path  # the resolved run.yaml
    loads: dict[str, tuple[tuple[str, int], ...]]  # model key -> (job, s to healthy) each
    # model key -> (task key, what the in-job proxy counted for it: its runtime.json) each
    runtime: dict[str, tuple[tuple[str, Runtime], ...]] = field(default_factory=dict)
    # model key -> its servers' load sampled from /metrics (server-load.json); then each judge
    # with one: "auxiliary/<name>" (a sweep's judge job), "<model key>/auxiliary/<name>" (a
    # judge served in the model's job)
    server_load: dict[str, ServerLoad] = field(default_factory=dict)
    # model key -> (where each job's allocation went: results.ledger, why unreadable or None)
    ledger: dict[str, tuple[list[JobLedger], str | None]] = field(default_factory=dict)
    # "auxiliary/<name>" -> the same, for a sweep's judge in its own job (each job with how
    # long its GPUs waited for the first model's job: results.ledger_view.judge_ledgers)
    judge_ledger: dict[str, tuple[list[JobLedger], str | None]] = field(default_factory=dict)


def info(run: RunSource, *, output_dirs: Iterable[str | Path] = ()) -> RunInfo:
    """Paths, job ids (the whole chain), scripts, load times, each task's runtime statistics
    each model's server load and each job's time ledger of a run, a sweep judge's jobs
    included (no Slurm call)."""
    from hpceval.results.ledger import read_ledger
    from hpceval.results.ledger_view import judge_ledgers, submitted_of
    from hpceval.results.runtime_view import load_runtime
    from hpceval.results.server_load import load_server_load
    from hpceval.runs.jobs import read_jobs
    from hpceval.runs.state import read_loads

    ref = find(run, output_dirs)
    manifest, jobs = read_run(ref.run_dir), read_jobs(ref.run_dir)
    names = [manifest.entry, *(m.script for m in manifest.models if m.script != manifest.entry)]
    run_dir = str(ref.run_dir)
    ledger = {m.key: read_ledger(model_dir(ref.run_dir, m.key),
                                 submitted=submitted_of(jobs, m.index))
              for m in manifest.models}
    return RunInfo(ref, manifest, jobs, tuple(ref.run_dir / n for n in names),
                   ref.run_dir / CONFIG_FILE,
                   {m.key: read_loads(model_dir(ref.run_dir, m.key)) for m in manifest.models},
                   {m.key: tuple((t.key, load_runtime(task_dir(run_dir, m.key, t.key)))
                                 for t in m.tasks) for m in manifest.models},
                   {**{m.key: load_server_load(model_dir(run_dir, m.key))
                       for m in manifest.models}, **_judge_loads(ref.run_dir, manifest)},
                   ledger, judge_ledgers(ref.run_dir, manifest.judge_names, jobs,
                                         ledger.values()))


JUDGES_LISTED = 16  # in-job judges per model whose load is read (a model has one or two)


def _judge_loads(run_dir: Path, manifest: RunRecord) -> dict[str, ServerLoad]:
    """Each judge's server-load.json that exists (its proxy samples its servers too)."""
    from hpceval.contract import aux_dir, aux_folder
    from hpceval.results.server_load import judges_served_in, load_server_load

    found = {aux_folder(name): str(aux_dir(run_dir, name)) for name in manifest.judge_names}
    for m in manifest.models:
        found.update({f"{m.key}/{aux_folder(name)}": folder for name, folder in
                      judges_served_in(model_dir(str(run_dir), m.key), JUDGES_LISTED)})
    loads = {label: load_server_load(path) for label, path in found.items()}
    return {label: load for label, load in loads.items() if not load.missing}


@dataclass(frozen=True)
class RunLogs:
    """The log files of a selection: (label, path) each; a path may not exist yet."""

    ref: RunRef
    files: tuple[tuple[str, Path], ...]


def logs(run: RunSource, *, model: str | None = None, task: str | None = None,
         server: bool = False, output_dirs: Iterable[str | Path] = ()) -> RunLogs:
    """Job logs (the newest job of each model), or with ``task`` a harness log, or with
    ``server`` the server and proxy logs. LogSelectionError for a model or task it lacks."""
    from hpceval.runs.jobs import read_jobs
    from hpceval.runs.logs import log_files

    ref = find(run, output_dirs)
    files = log_files(ref.run_dir, read_run(ref.run_dir), read_jobs(ref.run_dir),
                      model=model, task=task, server=server)
    return RunLogs(ref, tuple(files))


def print_logs(selected: RunLogs, *, tail: int | None = None, out: IO[str] | None = None,
               follow: bool = False, client: SchedulerClient | None = None) -> None:
    """Print the logs (the last ``tail`` lines of each); ``follow``: keep printing until the
    run ends (at most one scheduler query per 5 s; Ctrl-C stops following, not an error)."""
    import sys

    from hpceval.runs.logs import follow as follow_logs
    from hpceval.runs.logs import print_logs as print_files
    from hpceval.runs.state import Tracker

    stream = out if out is not None else sys.stdout
    if not follow:
        print_files(selected.files, out=stream, tail=tail)
        return
    tracker = Tracker(client, min_interval_s=5.0)
    tracker.add(selected.ref)

    def ended() -> bool:
        (state,) = tracker.refresh()
        return bool(state.phase.terminal)

    with contextlib.suppress(KeyboardInterrupt):
        follow_logs(selected.files, ended, out=stream)


def kill(run: RunSource, *, output_dirs: Iterable[str | Path] = (),
         client: SchedulerClient | None = None, verify_s: float = 30.0) -> CancelReport:
    """Cancel every job of a run (array, successors, aggregation, judges), then verify.

    The report's ``still_active`` should be empty; ``skipped`` lists jobs of other users a
    planted jobs.json named (left alone). KillRefused for a run directory not yours."""
    from hpceval.runs.control import kill_run

    return kill_run(find(run, output_dirs), client, verify_s=verify_s)


@dataclass(frozen=True)
class WatchKill:
    """A stopped checkpoint watch: its cancelled tick jobs, and each evaluation's kill."""

    watch_dir: Path
    ticks: tuple[str, ...]
    runs: tuple[tuple[Path, CancelReport], ...]  # (run directory, its kill report)

    @property
    def still_active(self) -> list[str]:
        return [job for _, report in self.runs for job in report.still_active]


def kill_watch(watch: str | Path, *, output_dirs: Iterable[str | Path] = (),
               client: SchedulerClient | None = None) -> WatchKill:
    """Stop a checkpoint watch and cancel every evaluation it submitted."""
    from hpceval.runs.control import kill_run
    from hpceval.runs.index import ref_from_dir
    from hpceval.watch.control import stop_watch, submitted_points

    watch_dir = find_watch(watch, output_dirs)
    ticks = stop_watch(watch_dir, client)
    runs = [(run_dir, kill_run(ref_from_dir(run_dir), client))
            for _, run_dir in submitted_points(watch_dir)]
    return WatchKill(watch_dir, tuple(ticks), tuple(runs))


def resume(run: RunSource, *, force: bool = False, aggregate: bool = True,
           output_dirs: Iterable[str | Path] = (),
           client: SchedulerClient | None = None) -> list[JobEntry]:
    """Resubmit only the unfinished models of a run (done tasks are skipped in the job).

    Returns the new jobs (the main one first, then the aggregation job if any), also appended
    to jobs.json. ResumeRefused while jobs live (unless ``force``) or when nothing is left."""
    from hpceval.runs.control import resume_run

    return resume_run(find(run, output_dirs), client, force=force, aggregate=aggregate)
