"""evaluation.infra_errors_allowed, from the config through the rendered job to the collector:
the job runs in bash with the real collector on a task whose harness only exits 0, in a task
directory where the in-job proxy's runtime.json already counts one infrastructure failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from render_helpers import resolve

from hpceval.config import with_tasks
from hpceval.config.errors import ConfigError
from hpceval.render import JobContext, render_job
from hpceval.results.runtime import TaskStats, write_runtime
from hpceval.tasks import Catalogue

TASK = "exiter.exit_with"


def run(tmp: Path, catalogue: Catalogue, evaluation: dict[str, Any]) -> dict[str, Any]:
    resolved = resolve("local-dev", {
        "execution": {"output_dir": str(tmp)},
        "deployment": {"type": "none"},
        "target": {"api_endpoint": {"url": "http://127.0.0.1:9/v1/chat/completions",
                                    "model_id": "m", "proxy": False}},
        "evaluation": evaluation}, tmp)
    task_dir = tmp / "run" / "models" / "m" / "tasks" / TASK
    task_dir.mkdir(parents=True)
    stats = TaskStats()
    stats.record(504, 30.0, False, None, infra="504 timed out")
    write_runtime(task_dir, stats.to_json())
    # as the job's proxy writes it: after the harness started (an older file is an earlier
    # job's, which collect does not count)
    later = time.time() + 3600
    os.utime(task_dir / "runtime.json", (later, later))
    script = tmp / "job.sbatch"
    script.write_text(render_job(with_tasks(resolved, catalogue),
                                 JobContext(str(tmp / "run"), "i", "m", sys.executable)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False, env=env,
                   timeout=120)
    return json.loads((task_dir / "failed.json").read_text())


TASK_0 = {"name": "exit_with", "params": {"extra": {"code": 0}}}


@pytest.mark.parametrize(("evaluation", "stage"), [
    ({"tasks": [TASK_0]}, "infrastructure"),  # the default allows none
    ({"infra_errors_allowed": 1, "tasks": [TASK_0]}, "parse"),
    # the task's own wins over the run's, both ways
    ({"infra_errors_allowed": 1, "tasks": [{**TASK_0, "infra_errors_allowed": 0}]},
     "infrastructure"),
    ({"tasks": [{**TASK_0, "infra_errors_allowed": 3}]}, "parse"),
])
def test_the_allowance_reaches_the_collector(catalogue: Catalogue, tmp_path: Path,
                                             evaluation: dict[str, Any], stage: str) -> None:
    # allowed: the collector goes on to parse, and the harness left nothing to parse
    assert run(tmp_path, catalogue, evaluation)["stage"] == stage


def test_a_negative_allowance_is_refused_naming_its_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        resolve("local-dev", {"evaluation": {"tasks": [{"name": "gsm8k",
                                                        "infra_errors_allowed": -1}]}},
                tmp_path)
    assert "evaluation.tasks.gsm8k.infra_errors_allowed: -1 is below the minimum 0" \
        in str(err.value)
