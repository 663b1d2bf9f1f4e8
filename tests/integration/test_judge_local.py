"""A judge served in the job, the whole job script run with bash on this machine (no Slurm):
the `local` profile, the model and the judge both tests/fakes/oracle_server.py behind `command`
deployments, the judge on the model's node (num_nodes: 0). The Slurm version, with the judge on
a node of its own, is test_judge_job.py."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpceval.config import load_config
from hpceval.render import JobContext, render_job
from tests.integration.drill_support import answered, oracle_command, own_catalogue
from tests.integration.test_judge_job import CATALOGUE


@pytest.fixture
def work(tmp_path: Path) -> Iterator[Path]:
    with own_catalogue(tmp_path, "judge_it.yaml", CATALOGUE) as root:
        yield root


def judge_run(work: Path, judge: dict[str, Any], **evaluation: Any) -> dict[str, Any]:
    """A local run: the oracle model, a `command` judge beside it (num_nodes: 0) with ``judge``'s
    keys, and the task that asks the judge once, told where it is by references."""
    return {
        "defaults": [{"execution": "local"}, {"deployment": "command"}],
        "execution": {"gpus_per_node": 0, "output_dir": str(work / "runs")},
        "deployment": {"served_model_name": "m", "health_timeout": 60,
                       "command": oracle_command("m", work / "model.jsonl")},
        "auxiliary_deployments": {"judge": {
            "type": "command", "served_model_name": "judge-model", "num_nodes": 0,
            "runtime": "host", **judge}},
        "evaluation": {"tasks": [{"name": "judge-it.judged_once", "params": {"extra": {
            "judge": {"url": "auxiliary_deployments.judge.chat_url",
                      "model_id": "auxiliary_deployments.judge.model_id"}}}}], **evaluation},
    }


def run_job(script: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=180,
                          check=False, env=env)


def test_judge_beside_the_model_is_asked_once_and_replayed(work: Path) -> None:
    run = judge_run(work, {"health_timeout": 60, "env_prefix": "GRADER", "command": oracle_command(
        "judge-model", work / "judge.jsonl")},
        env_vars={"JUDGE_CHAT_URL": "auxiliary_deployments.judge.chat_url"})
    (work / "run.yaml").write_text(yaml.safe_dump(run, sort_keys=False))
    resolved = load_config(work / "run.yaml")
    run_dir = work / "runs" / "inv-judge"
    model_dir = run_dir / "models" / "m"
    model_dir.mkdir(parents=True)
    script = run_dir / "job.sbatch"
    script.write_text(render_job(resolved, JobContext(run_dir, "inv-judge", "m", sys.executable)))

    first = run_job(script)
    assert first.returncode == 0, first.stdout + first.stderr
    task_dir = model_dir / "tasks" / "judge-it.judged_once"
    url, nel_url, model_id = (task_dir / "harness" / "seen.txt").read_text().split("\n")[:3]
    assert url == nel_url and url.endswith("/v1/chat/completions") and model_id == "judge-model"
    assert len(answered(work / "judge.jsonl")) == 1 and answered(work / "model.jsonl") == []
    judge_dir = model_dir / "auxiliary" / "judge"
    assert (judge_dir / "server" / "instance-0.log").is_file()
    assert [p for p in (judge_dir / "cache").iterdir() if p.stat().st_size]

    for name in ("done", "results.json"):
        (task_dir / name).unlink()
    again = run_job(script)
    assert again.returncode == 0, again.stdout + again.stderr
    assert (task_dir / "done").is_file()
    assert len(answered(work / "judge.jsonl")) == 1  # replayed from the judge's proxy cache


def test_a_judge_that_dies_while_loading_fails_the_job_naming_it(work: Path) -> None:
    run = judge_run(work, {"command": "echo 'ValueError: no judge weights' >&2; exit 3"})
    (work / "run.yaml").write_text(yaml.safe_dump(run, sort_keys=False))
    resolved = load_config(work / "run.yaml")
    run_dir = work / "runs" / "inv-dies"
    (run_dir / "models" / "m").mkdir(parents=True)
    script = run_dir / "job.sbatch"
    script.write_text(render_job(resolved, JobContext(run_dir, "inv-dies", "m", sys.executable)))
    done = run_job(script)
    assert done.returncode == 1, done.stdout
    failure = (run_dir / "models" / "m" / "job-failure").read_text()
    assert failure.startswith("auxiliary_deployments.judge server instance 0 (head) on "), failure
    assert "[ValueError: no judge weights]" in failure and "exited while loading" in failure
    # its log tail and its exact launch command, in the job's output
    assert "ValueError: no judge weights" in done.stdout and "its launch command" in done.stdout
    assert not (run_dir / "models" / "m" / "tasks" / "judge-it.judged_once" / "done").exists()
