"""export.destinations on the real Slurm dev cluster: the dependent export job runs after the
main job and writes the local export and an MLflow file store (the one real sbatch chain); the
same job's proxy got the request total from the catalogue (progress totals).

The model is tests/fakes/oracle_server.py (a `command` deployment), the task
tests/fakes/ask-harness.yaml, as in test_controller.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_controller import ORACLE, PYTHON, sweep_config

from hpceval.backends.slurm.client import CommandSlurmClient
from hpceval.contract import EXPORT_SCRIPT
from hpceval.runs.jobs import read_jobs
from tests.integration.drill_support import submit_file, wait_status

pytestmark = pytest.mark.slurm


def test_the_export_job_exports_after_the_run(slurm_cluster: CommandSlurmClient, ask_env: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # MLflow 3 keeps its file store only on request; the job gets it from sbatch's environment
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    config: dict[str, Any] = sweep_config(ask_env / "runs", ORACLE)
    del config["models"]
    config["deployment"]["served_model_name"] = "oracle"
    mlruns = ask_env / "mlruns"
    config["export"] = {"destinations": ["local", "mlflow"],
                        "local": {"output_dir": str(ask_env / "exported")},
                        "mlflow": {"tracking_uri": mlruns.as_uri(), "experiment_name": "e2e"}}
    run_file = ask_env / "run.yaml"
    run_file.write_text(yaml.safe_dump(config, sort_keys=False))
    _, run_dir = submit_file(run_file)  # as alice
    chain = read_jobs(run_dir).chain
    assert [e.role for e in chain] == ["main", "export"]
    state = wait_status(run_dir, {"done", "failed", "cancelled"}, 90)
    assert state["state"] == "done", state
    log = run_dir / "logs" / f"export-{chain[1].id}.log"
    deadline = time.monotonic() + 60  # afterany: it starts once the main job has ended
    while not (log.exists() and "mlflow:" in log.read_text()):
        assert time.monotonic() < deadline, (log.read_text() if log.exists() else "no log")
        time.sleep(0.5)
    text = log.read_text()
    assert "local: 1 file(s)" in text and "mlflow: 2 run(s) created" in text, text
    (exported,) = (ask_env / "exported").iterdir()
    rows = json.loads(exported.read_text())
    assert {r["task"] for r in rows} == {"ask-harness.ask_a", "ask-harness.ask_b"}, rows
    assert (run_dir / EXPORT_SCRIPT).read_text().startswith("#!/bin/bash")
    assert str(PYTHON) in (run_dir / EXPORT_SCRIPT).read_text()
    assert any(mlruns.rglob("meta.yaml"))  # MLflow's file store, written by the job
    # the request total reached the proxy's progress file (one request per ask-harness task)
    progress = json.loads((run_dir / "models" / "oracle" / "progress.json").read_text())
    assert progress["requests"]["expected"] == 2 and progress["requests"]["done"] == 2
    assert progress["eta_s"] == 0 or progress["eta_s"] is None  # nothing left (rate may be 0)
