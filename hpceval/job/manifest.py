"""What ``manifest.json`` and ``failed.json`` record about one task attempt.

Both are plain dicts built here and written by ``hpceval.job.collect``. They answer, long after
the job is gone: which task and harness ran (as the catalogue resolved them), in which image,
with which hpceval, when, on which nodes, under which scheduler job, and how it ended. Facts
come from the command line first and the job environment second (the ``HPCEVAL_*`` variables
the job script exports: the backend's env.j2 names its scheduler's facts as hpceval.jobenv
lists them), so a collect run by hand outside a job still works.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from hpceval._version import __version__
from hpceval.contract import COMMAND_FILE, CONFIG_FILE, HARNESS_LOG, RESULTS_FILE, run_dir_of_task
from hpceval.jobenv import JobEnv
from hpceval.tasks import HarnessDef, TaskDef, task_to_dict

MANIFEST_VERSION = 1
LOG_TAIL_LINES = 40
JOB_ENV = {"invocation_id": "HPCEVAL_INVOCATION_ID", "model_key": "HPCEVAL_MODEL_KEY",
           "model_id": "HPCEVAL_MODEL_ID", "endpoint_url": "HPCEVAL_ENDPOINT_URL"}


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="seconds")


def now() -> datetime:
    return datetime.now(timezone.utc)


def parse_time(text: str) -> datetime:
    """Epoch seconds (``date +%s``) or ISO 8601; a naive ISO time is taken as UTC."""
    try:
        return datetime.fromtimestamp(float(text), timezone.utc)
    except ValueError:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def started_at(task_dir: Path, given: str | None) -> datetime | None:
    """The harness start: as given, else when the job script wrote the task's command file."""
    if given:
        return parse_time(given)
    command = task_dir / COMMAND_FILE
    try:
        return datetime.fromtimestamp(command.stat().st_mtime, timezone.utc)
    except OSError:
        return None


def _no_credentials(url: str | None) -> str | None:
    # An endpoint URL may carry user:password@; the manifest is world-readable on shared storage.
    if not url:
        return url
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def scheduler_facts(job_id: str | None, node_list: str | None,
                    env: JobEnv | None = None) -> dict[str, Any]:
    """The manifest's "slurm" record (its key and field names kept from when only Slurm ran
    jobs: cost accounting and the report read them from older run directories too)."""
    env = JobEnv.read() if env is None else env
    facts: dict[str, Any] = {"job_id": job_id or env.job_id,
                             "node_list": node_list or env.node_list}
    # what Slurm leaves unset is left out (a restart count of 0: never requeued)
    optional = {"array_job_id": env.array_job_id, "array_task_id": env.array_index,
                "restart_count": None if env.restart_count == "0" else env.restart_count,
                "cluster_name": env.cluster, "job_partition": env.partition}
    facts.update({key: value for key, value in optional.items() if value})
    return facts


def job_facts() -> dict[str, Any]:
    facts = {key: os.environ.get(var) for key, var in JOB_ENV.items()}
    facts["endpoint_url"] = _no_credentials(facts["endpoint_url"])
    facts["host"] = socket.gethostname()
    return facts


def sha256_file(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _plain(value: Any) -> Any:
    # Catalogue params are read-only mappings and tuples; JSON wants dicts and lists.
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def task_facts(task: TaskDef | None, name: str) -> dict[str, Any]:
    if task is None:
        return {"qualified_name": name, "resolved": False}
    return {**task_to_dict(task), "task_id": task.task_id, "unlisted": task.unlisted,
            "params": _plain(task.params), "source": task.source, "resolved": True}


def harness_facts(harness: HarnessDef | None, name: str | None, parser: str | None,
                  version: str | None = None) -> dict[str, Any]:
    facts: dict[str, Any] = {"name": harness.name if harness else name, "parser": parser,
                             "version": version}
    if harness is not None:
        facts.update(runtime=harness.runtime, image=harness.image, sif=harness.sif,
                     pip_package=harness.pip_package, source=harness.source)
    return facts


def run_config(task_dir: Path) -> dict[str, Any] | None:
    """The run's resolved config: <run>/models/<model>/tasks/<task> -> <run>/run.yaml."""
    run_dir = run_dir_of_task(task_dir.resolve())
    if run_dir is None:
        return None
    path = run_dir / CONFIG_FILE
    digest = sha256_file(path)
    return {"path": str(path), "sha256": digest} if digest else None


def log_tail(task_dir: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        with (task_dir / HARNESS_LOG).open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64 * 1024))  # the end is what explains a failure
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def build_manifest(*, task_dir: Path, task: TaskDef | None, task_name: str,
                   harness: HarnessDef | None, harness_name: str | None, parser: str,
                   harness_version: str | None, exit_code: int, start: datetime | None,
                   end: datetime, slurm: Mapping[str, Any], metrics: int,
                   source_file: str | None,
                   previous_failure: Mapping[str, Any] | None) -> dict[str, Any]:
    return {
        "manifest_version": MANIFEST_VERSION,
        "hpceval_version": __version__,
        "task": task_facts(task, task_name),
        "harness": harness_facts(harness, harness_name, parser, harness_version),
        # container image the harness ran in; null for host-side harnesses (pip lm-eval)
        "image": task.image if task else (harness.image if harness else None),
        "sif": task.sif if task else (harness.sif if harness else None),
        "exit_code": exit_code,
        "started_at": iso(start) if start else None,
        "finished_at": iso(end),
        "duration_s": round((end - start).total_seconds(), 3) if start else None,
        "slurm": dict(slurm),
        "job": job_facts(),
        "command": {"file": COMMAND_FILE, "sha256": sha256_file(task_dir / COMMAND_FILE)},
        "run_config": run_config(task_dir),
        "results": {"file": RESULTS_FILE, "metrics": metrics, "source_file": source_file},
        "previous_failure": dict(previous_failure) if previous_failure else None,
    }


def build_failure(*, task_dir: Path, task_name: str, harness_name: str | None,
                  parser: str | None, stage: str, reason: str, exit_code: int,
                  start: datetime | None, end: datetime, slurm: Mapping[str, Any],
                  attempts: int, errors: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "task": task_name,
        "harness": harness_name,
        "parser": parser,
        "stage": stage,  # resolve | harness | infrastructure | parse | write
        "reason": reason,
        "errors": list(errors),
        "exit_code": exit_code,
        "attempts": attempts,
        "started_at": iso(start) if start else None,
        "finished_at": iso(end),
        "hpceval_version": __version__,
        "slurm": dict(slurm),
        "job": job_facts(),
        "log_tail": log_tail(task_dir),
    }
