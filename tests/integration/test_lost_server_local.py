"""Review F1, the whole job script run with bash on this machine (no Slurm, no vLLM: the
oracle server behind a `command` deployment): the in-job proxy or the model server is killed
mid-task and another uid (`runuser -u nobody`) binds the freed port at once, answering as a
model would. The job must fail naming what it lost, write no `done`, never say "all passed",
and score nothing the squatter said."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hpceval.config import load_config
from hpceval.render import JobContext, render_job
from tests.integration.drill_support import oracle_command, own_catalogue

HARNESS = Path(__file__).resolve().parents[1] / "fakes" / "takeover_harness.py"
CATALOGUE = """\
schema: 1
harness:
  name: takeover
  description: review F1's takeover, staged by the harness
  runtime: host
  parser: lm_eval
  default_endpoint_type: chat
  command: |
    python3 {{ params.extra.script | q }} --output {{ output_dir | q }} --task {{ task.name | q }}
    {{- " " }}--endpoint {{ endpoint_url | q }} --model {{ model_id | q }}
    {{- " " }}--kill {{ params.extra.kill | q }} --server-match {{ params.extra.match | q }}
tasks:
  - {name: taken_over, task_id: taken_over, endpoint_type: chat, description: F1}
"""


@pytest.fixture
def work(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root and runuser to act as a second uid")
    with own_catalogue(tmp_path, "takeover.yaml", CATALOGUE) as root:
        yield root


def _run(work: Path, kill: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    request_log = work / f"model-{kill}.jsonl"
    run = {
        "defaults": [{"execution": "local"}, {"deployment": "command"}],
        "execution": {"gpus_per_node": 0, "output_dir": str(work / "runs")},
        "deployment": {"served_model_name": "m", "health_timeout": 60,
                       "command": oracle_command("m", request_log)},
        "evaluation": {"tasks": [{"name": "takeover.taken_over", "params": {"extra": {
            "script": str(HARNESS), "kill": kill, "match": str(request_log)}}}]},
    }
    (work / "run.yaml").write_text(yaml.safe_dump(run, sort_keys=False))
    resolved = load_config(work / "run.yaml")
    run_dir = work / "runs" / f"inv-{kill}"
    model_dir = run_dir / "models" / "m"
    model_dir.mkdir(parents=True)
    script = run_dir / "job.sbatch"
    script.write_text(render_job(resolved, JobContext(run_dir, f"inv-{kill}", "m",
                                                      sys.executable)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    job = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=240,
                         check=False, env=env)
    return job, model_dir


@pytest.mark.parametrize("kill", ["proxy", "server"])
def test_a_port_taken_over_mid_task_fails_the_job_and_scores_nothing(work: Path,
                                                                    kill: str) -> None:
    job, model_dir = _run(work, kill)
    log = job.stdout + job.stderr
    task_dir = model_dir / "tasks" / "takeover.taken_over"
    assert (task_dir / "harness.log").exists(), log  # the job got as far as the task
    harness_log = (task_dir / "harness.log").read_text()
    assert f"killed the {kill}" in harness_log, harness_log + log
    assert job.returncode != 0, log
    assert "task(s) passed" not in log, log
    assert not (task_dir / "done").exists() and not (task_dir / "results.json").exists()
    cached = b"".join(p.read_bytes() for p in (model_dir / "cache").glob("*.jsonl"))
    assert b"ATTACKER" not in cached  # nothing for a resume to replay
    if kill == "proxy":
        failure = (model_dir / "job-failure").read_text()
        assert failure.startswith("the in-job proxy (log: ") and "exited while tasks ran" in \
            failure, failure
        assert "exited while tasks ran: stopping the running tasks" in log, log
    else:
        # the proxy gave up the instance whose process exited: the squatter got no request
        assert "ATTACKER" not in harness_log, harness_log
        progress = json.loads((model_dir / "progress.json").read_text())
        assert [i["state"] for i in progress["instances"]] == ["down"], progress
        assert "server process exited" in progress["instances"][0]["last_error"], progress
