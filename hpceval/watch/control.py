"""`hpceval watch start|stop|resume`, and finding a watch by id (the login node's side).

`start` validates the run exactly as `hpceval submit` would, with deployment.checkpoint_path
set to a sample checkpoint (an existing one, else a name the pattern would match), so a
config error is an exit-2 error at once and nothing is written or submitted. Then it writes
<output_dir>/watch-<id>/ (watch.json, state.json, tick.sbatch, logs/) and submits the first
tick through the run's backend.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from hpceval.backends import Backend, JobEntry, SchedulerClient, backend_for
from hpceval.config.errors import ConfigError, ConfigIssue
from hpceval.contract import WATCH_DIR_PREFIX, WATCH_FILE, WATCH_LOG_DIR, WATCH_SCRIPT
from hpceval.engines import engine_for
from hpceval.errors import HpcevalError
from hpceval.records import Reason, Role
from hpceval.storage import atomic_write_text
from hpceval.watch import state as st
from hpceval.watch.checkpoints import Checkpoint, list_checkpoints
from hpceval.watch.spec import (
    WatchError,
    WatchSpec,
    check_job_id,
    check_marker,
    check_step_regex,
    read_spec,
    write_spec,
)
from hpceval.watch.tick import checkpoint_overrides, queue_tick

CHECKPOINT_KEY = "deployment.checkpoint_path"


class WatchNotFound(HpcevalError, LookupError):
    pass


@dataclass(frozen=True)
class Started:
    watch_id: str
    watch_dir: Path
    script: str  # the tick script (what every tick runs)
    tick_job: str | None  # None: a dry run
    sample: Path  # the checkpoint path the run was validated with
    warnings: tuple[str, ...] = ()  # for the user's terminal (stderr), not errors


def start_watch(options: WatchSpec, *, client: SchedulerClient | None = None,
                dry_run: bool = False) -> Started:
    """Validate, write the watch directory, submit the first tick (now).

    `options` carries what the user chose; watch_id, kind, python, output_dir, created_at
    and user are filled in here."""
    from hpceval.config import load_run
    from hpceval.render.watch import render_tick
    from hpceval.runs.rundir import current_user, new_invocation_id, prepare_run, run_umask
    from hpceval.staging.preflight import preflight_all
    from hpceval.watch.trust import writable_by_others

    _check_options(options)
    folder = Path(options.checkpoints)
    # a warning, not a refusal: shared project folders are normal, and the owner rule
    # (hpceval.watch.trust) is what keeps others' folders out
    warnings = tuple(w for w in (writable_by_others(folder, options.trust_uids),) if w)
    listing = list_checkpoints(options)
    sample = (listing.checkpoints[0] if listing.checkpoints else
              Checkpoint(_sample_name(options.pattern), folder / _sample_name(options.pattern),
                         0))
    configs = load_run(Path(options.run_file), checkpoint_overrides(options, sample),
                       profile=options.profile)
    if len(configs) != 1:
        raise ConfigError.at("models", f"this run is a sweep of {len(configs)} models; a "
                             "watch evaluates one model per checkpoint",
                             "watch one model (drop models:), or start one watch per model")
    resolved = configs[0]
    ex = resolved.spec.execution
    if not engine_for(resolved.spec.deployment.type).serves:
        raise ConfigError.at("deployment.type", "none serves no checkpoint: every checkpoint "
                             "would evaluate the same external endpoint",
                             "deploy the checkpoint (vllm, sglang or command)")
    if not backend_for(ex.type).schedules_later:
        raise ConfigError.at("execution.type", f"{ex.type} cannot queue a job for later; a "
                             "watch's ticks are scheduler jobs", "use execution.type slurm")
    issues = [i for i in preflight_all(configs)
              if sample.path.is_dir() or i.path != CHECKPOINT_KEY]
    if issues:
        raise ConfigError(issues)
    prepare_run(configs)  # everything `submit` renders renders (pure: nothing written)
    if options.after_job:
        _check_training_job(backend_for(ex.type, client=client), options.after_job)
    watch_id = WATCH_DIR_PREFIX + new_invocation_id()
    watch_dir = Path(ex.output_dir) / watch_id
    spec = replace(options, watch_id=watch_id, kind=ex.type,
                   python=ex.python or sys.executable, output_dir=ex.output_dir,
                   created_at=time.time(), user=current_user())
    script = render_tick(resolved, watch_dir=str(watch_dir), watch_id=watch_id,
                         python=spec.python, checkpoints=spec.checkpoints,
                         interval_s=spec.interval_s)
    if dry_run:
        return Started(watch_id, watch_dir, script, None, sample.path, warnings)
    with run_umask(ex.umask):
        _write(watch_dir, spec, script)
        tick = _first_tick(watch_dir, spec, client)
    _remember(Path(ex.output_dir))
    return Started(watch_id, watch_dir, script, tick, sample.path, warnings)


def _check_options(options: WatchSpec) -> None:
    issues: list[ConfigIssue] = []
    for value, check in ((options.step_regex, check_step_regex), (options.marker, check_marker),
                         (options.after_job, check_job_id)):
        try:
            if value is not None:
                check(value)
        except ConfigError as exc:
            issues += exc.issues
    folder = Path(options.checkpoints)
    if not folder.is_absolute():
        issues.append(ConfigIssue("--checkpoints", f"{folder} is not an absolute path",
                                  "give the folder's absolute path on shared storage"))
    elif not folder.is_dir():
        issues.append(ConfigIssue("--checkpoints", f"{folder} is not a directory here",
                                  f"create it (mkdir -p {folder}) or fix the path; it must be "
                                  "on storage the login and compute nodes share"))
    if issues:
        raise ConfigError(issues)


def _sample_name(pattern: str) -> str:
    return "".join("0" if ch in "*?" else ch for ch in pattern if ch not in "[]")


def _check_training_job(backend: Backend, job_id: str) -> None:
    # the live queue too: a training job submitted a second ago is not in the accounting yet
    if job_id not in backend.query([job_id], queue=True):
        raise ConfigError.at("--after-job", f"the {backend.name} scheduler knows no job "
                             f"{job_id}", f"give the training job's id "
                             f"({backend.own_jobs_command}), or leave the option out and stop "
                             "the watch with `hpceval watch stop`")


def _write(watch_dir: Path, spec: WatchSpec, script: str) -> None:
    from hpceval.runs.registry import check_writable

    check_writable(watch_dir.parent)  # the evaluation runs register there
    (watch_dir / WATCH_LOG_DIR).mkdir(parents=True)  # Slurm does not create --output's folder
    atomic_write_text(watch_dir / WATCH_SCRIPT, script, mode=0o755)
    st.save_state(watch_dir, st.new_state())
    write_spec(watch_dir, spec)  # last: a folder with watch.json is a whole watch


def _first_tick(watch_dir: Path, spec: WatchSpec, client: SchedulerClient | None) -> str:
    with st.locked(watch_dir):
        state = st.load_state(watch_dir)
        try:
            return queue_tick(watch_dir, spec, state, client, time.time(), delay_s=0)
        except Exception:
            state.status, state.reason = st.STOPPED, "the first tick could not be submitted"
            raise
        finally:
            st.save_state(watch_dir, state)


def _remember(output_dir: Path) -> None:
    import contextlib

    from hpceval.runs.index import remember_output_dir

    with contextlib.suppress(OSError):  # a read-only home must not fail a started watch
        remember_output_dir(output_dir)


# -- finding a watch ------------------------------------------------------------------------

def is_watch_ref(ref: str) -> bool:
    """A watch id (or a prefix of one: they all start watch-), or a watch directory."""
    if ref.startswith(WATCH_DIR_PREFIX):
        return True
    try:
        return (Path(os.path.expanduser(ref)) / WATCH_FILE).is_file()
    except OSError:
        return False


def find_watch(ref: str, extra_dirs: Iterable[Path] = ()) -> Path:
    from hpceval.runs.index import known_output_dirs
    from hpceval.trust import owned_dir

    path = Path(os.path.expanduser(ref))
    if ref.strip() and (path / WATCH_FILE).is_file():
        return path.resolve()
    name = path.name
    if not name.startswith(WATCH_DIR_PREFIX) or name == WATCH_DIR_PREFIX:
        raise WatchNotFound(f"{ref!r} is not a watch id (watch-...) or a watch directory")
    dirs = known_output_dirs(extra_dirs)
    matches = sorted({p for d in dirs for p in _glob(d, name) if owned_dir(p)})
    if len(matches) == 1:
        return matches[0]
    if not matches:
        searched = ", ".join(str(d) for d in dirs) or "none yet"
        raise WatchNotFound(f"no watch {ref!r} (searched output dirs: {searched}; give the "
                            "watch directory, or pass --output-dir)")
    raise WatchNotFound(f"{ref!r} matches {len(matches)} watches "
                        f"({', '.join(p.name for p in matches[:8])}); give more of the id")


def list_watches(extra_dirs: Iterable[Path] = ()) -> list[Path]:
    """This user's watches in the known output directories, newest first (no Slurm call)."""
    from hpceval.runs.index import known_output_dirs
    from hpceval.trust import owned_dir

    found = {p for d in known_output_dirs(extra_dirs) for p in _glob(d, WATCH_DIR_PREFIX)
             if owned_dir(p)}
    return sorted(found, key=lambda p: p.name, reverse=True)  # ids start with the start time


def _glob(output_dir: Path, prefix: str) -> list[Path]:
    try:
        return [p for p in output_dir.iterdir()
                if p.name.startswith(prefix) and (p / WATCH_FILE).is_file()]
    except OSError:
        return []


# -- stop and resume ------------------------------------------------------------------------

def _tick_entries(state: st.WatchState) -> list[JobEntry]:
    """The newest tick: the one that may still be queued. Every earlier tick queued its
    successor under the lock before it ended, and a stop waits for that lock."""
    return [JobEntry(t.id, t.kind, Role.WATCH, (), False, t.submitted_at, Reason.TICK)
            for t in state.ticks[-1:]]


def stop_watch(watch_dir: Path, client: SchedulerClient | None = None, *,
               verify_s: float = 15.0) -> list[str]:
    """Mark the watch stopped (under the lock: no tick queues another after this), then
    cancel the queued tick. Evaluations already submitted go on. Returns cancelled ids."""
    spec = read_spec(watch_dir)
    with st.locked(watch_dir):
        state = st.load_state(watch_dir)
        if state.status == st.WATCHING:
            state.status = st.STOPPED
            state.reason = f"stopped by `hpceval watch stop` at {time.ctime()}"
            st.save_state(watch_dir, state)
    entries = _tick_entries(state)
    if not entries:
        return []
    report = backend_for(spec.kind, client=client).cancel(
        watch_dir, entries, mark=lambda ids: None, verify_s=verify_s, sleep=time.sleep)
    if report.still_active:
        raise WatchError("tick job(s) still queued after the cancel: "
                         + ", ".join(report.still_active))
    return report.cancelled


def resume_watch(watch_dir: Path, client: SchedulerClient | None = None) -> str:
    """Queue a tick now for a stopped watch, or one whose chain of ticks broke (a failed
    resubmission, a repaired state.json). Refused while a tick is still queued or running."""
    spec = read_spec(watch_dir)
    with st.locked(watch_dir):
        state = st.load_state(watch_dir)
        ticks = [t.id for t in state.ticks]
        if ticks:
            info = backend_for(spec.kind, client=client).query([ticks[-1]]).get(ticks[-1])
            if info is not None and not info.status.terminal:
                raise WatchError(f"tick job {ticks[-1]} is still queued or running")
        state.status, state.reason = st.WATCHING, ""
        try:
            return queue_tick(watch_dir, spec, state, client, time.time(), delay_s=0)
        finally:
            st.save_state(watch_dir, state)


def submitted_points(watch_dir: Path) -> list[tuple[int, Path]]:
    """(step, run directory) of every checkpoint the watch submitted, in step order: what
    `hpceval results WATCH` and the report plot against the training step."""
    state = st.load_state(watch_dir)
    entries = sorted(state.checkpoints.values(), key=lambda e: e.step)
    return [(e.step, Path(e.run_dir)) for e in entries
            if e.status == st.SUBMITTED and e.run_dir]
