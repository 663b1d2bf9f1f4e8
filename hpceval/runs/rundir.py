"""Run directories: what one invocation writes on shared storage before anything is submitted.

Layout (see docs/controller.md)::

    <output_dir>/<invocation-id>/
      run.json          what the controller needs: kind, models, their tasks, script names
      run.yaml          resolved config (names of secrets only); a sweep: one entry per model
      job.sbatch        single model: the job script exactly as submitted
      sweep.sbatch      sweep: the array dispatcher exactly as submitted (+ aggregate.sbatch)
      local.sh          execution.type local: runs the job script(s) here with bash
      jobs.json         the chain of Slurm jobs / local processes (hpceval.runs.jobs)
      logs/             array element and aggregation logs
      models/<key>/     job.sh (sweep element), run.yaml, then what the job writes
"""

from __future__ import annotations

import dataclasses
import getpass
import re
import secrets
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from hpceval import __version__
from hpceval.config import ResolvedConfig
from hpceval.results.store import atomic_write_json, atomic_write_text
from hpceval.tasks import Catalogue

JOB_SCRIPT = "job.sbatch"
SWEEP_SCRIPT = "sweep.sbatch"
ELEMENT_SCRIPT = "job.sh"
AGGREGATE_SCRIPT = "aggregate.sbatch"
LOCAL_RUNNER = "local.sh"
RUN_FILE = "run.json"
LOG_DIR = "logs"
RUN_SCHEMA = 1


def new_invocation_id() -> str:
    # Sortable by time; 6 random hex digits make a clash between users in one second unlikely,
    # and mkdir(exist_ok=False) turns a clash into a retry rather than a shared directory.
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def model_key(resolved: ResolvedConfig) -> str:
    spec = resolved.spec
    name = (spec.deployment.served_model_name or spec.target.api_endpoint.model_id or "model")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "model"


def unique_keys(configs: Sequence[ResolvedConfig]) -> list[str]:
    """One directory name per model; names that sanitize alike get -2, -3 ..."""
    keys: list[str] = []
    for resolved in configs:
        key, base, n = model_key(resolved), model_key(resolved), 2
        while key in keys:
            key, n = f"{base}-{n}", n + 1
        keys.append(key)
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
    entry: str  # the script handed to sbatch (or to bash, for local runs)
    aggregate: str | None = None  # sweeps on Slurm: the dependent aggregation script

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
                invocation_id: str | None = None, python: str | None = None,
                catalogue: Catalogue | None = None) -> PreparedRun:
    """Render every script of a new invocation; pure apart from reading templates."""
    from hpceval.render import JobContext, render_job
    from hpceval.render.steps import build_steps
    from hpceval.render.sweep import render_sweep

    runs = [configs] if isinstance(configs, ResolvedConfig) else list(configs)
    if not runs:
        raise ValueError("nothing to prepare: no model")
    if catalogue is None:
        from hpceval.tasks import load_catalogue

        catalogue = load_catalogue()
    inv = invocation_id or new_invocation_id()
    ex = runs[0].spec.execution
    run_dir = Path(ex.output_dir) / inv
    ctx = JobContext(run_dir=str(run_dir), invocation_id=inv, model_key="",
                     python=python or ex.python or sys.executable, hpceval_version=__version__)
    keys = unique_keys(runs)
    scripts: dict[str, str] = {}
    aggregate = None
    if len(runs) == 1:
        entry = JOB_SCRIPT
        scripts[entry] = render_job(runs[0], dataclasses.replace(ctx, model_key=keys[0]),
                                    catalogue)
        names = [JOB_SCRIPT]
    else:
        sweep = render_sweep(list(zip(keys, runs, strict=True)), ctx, catalogue)
        entry = SWEEP_SCRIPT
        scripts[entry] = sweep.dispatcher
        names = [f"models/{key}/{ELEMENT_SCRIPT}" for key in keys]
        scripts.update(dict(zip(names, sweep.elements.values(), strict=True)))
        if ex.type == "slurm":
            aggregate = sweep.aggregate
            scripts[AGGREGATE_SCRIPT] = aggregate
    models = tuple(
        ModelPlan(key, i, resolved, name,
                  tuple((s.key, s.task) for s in build_steps(resolved, catalogue)))
        for i, (key, resolved, name) in enumerate(zip(keys, runs, names, strict=True)))
    if ex.type == "local":
        from hpceval.runs.local import runner_script

        scripts[LOCAL_RUNNER] = runner_script(run_dir, models, ex.walltime, ex.signal_seconds,
                                              ctx.python)
    return PreparedRun(inv, run_dir, models, scripts, entry, aggregate)


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
    data: dict[str, Any] = redacted(dataclasses.asdict(resolved.spec))
    return data


def run_manifest(run: PreparedRun) -> dict[str, Any]:
    return {
        "schema": RUN_SCHEMA, "invocation_id": run.invocation_id, "kind": run.kind,
        "sweep": run.sweep, "entry": run.entry, "created_at": time.time(),
        "user": current_user(), "hpceval_version": __version__,
        "output_dir": str(run.run_dir.parent),
        "array_parallelism": run.resolved.spec.execution.array_parallelism,
        "models": [{"key": m.key, "index": m.index, "script": m.script_name,
                    "deployment": m.resolved.spec.deployment.type,
                    "model_id": m.resolved.spec.target.api_endpoint.model_id
                    or m.resolved.spec.deployment.served_model_name,
                    "layout": dataclasses.asdict(m.resolved.layout),  # for the report
                    "tasks": [{"key": k, "task": t} for k, t in m.tasks]} for m in run.models],
    }


def write_run(run: PreparedRun) -> None:
    """Create the run directory with scripts, config and run.json (before submitting).

    Raises FileExistsError if the directory exists: two invocations never share one.
    """
    import yaml

    run.run_dir.parent.mkdir(parents=True, exist_ok=True)
    run.run_dir.mkdir(exist_ok=False)
    (run.run_dir / LOG_DIR).mkdir()
    for plan in run.models:
        model_dir = run.run_dir / "models" / plan.key
        model_dir.mkdir(parents=True)
        atomic_write_text(model_dir / "run.yaml",
                          yaml.safe_dump(config_dict(plan.resolved), sort_keys=False))
    if run.sweep:
        top: Any = {"sweep": [m.key for m in run.models],
                    "models": {m.key: config_dict(m.resolved) for m in run.models}}
    else:
        top = config_dict(run.resolved)
    atomic_write_text(run.run_dir / "run.yaml", yaml.safe_dump(top, sort_keys=False))
    for name, text in run.scripts.items():
        atomic_write_text(run.run_dir / name, text, mode=0o755)
    # run.json last: its presence says the directory is complete.
    atomic_write_json(run.run_dir / RUN_FILE, run_manifest(run))


def current_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""
