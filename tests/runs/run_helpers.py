"""Helpers for the controller tests (imported by name: this folder has no __init__.py). The
counting Slurm fake is support.slurm.FakeSlurm, shared with the other test folders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from support.slurm import FakeSlurm as FakeSlurm  # re-exported: the controller tests' name

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
