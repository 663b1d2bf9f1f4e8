"""Helpers for the controller tests (imported by name: this folder has no __init__.py)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from hpceval.backends.slurm.records import JobRecord, QueueEntry, base_job_id
from hpceval.config import ResolvedConfig, load_run

FAKES = Path(__file__).resolve().parents[1] / "fakes"
ASK_HARNESS = FAKES / "ask-harness.yaml"  # one scored chat request (see the file)

CATALOGUE = """\
schema: 1
harness:
  name: ut-harness
  description: unit-test harness (never run)
  runtime: host
  parser: lm_eval
  default_endpoint_type: chat
  command: "true {{ task.name | q }}"
tasks:
  - {name: ut_one, task_id: one, endpoint_type: chat, description: first}
  - {name: ut_two, task_id: two, endpoint_type: chat, description: second}
"""


class FakeSlurm:
    """SlurmClient double: counts every call; job states are set by the test."""

    def __init__(self) -> None:
        self._ids = itertools.count(1000)
        self.submits: list[dict[str, Any]] = []
        self.sacct_calls: list[list[str]] = []
        self.cancels: list[list[str]] = []
        self.squeue_calls: list[list[str]] = []
        self.states: dict[str, str] = {}  # job or array-task id -> Slurm state
        self.exit_codes: dict[str, int] = {}
        self.owners: dict[str, int] = {}  # base job id -> uid (squeue %U); default: ours

    def submit(self, script_path: Path, *, extra_args: Sequence[str] = (),
               dependency: str | None = None) -> str:
        job_id = str(next(self._ids))
        self.submits.append({"script": Path(script_path), "extra_args": list(extra_args),
                             "dependency": dependency, "id": job_id})
        return job_id

    def _record(self, job_id: str, state: str) -> JobRecord:
        code = self.exit_codes.get(job_id, 1 if state == "FAILED" else 0)
        return JobRecord(job_id, state.split()[0], state, code, 0, "None", "node1")

    def sacct(self, job_ids: Sequence[str], *, starttime: datetime | None = None
              ) -> dict[str, JobRecord]:
        self.sacct_calls.append(list(job_ids))
        bases = {base_job_id(j) for j in job_ids}
        return {j: self._record(j, s) for j, s in self.states.items()
                if base_job_id(j) in bases}

    def cancel(self, job_ids: Sequence[str]) -> None:
        self.cancels.append(list(job_ids))
        bases = {base_job_id(j) for j in job_ids}
        for job_id, state in list(self.states.items()):
            if base_job_id(job_id) in bases and state in ("PENDING", "RUNNING"):
                self.states[job_id] = "CANCELLED by 0"

    def squeue(self, job_ids: Sequence[str]) -> dict[str, QueueEntry]:
        self.squeue_calls.append(list(job_ids))
        bases = {base_job_id(j) for j in job_ids}
        return {j: QueueEntry(j, s.split()[0], "None", "node1",
                              self.owners.get(base_job_id(j), os.getuid()))
                for j, s in self.states.items() if base_job_id(j) in bases}


def write_run_file(tmp_path: Path, n_models: int = 1, *, tasks: int = 2,
                   execution: dict[str, Any] | None = None, name: str = "run") -> Path:
    run: dict[str, Any] = {
        "execution": {"gpus_per_node": 0, "output_dir": str(tmp_path / "out"),
                      "python": "/shared/venv/bin/python", **(execution or {})},
        "deployment": {"type": "command", "runtime": "host",
                       "command": "exec my-server --port $PORT"},
        "evaluation": {"tasks": [{"name": n} for n in ("ut_one", "ut_two")[:tasks]]},
    }
    if n_models == 1:
        run["deployment"]["served_model_name"] = "solo"
    else:
        run["models"] = [{"name": f"model-{i:02d}"} for i in range(n_models)]
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(run))
    return path


def configs(tmp_path: Path, n_models: int = 1, **kw: Any) -> list[ResolvedConfig]:
    return load_run(write_run_file(tmp_path, n_models, **kw), profile="local-dev",
                    check_environment=False)


def finish_task(run_dir: Path, model: str, task_key: str) -> None:
    from hpceval.results.store import finalize_task
    from hpceval.tasks.result import Metric, TaskResult

    task_dir = run_dir / "models" / model / "tasks" / task_key
    task_dir.mkdir(parents=True, exist_ok=True)
    result = TaskResult(task_key, "ut-harness", "1.0",
                        [Metric(task_key.split(".")[-1], "exact_match", 0.5)])
    finalize_task(task_dir, result.to_json(), {"task": task_key})
