"""The controller's test set-up (tests/runs, tests/results, tests/watch): a tiny catalogue,
isolated caches (the autouse fixture `isolated`, which those folders' conftest.py imports), run
files and finished tasks. The counting Slurm fake is support.slurm.FakeSlurm (fixture `fake`)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpceval.config import ResolvedConfig, load_run
from hpceval.config.schema import AuxiliaryDeploymentSpec
from hpceval.runs.submit import Submitted, submit_configs
from support import FAKES
from support.slurm import FakeSlurm

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
                   execution: dict[str, Any] | None = None, name: str = "run",
                   deployment: dict[str, Any] | None = None) -> Path:
    run: dict[str, Any] = {
        "execution": {"gpus_per_node": 0, "output_dir": str(tmp_path / "out"),
                      "python": "/shared/venv/bin/python", **(execution or {})},
        "deployment": deployment or {"type": "command", "runtime": "host",
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


def ledger_marks(*rows: tuple[float, str], job: str = "42", gpus: str = "4",
                 t0: float = 1_765_000_000.0) -> str:
    """A job's lines of models/<key>/ledger as the job script's `mark` writes them: (seconds
    after t0, mark) each; the start carries `gpus`."""
    lines = []
    for offset, name in rows:
        value = f" {gpus}" if name == "start" else ""
        lines.append(f"{job} {t0 + offset:.3f} {name}{value}")
    return "\n".join(lines) + "\n"


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("env")
    (root / "catalogue").mkdir()
    (root / "catalogue" / "ut.yaml").write_text(CATALOGUE)
    monkeypatch.setenv("HPCEVAL_TASKS_PATH", os.pathsep.join([str(root / "catalogue"),
                                                             str(ASK_HARNESS)]))
    monkeypatch.setenv("XDG_CACHE_HOME", str(root / "xdg-cache"))
    monkeypatch.setenv("HPCEVAL_CACHE_DIR", str(root / "hpceval-cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(root / "xdg-config"))
    monkeypatch.delenv("HPCEVAL_PROFILE", raising=False)
    monkeypatch.delenv("HPCEVAL_OUTPUT_DIRS", raising=False)
    yield root


@pytest.fixture
def fake() -> FakeSlurm:
    return FakeSlurm()


# A sweep's judge job (scope: sweep) of a command server, for the controller tests.
SWEEP_JUDGE = AuxiliaryDeploymentSpec(type="command",
                                      command="exec judge-server --port $PORT",
                                      served_model_name="judge-m", runtime="host",
                                      gpus_per_instance=0, scope="sweep")


def judged(tmp_path: Path, n: int = 3) -> list[ResolvedConfig]:
    """``n`` models of a Slurm sweep with SWEEP_JUDGE as its judge `judge`."""
    return [dataclasses.replace(c, spec=dataclasses.replace(
        c.spec, auxiliary_deployments={"judge": SWEEP_JUDGE}))
        for c in configs(tmp_path, n, execution={"type": "slurm"})]


def submitted(tmp_path: Path, fake: FakeSlurm, **kw: bool) -> tuple[Submitted, str, str, str]:
    """A judged sweep submitted to ``fake``: (result, array, aggregation, judge job ids)."""
    result = submit_configs(judged(tmp_path), fake, **kw)
    array, aggregate, judge = result.job_ids
    return result, array, aggregate, judge
