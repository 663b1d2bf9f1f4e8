"""Create a run directory and submit its job.

Layout (see docs/architecture): ``<output_dir>/<invocation-id>/`` holds ``run.yaml`` (the
resolved config: names of secrets only, never values), ``job.sbatch`` exactly as submitted,
``jobs.json`` (Slurm job ids) and ``models/<model>/...`` written by the job itself.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpceval import __version__
from hpceval.config import ResolvedConfig
from hpceval.results.store import atomic_write_json, atomic_write_text

JOB_SCRIPT = "job.sbatch"


def new_invocation_id() -> str:
    # Sortable by time, unique across users submitting in the same second.
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def model_key(resolved: ResolvedConfig) -> str:
    spec = resolved.spec
    name = (spec.deployment.served_model_name or spec.target.api_endpoint.model_id or "model")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "model"


@dataclass(frozen=True)
class PreparedRun:
    resolved: ResolvedConfig
    invocation_id: str
    run_dir: Path
    script: str


def prepare_run(resolved: ResolvedConfig, *, invocation_id: str | None = None,
                python: str | None = None) -> PreparedRun:
    """Render the job for a new invocation; pure apart from reading templates."""
    from hpceval.render import JobContext, render_job

    inv = invocation_id or new_invocation_id()
    run_dir = Path(resolved.spec.execution.output_dir) / inv
    ctx = JobContext(run_dir=str(run_dir), invocation_id=inv, model_key=model_key(resolved),
                     python=python or resolved.spec.execution.python or sys.executable,
                     hpceval_version=__version__)
    return PreparedRun(resolved, inv, run_dir, render_job(resolved, ctx))


def write_run(run: PreparedRun) -> None:
    """Create the run directory with the script and resolved config (before submitting)."""
    import yaml

    run.run_dir.mkdir(parents=True, exist_ok=False)
    config: dict[str, Any] = dataclasses.asdict(run.resolved.spec)
    atomic_write_text(run.run_dir / "run.yaml", yaml.safe_dump(config, sort_keys=False))
    atomic_write_text(run.run_dir / JOB_SCRIPT, run.script, mode=0o755)
    # Slurm opens the job's --output file in the model's folder before the script runs: a
    # missing folder fails the job with no log at all.
    (run.run_dir / "models" / model_key(run.resolved)).mkdir(parents=True)


def record_jobs(run_dir: Path, job_ids: list[str], *, kind: str = "slurm") -> None:
    atomic_write_json(run_dir / "jobs.json", {"kind": kind, "jobs": job_ids,
                                              "submitted_at": time.time(),
                                              "submitted_by": os.environ.get("USER", ""),
                                              "hpceval_version": __version__})
