"""One judge per sweep on the real Slurm dev cluster: a 3-model sweep whose judge
(``auxiliary_deployments.judge``, ``scope: sweep``, NeMo Evaluator's form in the run file) is ONE
job of its own.

The models and the judge are tests/fakes/oracle_server.py behind ``command`` deployments; the
judge's command first appends one line per start to a file, so its loads are counted, not
assumed. Each model's task (judge-it, from test_judge_job.py) sends the judge one request through
``auxiliary_deployments.judge.chat_url``, i.e. through its own job's proxy in front of the judge
job. Checked: the judge job loads once, every element starts after it started, it publishes
token (0600) then endpoint.json once healthy, it answers each model's task (its own request
log), the aggregation job's stop file ends it COMPLETED with its endpoint withdrawn;
`hpceval kill` cancels it too. alice, the site's ordinary user, submits the sweeps and runs
status and kill from her command line.
"""

from __future__ import annotations

import csv
import json
import re
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpceval.backends.slurm.client import CommandSlurmClient
from hpceval.records import Role
from hpceval.runs.jobs import read_jobs
from tests.integration.drill_support import (
    answered,
    assert_none_left,
    hpceval,
    oracle_command,
    own_catalogue,
    status,
    submit_file,
)
from tests.integration.test_judge_job import CATALOGUE

pytestmark = pytest.mark.slurm

TASK = "judge-it.judged_once"
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL")
FINISHED = {"done", "failed", "cancelled"}  # a run's final states in `hpceval status`


@pytest.fixture
def work(user_tmp: Path) -> Iterator[Path]:
    """A folder of alice's on scratch (she submits the sweeps), with the test's catalogue."""
    with own_catalogue(user_tmp, "judge_it.yaml", CATALOGUE, own_index=True) as root:
        yield root


def counted(command: str, loads: Path) -> str:
    """`command`, after one line per start in `loads` (time, job id, node)."""
    return (f'echo "$(date +%s.%N) ${{SLURM_JOB_ID:-local}} $(hostname)" >> {loads}; '
            f"{command}")


def run_file(work: Path, judge_command: str, models: int = 3) -> Path:
    run = {
        "defaults": [{"execution": "local-dev"}, {"deployment": "command"}],
        "execution": {"gpus_per_node": 0, "output_dir": str(work / "runs"),
                      "walltime": "00:05:00", "max_walltime": "00:10:00"},
        "deployment": {"health_timeout": 60,
                       "command": oracle_command("model-under-test", work / "model.jsonl")},
        "models": [{"name": f"model-{c}"} for c in "abc"[:models]],
        "auxiliary_deployments": {"judge": {
            "type": "command", "served_model_name": "judge-model", "num_nodes": 1,
            "health_timeout": 60, "runtime": "host", "scope": "sweep",
            "command": judge_command}},
        "evaluation": {"tasks": [{"name": TASK, "params": {"extra": {
            "judge": {"url": "auxiliary_deployments.judge.chat_url",
                      "model_id": "auxiliary_deployments.judge.model_id"}}}}]},
    }
    path = work / "run.yaml"
    path.write_text(yaml.safe_dump(run, sort_keys=False))
    return path


def submit(path: Path) -> tuple[Path, dict[Role, str]]:
    """`hpceval submit` of the sweep as alice: (its run directory, its jobs by role)."""
    _, run_dir = submit_file(path)
    return run_dir, {e.role: e.id for e in read_jobs(run_dir).chain}


def _sacct(ids: list[str]) -> dict[str, tuple[str, str, str]]:
    """job id -> (state, start, end) from the real sacct (array tasks as <id>_<i>)."""
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", ",".join(ids),
                          "-o", "JobID,State,Start,End"], capture_output=True, text=True,
                         check=True).stdout
    rows = [line.split("|") for line in out.splitlines() if line.strip()]
    return {r[0]: (r[1].split()[0], r[2], r[3]) for r in rows}


def test_a_three_model_sweep_loads_its_judge_once(slurm_cluster: CommandSlurmClient,
                                                  work: Path) -> None:
    loads = work / "judge-loads"
    judge_log = work / "judge.jsonl"
    run_dir, jobs = submit(run_file(
        work, counted(oracle_command("judge-model", judge_log), loads)))
    array, aggregate, judge = jobs[Role.MAIN], jobs[Role.AGGREGATE], jobs[Role.JUDGE]
    folder = run_dir / "auxiliary" / "judge"
    endpoint: dict[str, Any] | None = None
    serving: dict[str, Any] | None = None
    deadline = time.monotonic() + 240
    while True:  # watch endpoint.json appear while the sweep runs
        if endpoint is None and (folder / "endpoint.json").is_file():
            endpoint = json.loads((folder / "endpoint.json").read_text())
        state = status(run_dir)  # as alice; sacct may lag the judge job's start a little
        if endpoint is not None and serving is None and state["judges"][0]["state"] != "unknown":
            serving = state["judges"][0]
        if state["state"] in FINISHED and (folder / "stop").exists():
            break
        assert time.monotonic() < deadline, f"sweep stayed {state['state']}: {state['reason']}"
        time.sleep(0.5)
    logs = {m["model"]: (run_dir / "logs" / f"slurm-{array}_{m['index']}.log").read_text()
            for m in state["models"]}
    assert state["state"] == "done", (state, logs)
    assert endpoint is not None, "endpoint.json never appeared while the sweep ran"
    assert endpoint["model_id"] == "judge-model" and endpoint["job_id"] == judge
    # its https front, whose certificate the elements pin (shared-cluster-4 N1)
    assert len(endpoint["urls"]) == 1 and endpoint["urls"][0].startswith("https://")
    assert len(endpoint["tls_sha256"]) == 64
    # seen serving (or, on a slow sacct, already stopped: the sweep is short); while every
    # element still queued, status said how long the judge's GPUs had waited for them
    assert serving is not None, serving
    assert (serving["state"], serving["reason"]) == ("done", "stopped after the sweep") or (
        serving["state"] == "running" and re.fullmatch(
            r"serving 1 instance\(s\)(; no model's job has left the queue yet: its GPUs have "
            r"waited \d+ s for them)?", serving["reason"])), serving
    token = folder / "token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and len(token.read_text().strip()) == 64

    # every model's task asked the judge once, through its own job's proxy
    for key in ("model-a", "model-b", "model-c"):
        task_dir = run_dir / "models" / key / "tasks" / TASK
        url = (task_dir / "harness" / "seen.txt").read_text().split("\n")[0]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1/chat/completions")
        assert "waiting up to 60 s for the sweep's judge judge" in logs[key], logs[key]
    judged = answered(judge_log)
    assert len(judged) == 3 and {str(j["job"]) for j in judged} == {judge}, judged
    assert answered(work / "model.jsonl") == []

    # the judge job ends on the aggregation job's stop file: COMPLETED, endpoint withdrawn
    deadline = time.monotonic() + 60
    while True:
        records = _sacct([judge, array, aggregate])
        if records.get(judge, ("",))[0] in FINAL and records.get(aggregate, ("",))[0] in FINAL:
            break
        assert time.monotonic() < deadline, records
        time.sleep(1.0)
    assert records[judge][0] == "COMPLETED", records
    assert records[aggregate][0] == "COMPLETED", records
    assert not (folder / "endpoint.json").exists()
    log = (folder / f"slurm-{judge}.log").read_text()
    assert "judge serves at https://" in log and "the sweep is done" in log, log
    # its front proxy ran with the certificate of a 0700 folder, and stopped with the job
    assert stat.S_IMODE((folder / "tls").stat().st_mode) == 0o700
    assert "hpceval proxy stopping" in (folder / "proxy.log").read_text()

    # ONE load for three models; every element started after the judge job had started
    lines = loads.read_text().splitlines()
    assert len(lines) == 1 and lines[0].split()[1] == judge, lines
    elements = _sacct([f"{array}_{i}" for i in range(3)])
    judge_start = records[judge][1]
    assert len(elements) == 3 and all(start >= judge_start for _, start, _ in
                                      elements.values()), (judge_start, elements)
    state = status(run_dir)
    assert [(j["state"], j["reason"]) for j in state["judges"]] == [
        ("done", "stopped after the sweep")]
    # the judge job's own ledger (its marks, as a model's job writes them), shown by info as
    # alice reads it: its phases cover the allocation Slurm accounted, and how long it served
    # before the first element started (hpc-admin-2 D1's cost of this order)
    shown = hpceval("info", "--json", str(run_dir))
    assert shown.returncode == 0, shown.stderr
    found = json.loads(shown.stdout)["judge_ledger"]["auxiliary/judge"]
    (ledger,) = found["jobs"]
    elapsed = slurm_cluster.sacct([judge])[judge].elapsed_s
    assert ledger["job_id"] == judge and ledger["ended"] and elapsed is not None, found
    assert abs(ledger["total_s"] - elapsed) <= 2, (ledger, elapsed)
    assert ledger["seconds"]["tasks"] > 0 and ledger["waited_s"] is not None, ledger
    assert 0 <= ledger["waited_s"] <= ledger["seconds"]["tasks"], ledger
    # one row per model (the table also carries each task's directory, which names the model
    # too: count rows, not substrings)
    with (run_dir / "results.csv").open(newline="") as fh:
        assert sorted(r["model"] for r in csv.DictReader(fh)) == ["model-a", "model-b", "model-c"]


def test_kill_cancels_the_judge_job(slurm_cluster: CommandSlurmClient, work: Path) -> None:
    marker = f"{4000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6:06d}"
    # a judge that never gets healthy: it sits in its health wait, and the elements wait for it
    run_dir, jobs = submit(run_file(work, f"exec sleep {marker}", models=2))
    judge = jobs[Role.JUDGE]
    deadline = time.monotonic() + 60
    while True:
        state = status(run_dir)
        if state["judges"][0]["state"] == "running":
            break
        assert time.monotonic() < deadline, state["judges"]
        time.sleep(1.0)
    assert state["judges"][0]["reason"] == "loading (no endpoint.json yet)"
    killed = hpceval("kill", str(run_dir))
    assert killed.returncode == 0, killed.stdout + killed.stderr
    assert judge in killed.stdout, killed.stdout
    deadline = time.monotonic() + 30
    while state["judges"][0]["state"] != "cancelled":
        assert time.monotonic() < deadline, state["judges"]
        time.sleep(1.0)
        state = status(run_dir)
    assert_none_left(f"sleep {marker}")
