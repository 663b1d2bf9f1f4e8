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
from render_helpers import RenderFn, resolve

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


DP2 = {"deployment": {"type": "vllm", "checkpoint_path": "/models/m", "served_model_name": "m",
                      "tensor_parallel_size": 1, "data_parallel_size": 2},
       "evaluation": {"tasks": [{"name": "gsm8k"}]}}


def test_a_server_lost_while_tasks_passed_on_the_others_is_said(render: RenderFn) -> None:
    """shared-cluster-4 (the audit of F1): with data_parallel_size > 1 an instance lost while
    tasks ran was dropped quietly, and the job logged "all tasks passed" alone. The rendered end
    of the job, run in bash with one server process gone and one alive."""
    script = render("local-dev", DP2, ["execution.gpus_per_node=2", "deployment.runtime=host"])
    start = script.index('if [ -n "$LOST" ]; then')
    end = script.index("exit 0\n", start) + len("exit 0\n")
    alive_fn = script.index("servers_alive() {")
    code = "\n".join([
        'log() { printf "%s\\n" "$*"; }',
        'server_failed() { echo "model server instance $1 exited (status 137)"; }',
        script[alive_fn:script.index("\n}\n", alive_fn) + 3],
        "sleep 30 & alive=$!; (exit 0) & gone=$!; wait $gone; trap 'kill $alive' EXIT",
        'SERVER_PIDS=("$alive" "$gone") LOST=""',
        script[start:end]])
    out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "model server instance 1 exited (status 137)", lines
    assert lines[1].startswith("a model server exited while tasks ran (see above): the proxy "
                               "sent its requests to the instances left"), lines
    assert lines[-1] == "all 1 task(s) passed", lines
