"""The measured model load per allocation (issue 21, defect 6): the job script's own line
writes models/<key>/loads, and `status`, `status --json` and `info` show what it wrote."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.runs import configs
from support.slurm import FakeSlurm

from hpceval.cli.main import cli
from hpceval.contract import LOADS_FILE
from hpceval.runs.submit import submit_configs


def record_load(script: str, model_dir: Path, job_id: str, seconds: int) -> None:
    """Run the submitted script's own load-recording line, as the job does once healthy, after
    the backend's env block (Slurm's job id under hpceval's name)."""
    (line,) = [x.strip() for x in script.splitlines() if f'"$MODEL_DIR/{LOADS_FILE}"' in x
               and x.strip().startswith("echo ")]  # in servers_up (health.j2)
    start = script.index("\n{\n  export HPCEVAL_JOB_ID=") + 1
    env_block = script[start:script.index("\n}\n", start) + 3]
    subprocess.run(["bash", "-c", f"{env_block}SECONDS={seconds}; {line}"], check=True,
                   env={**os.environ, "MODEL_DIR": str(model_dir), "SLURM_JOB_ID": job_id})


def test_status_and_info_show_the_load_the_job_recorded(
        tmp_path: Path, fake: FakeSlurm, monkeypatch: pytest.MonkeyPatch) -> None:
    result = submit_configs(configs(tmp_path), fake)
    job = result.job_ids[0]
    fake.states[job] = "RUNNING"
    monkeypatch.setattr("hpceval.backends.slurm.client.CommandSlurmClient", lambda **_: fake)
    script = (result.run_dir / "job.sbatch").read_text()
    model_dir = result.run_dir / "models" / "solo"
    model_dir.mkdir(parents=True, exist_ok=True)
    before = CliRunner().invoke(cli, ["info", result.invocation_id])
    assert before.exit_code == 0, before.output
    assert "load " not in before.output  # nothing healthy yet: nothing to show
    record_load(script, model_dir, "4242", 95)  # an earlier allocation, stopped later
    record_load(script, model_dir, job, 754)
    assert (model_dir / LOADS_FILE).read_text() == f"4242 95\n{job} 754\n"

    info = CliRunner().invoke(cli, ["info", result.invocation_id])
    assert info.exit_code == 0, info.output
    assert "load       solo: servers healthy 95 s after job 4242 started" in info.output
    assert f"load       solo: servers healthy 754 s after job {job} started" in info.output
    status = CliRunner().invoke(cli, ["status", result.invocation_id])
    assert status.exit_code == 0, status.output
    (row,) = [x for x in status.output.splitlines() if x.strip().startswith("solo")]
    assert "load 12m34s" in row, row  # the newest allocation's
    as_json = CliRunner().invoke(cli, ["status", result.invocation_id, "--json"])
    (state,) = json.loads(as_json.output)
    assert state["models"][0]["loads"] == [{"job_id": "4242", "seconds": 95},
                                           {"job_id": job, "seconds": 754}]
