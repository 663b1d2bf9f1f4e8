"""Run directories: what one invocation writes on shared storage before anything is submitted.

The tree (see docs/controller.md)::

    <output_dir>/<invocation-id>/
      run.json          what the controller needs: kind, models, their tasks, script names
      run.yaml          resolved config (names of secrets only); a sweep: one entry per model
      job.sbatch        single model: the job script exactly as submitted
      sweep.sbatch      sweep: the array dispatcher exactly as submitted (+ aggregate.sbatch)
      local.sh          execution.type local: runs the job script(s) here with bash
      jobs.json         the chain of Slurm jobs / local processes (hpceval.runs.jobs)
      logs/             array element and aggregation logs
      auxiliary/<name>/ a sweep's judge job (scope: sweep): judge.sbatch, server/, endpoint.json
      models/<key>/     job.sh (sweep element), run.yaml, then what the job writes
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import getpass
import hashlib
import os
import re
import secrets
import stat
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from hpceval._version import __version__
from hpceval.backends import BackendFiles, backend_for
from hpceval.config import ResolvedConfig
from hpceval.contract import (
    AGGREGATE_SCRIPT,
    CONFIG_FILE,
    EXPORT_SCRIPT,
    JOB_SCRIPT,
    LOG_DIR,
    PULL_SCRIPT,
    SWEEP_SCRIPT,
    element_script,
    model_dir,
)
from hpceval.records import AuxRecord, ModelRecord, RunRecord, TaskRecord, write_run_record
from hpceval.storage import atomic_write_text, run_umask_bits
from hpceval.trust import stat_problem

DEFAULT_UMASK = "0027"  # runs from before execution.umask


def new_invocation_id() -> str:
    # Sortable by time; 6 random hex digits make a clash between users in one second unlikely,
    # and mkdir(exist_ok=False) turns a clash into a retry rather than a shared directory.
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def model_key(resolved: ResolvedConfig) -> str:
    spec = resolved.spec
    name = (spec.served_name or "model")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "model"


def unique_keys(configs: Sequence[ResolvedConfig]) -> list[str]:
    """One directory name per model; names that sanitize alike get -2, -3 ..."""
    keys: list[str] = []
    taken: set[str] = set()  # `in keys` made a 10,000-model sweep quadratic
    for resolved in configs:
        key, base, n = model_key(resolved), model_key(resolved), 2
        while key in taken:
            key, n = f"{base}-{n}", n + 1
        keys.append(key)
        taken.add(key)
    return keys


@dataclass(frozen=True)
class ModelPlan:
    key: str
    index: int  # array element (0 for a single-model run)
    resolved: ResolvedConfig
    script_name: str  # relative to the run dir: job.sbatch or models/<key>/job.sh
    tasks: tuple[tuple[str, str], ...]  # (task directory name, harness.task)


@dataclass(frozen=True)
class PreparedRun:
    invocation_id: str
    run_dir: Path
    models: tuple[ModelPlan, ...]
    scripts: dict[str, str]  # relative path -> text: everything that runs, as written
    entry: str  # the script handed to the scheduler (or to bash, for local runs)
    aggregate: str | None = None  # a sweep whose backend runs aggregation as a job: its script
    export: str | None = None  # export.destinations, where the backend runs it as a job
    judges: dict[str, str] = dataclasses.field(default_factory=dict)  # scope sweep: name -> script
    # the CPU job that pulls the run's unstaged images before its GPU jobs (render/pull.py)
    pull: str | None = None
    pulled: tuple[str, ...] = ()  # the image files it writes

    @property
    def sweep(self) -> bool:
        return len(self.models) > 1

    @property
    def kind(self) -> str:
        return self.models[0].resolved.spec.execution.type

    @property
    def script(self) -> str:
        return self.scripts[self.entry]

    @property
    def resolved(self) -> ResolvedConfig:
        return self.models[0].resolved


def prepare_run(configs: ResolvedConfig | Sequence[ResolvedConfig], *,
                invocation_id: str | None = None, python: str | None = None) -> PreparedRun:
    """Render every script of a new invocation; pure apart from reading templates."""
    from hpceval.render import JobContext, render_job
    from hpceval.render.export_args import export_arguments
    from hpceval.render.judge_job import judge_script
    from hpceval.render.pull import render_pull
    from hpceval.render.quoting import render_template
    from hpceval.render.sweep import render_export, render_sweep

    runs = [configs] if isinstance(configs, ResolvedConfig) else list(configs)
    if not runs:
        raise ValueError("nothing to prepare: no model")
    inv = invocation_id or new_invocation_id()
    ex = runs[0].spec.execution
    run_dir = Path(ex.output_dir) / inv
    ctx = JobContext(run_dir=str(run_dir), invocation_id=inv, model_key="",
                     python=python or ex.python or sys.executable, hpceval_version=__version__)
    keys = unique_keys(runs)
    scripts: dict[str, str] = {}
    aggregate = None  # a sweep's aggregation script, for the backend to use or not
    judges: dict[str, str] = {}  # a sweep's judge jobs (scope: sweep): name -> script
    if len(runs) == 1:
        entry = JOB_SCRIPT
        scripts[entry] = render_job(runs[0], dataclasses.replace(ctx, model_key=keys[0]))
        names = [JOB_SCRIPT]
    else:
        sweep = render_sweep(list(zip(keys, runs, strict=True)), ctx)
        entry = SWEEP_SCRIPT
        scripts[entry] = sweep.dispatcher
        names = [element_script(key) for key in keys]
        scripts.update(dict(zip(names, sweep.elements.values(), strict=True)))
        aggregate = sweep.aggregate
        judges = {name: judge_script(name) for name in sweep.judges}
        scripts.update({judges[name]: text for name, text in sweep.judges.items()})
    models = tuple(
        ModelPlan(key, i, resolved, name,
                  tuple((t.key, t.task.qualified_name) for t in resolved.tasks))
        for i, (key, resolved, name) in enumerate(zip(keys, runs, names, strict=True)))
    pull = render_pull(runs, ctx)  # None: nothing to pull, or each job pulls for itself
    if pull is not None:
        scripts[PULL_SCRIPT] = pull.script
    destinations = runs[0].spec.export
    export = render_export(runs[0], ctx) if destinations.destinations else None
    export_args = tuple(export_arguments(destinations, ctx.run_dir_text)) if export else ()
    scripts.update(backend_for(ex.type).scripts(BackendFiles(
        run_dir, tuple((m.key, m.script_name) for m in models), ex.walltime,
        ex.signal_seconds, ctx.python, aggregate, export, export_args, render_template,
        gpus=ex.nodes * ex.gpus_per_node)))
    return PreparedRun(inv, run_dir, models, scripts, entry, scripts.get(AGGREGATE_SCRIPT),
                       scripts.get(EXPORT_SCRIPT), judges, scripts.get(PULL_SCRIPT),
                       pull.files if pull is not None else ())


def redacted(value: Any) -> Any:
    """The config as written to run.yaml: URLs lose any user:password@ part."""
    if isinstance(value, dict):
        return {k: redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redacted(v) for v in value]
    if isinstance(value, str) and "://" in value and "@" in value:
        parts = urlsplit(value)
        if "@" in parts.netloc:
            host = parts.netloc.rsplit("@", 1)[1]
            return urlunsplit(parts._replace(netloc=f"***@{host}"))
    return value


def config_dict(resolved: ResolvedConfig) -> dict[str, Any]:
    data: dict[str, Any] = _plain(resolved.spec)
    return data


def _plain(value: Any) -> Any:
    """redacted(dataclasses.asdict(value)) in one pass: asdict's generic deep copy was a
    fifth of a sweep's submit. The config holds dataclasses, dicts, lists and scalars; the
    exact types come first (the common case), subclasses fall through to isinstance."""
    kind = type(value)
    if kind is str:
        return redacted(value) if "@" in value else value
    if kind in _SCALARS:
        return value
    if kind is dict:
        return {k: _plain(v) for k, v in value.items()}
    if kind is list:
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: _plain(getattr(value, name)) for name in _field_names(type(value))}
    if isinstance(value, str):
        return redacted(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value if isinstance(value, (int, float, type(None))) else copy.deepcopy(value)


_SCALARS = frozenset({int, float, bool, type(None)})


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]


def run_manifest(run: PreparedRun) -> RunRecord:
    """run.json's record (hpceval.records writes and reads it)."""
    ex = run.resolved.spec.execution
    return RunRecord(
        run.invocation_id, kind=run.kind, sweep=run.sweep, entry=run.entry,
        created_at=time.time(), user=current_user(), hpceval_version=__version__,
        output_dir=str(run.run_dir.parent), umask=ex.umask,
        # resume resubmits these files: it refuses one that changed since submit
        scripts_sha256={name: _sha256(text.encode()) for name, text in run.scripts.items()},
        array_parallelism=ex.array_parallelism,
        jobs_tagged=True,  # every job's header carries the run's id (kill checks it)
        # a sweep's judge jobs (scope: sweep): resume resubmits one that no longer runs
        auxiliary=tuple(AuxRecord(name, script) for name, script in run.judges.items()),
        pulled_images=run.pulled,  # resume submits the pull job again if one is missing
        models=tuple(
            ModelRecord(m.key, m.index, tuple(TaskRecord(k, t) for k, t in m.tasks),
                        m.script_name, m.resolved.spec.deployment.type,
                        m.resolved.spec.request_model or "",
                        dataclasses.asdict(m.resolved.layout))  # for the report
            for m in run.models))


def write_run(run: PreparedRun) -> None:
    """Create the run directory with scripts, config and run.json (before submitting).

    Raises FileExistsError if the directory exists: two invocations never share one.
    """
    from hpceval.config.yamlio import dumps, nested, simple_key

    run.run_dir.parent.mkdir(parents=True, exist_ok=True)
    run.run_dir.mkdir(exist_ok=False)
    (run.run_dir / LOG_DIR).mkdir()
    texts: dict[str, str] = {}  # each model's config, dumped once for both files
    for plan in run.models:
        folder = model_dir(run.run_dir, plan.key)
        folder.mkdir(parents=True)
        texts[plan.key] = dumps(config_dict(plan.resolved))
        atomic_write_text(folder / CONFIG_FILE, texts[plan.key])
    if not run.sweep:
        top = texts[run.models[0].key]
    elif all(simple_key(key) for key in texts):
        top = dumps({"sweep": list(texts)}) + nested("models", "".join(
            nested(key, text) for key, text in texts.items()))
    else:
        top = dumps({"sweep": list(texts),
                     "models": {m.key: config_dict(m.resolved) for m in run.models}})
    atomic_write_text(run.run_dir / CONFIG_FILE, top)
    for name, text in run.scripts.items():
        atomic_write_text(run.run_dir / name, text, mode=0o755)
    # run.json last: its presence says the directory is complete.
    write_run_record(run.run_dir, run_manifest(run))


_umask_lock = threading.Lock()
_umask_holders = 0
_umask_saved = 0


@contextlib.contextmanager
def run_umask(value: str | None) -> Iterator[None]:
    """execution.umask for everything written meanwhile, and for the jobs started meanwhile:
    Slurm passes the submitting umask to the job (as its own umask variable), a local runner
    inherits it. Never a write bit for group or others (storage.run_umask_bits).

    The umask belongs to the process: submits in several threads share it, and the one that
    was there before is restored when the last of them ends (restoring per call would leave
    whichever one an overlapping call saved)."""
    global _umask_holders, _umask_saved
    with _umask_lock:
        previous = os.umask(run_umask_bits(value or DEFAULT_UMASK))
        if _umask_holders == 0:
            _umask_saved = previous
        _umask_holders += 1
    try:
        yield
    finally:
        with _umask_lock:
            _umask_holders -= 1
            if _umask_holders == 0:
                os.umask(_umask_saved)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def changed_scripts(run_dir: Path, run: RunRecord) -> list[str]:
    """Scripts of a run that are not what was submitted: a different sha256 than run.json
    recorded, a symlink, or a file of another user. Runs from before the record: none."""
    problems = []
    for name, digest in sorted(run.scripts_sha256.items()):
        path = run_dir / name
        try:
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                problems.append(f"{name} is a symlink")
            elif (problem := stat_problem(st, group_write=True)) is not None:
                problems.append(f"{name} {problem}")
            elif _sha256(path.read_bytes()) != digest:
                problems.append(f"{name} changed since submit (sha256 differs)")
        except OSError as exc:
            problems.append(f"{name}: {exc.strerror or exc}")
    return problems


def current_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""
