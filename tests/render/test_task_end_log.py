"""What the job log says when a task ends: a harness that exits non-zero is the harness's
failure (its status, its log), not "collecting its results failed", which reads as hpceval's
own fault; a harness that passes but leaves no results is that collection failure. The
rendered job runs in bash with the real collector (hpceval.job collect) on a task whose harness
only exits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from render_helpers import resolve

from hpceval.config import with_tasks
from hpceval.render import JobContext, render_job
from hpceval.tasks import Catalogue


def run_job(catalogue: Catalogue, tmp: Path, code: int) -> tuple[str, Path]:
    resolved = resolve("local-dev", {
        "execution": {"output_dir": str(tmp)},
        "deployment": {"type": "none"},
        "target": {"api_endpoint": {"url": "http://127.0.0.1:9/v1/chat/completions",
                                    "model_id": "m", "proxy": False}},
        "evaluation": {"tasks": [{"name": "exit_with", "params": {"extra": {"code": code}}}]}},
        tmp)
    run_dir = tmp / "run"
    script = tmp / "job.sbatch"
    script.write_text(render_job(with_tasks(resolved, catalogue),
                                 JobContext(str(run_dir), "i", "m", sys.executable)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False,
                          env=env, timeout=120)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    return proc.stdout, run_dir / "models" / "m" / "tasks" / "exiter.exit_with"


@pytest.mark.parametrize("code", [3, 0])
def test_the_log_names_the_harness_or_the_collection_as_what_failed(
        catalogue: Catalogue, tmp_path: Path, code: int) -> None:
    log, task_dir = run_job(catalogue, tmp_path, code)
    failed = json.loads((task_dir / "failed.json").read_text())
    if code:
        assert f"task exiter.exit_with: FAILED (status {code}), see {task_dir}" in log, log
        assert "collecting its results failed" not in log
        assert failed["stage"] == "harness"
    else:  # passed, but there is nothing to parse
        assert "task exiter.exit_with: collecting its results failed" in log, log
        assert "task exiter.exit_with: FAILED (status 1)" in log
        assert failed["stage"] == "parse"
