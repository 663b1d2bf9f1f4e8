"""The controller on the real Slurm dev cluster: a sweep is one array job; status, results,
resume and kill against real sbatch/sacct/squeue/scancel, through the command line of alice,
the site's ordinary user, with her Slurm calls counted (tests/fakes/counting_slurm).

Models are served by tests/fakes/oracle_server.py through the `command` deployment; the task
is tests/fakes/ask-harness.yaml (one scored chat request), with container_runtime none.
"""

from __future__ import annotations

import csv
import json
import os
import stat
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.site_users import resumed

from hpceval.backends.slurm.client import CommandSlurmClient
from hpceval.runs.jobs import read_jobs
from tests.integration.drill_support import (
    assert_none_left,
    hpceval,
    status,
    submit_file,
    wait_status,
)

pytestmark = pytest.mark.slurm

FAKES = Path(__file__).resolve().parents[1] / "fakes"
PYTHON = FAKES / "job_python"  # runs hpceval.job with the test venv's Python
COUNTING = FAKES / "counting_slurm"
FINISHED = {"done", "failed", "cancelled"}


class SlurmCalls:
    """The Slurm commands alice's hpceval runs, counted by name: tests/fakes/counting_slurm
    first on the PATH her shell gives hpceval (jobs' own calls are not counted)."""

    def __init__(self, work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log = work / "slurm-calls.log"
        monkeypatch.setenv("SLURM_CALL_LOG", str(self.log))
        monkeypatch.setenv("PATH", f"{COUNTING}{os.pathsep}{os.environ['PATH']}")

    def __getitem__(self, command: str) -> int:
        calls = self.log.read_text().split() if self.log.exists() else []
        return Counter(calls)[command]


def _answer_key() -> Any:
    from fakes import answer_key

    return answer_key


def _items() -> list[Any]:
    items: list[Any] = _answer_key().load_items()[:2]
    return items


def sweep_config(out: Path, command: str, health_timeout: int = 60) -> dict[str, Any]:
    items = _items()
    return {
        "defaults": [{"execution": "local-dev"}],
        "execution": {"gpus_per_node": 0, "output_dir": str(out), "python": str(PYTHON),
                      "walltime": "00:05:00"},
        "deployment": {"type": "command", "runtime": "host", "command": command,
                       "health_timeout": health_timeout},
        "evaluation": {"tasks": [{"name": f"ask_{c}", "params": {"extra": {
            "question": i.question, "answer": i.answer}}} for c, i in zip("ab", items,
                                                                           strict=True)]},
        "models": [{"name": "oracle-a"}, {"name": "oracle-b"}],
    }


def submit_sweep(work: Path, command: str, health_timeout: int = 60) -> tuple[str, Path]:
    """The sweep submitted by alice (`hpceval submit`): (its array job, its run directory)."""
    path = work / "run.yaml"
    path.write_text(yaml.safe_dump(sweep_config(work / "runs", command, health_timeout),
                                   sort_keys=False))
    return submit_file(path)


ORACLE = f"exec {PYTHON} {FAKES / 'oracle_server.py'} --host 0.0.0.0 --model oracle"


def test_a_two_model_sweep_is_one_array_job(slurm_cluster: CommandSlurmClient,
                                            ask_env: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    behaviour = _answer_key().behaviour
    calls = SlurmCalls(ask_env, monkeypatch)
    array, run_dir = submit_sweep(ask_env, ORACLE)
    assert calls["sbatch"] == 2  # the array + its dependent aggregation job
    state = wait_status(run_dir, FINISHED, 90)
    assert state["state"] == "done", state
    assert [(m["model"], m["job_id"], m["state"]) for m in state["models"]] == [
        ("oracle-a", f"{array}_0", "done"), ("oracle-b", f"{array}_1", "done")]
    # both elements ran from the one dispatcher, each into its own model directory
    # (the run is DONE once every task's done marker is written; the element's last log line
    # follows after the job's final watchdog check: wait for it, bounded)
    for i, key in enumerate(("oracle-a", "oracle-b")):
        path = run_dir / "logs" / f"slurm-{array}_{i}.log"
        deadline = time.monotonic() + 30
        while "all 2 task(s) passed" not in path.read_text() and time.monotonic() < deadline:
            time.sleep(0.5)
        log = path.read_text()
        assert f"model {key}" in log and "all 2 task(s) passed" in log, log[-2000:]
    table = hpceval("results", str(run_dir), "--format", "json")
    assert table.returncode == 0, table.stderr
    want = {(m, f"ask-harness.ask_{c}"): float(behaviour(i) != "wrong")
            for m in ("oracle-a", "oracle-b") for c, i in zip("ab", _items(), strict=True)}
    assert {(r["model"], r["task"]): r["value"] for r in json.loads(table.stdout)} == want
    deadline = time.monotonic() + 30  # the afterany aggregation job follows the array
    while not (run_dir / "results.csv").exists():
        assert time.monotonic() < deadline, "the aggregation job wrote no results.csv"
        time.sleep(0.5)
    # one row per model and task, each from its own model's results (the table also carries
    # each task's directory, which names the model too: count rows, not substrings)
    with (run_dir / "results.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted((r["model"], r["task"]) for r in rows) == sorted(want)
    # execution.umask (0027) reached the jobs through sbatch: nothing they wrote is
    # world-readable (results, manifests, done markers, cache shards, logs, results.csv)
    written = [p for p in run_dir.rglob("*") if p.is_file() and not p.is_symlink()]
    assert any(p.name == "results.json" for p in written)
    assert any(p.name.startswith("shard-") for p in written)
    world = [f"{p}: {stat.S_IMODE(p.stat().st_mode):o}" for p in written
             if p.stat().st_mode & 0o007]
    assert world == []

    # resume after losing one model's task: only that array element is resubmitted
    (run_dir / "models/oracle-b/tasks/ask-harness.ask_b/done").unlink()
    again = resumed(hpceval("resume", "--no-aggregate", str(run_dir)))
    assert calls["sbatch"] == 3, calls["sbatch"]
    [entry] = [e for e in read_jobs(run_dir).chain if e.id == again]
    assert entry.models == (1,)  # only oracle-b's element
    state = wait_status(run_dir, FINISHED, 60)
    assert state["state"] == "done" and state["models"][1]["job_id"] == f"{again}_1", state
    log = (run_dir / "logs" / f"slurm-{again}_1.log").read_text()
    assert "task ask-harness.ask_a: done in an earlier job, skipped" in log
    assert not (run_dir / "logs" / f"slurm-{again}_0.log").exists()


def test_kill_during_a_running_sweep_leaves_nothing(slurm_cluster: CommandSlurmClient,
                                                    ask_env: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    marker = f"{3000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6:06d}"
    calls = SlurmCalls(ask_env, monkeypatch)
    # a "server" that never gets healthy: each element sits in its health wait, running
    _, run_dir = submit_sweep(ask_env, f"exec sleep {marker}", 300)
    deadline = time.monotonic() + 60
    while True:
        state = status(run_dir)
        if all(m["state"] == "running" for m in state["models"]):
            break
        assert time.monotonic() < deadline, state
        time.sleep(1.0)
    before = calls["sacct"]
    killed = hpceval("kill", str(run_dir))
    assert killed.returncode == 0, killed.stdout + killed.stderr
    assert calls["scancel"] == 1 and calls["sacct"] == before + 1, killed.stdout
    ids = read_jobs(run_dir).ids
    queue = subprocess.run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i %T"],
                           capture_output=True, text=True, check=False).stdout
    assert not [line for line in queue.splitlines()
                if line.split()[1] in ("PENDING", "RUNNING")], queue
    state = wait_status(run_dir, {"cancelled"}, 20)
    assert [m["state"] for m in state["models"]] == ["cancelled", "cancelled"]
    records = slurm_cluster.sacct(ids)
    assert {r.state for j, r in records.items() if j.startswith(f"{ids[0]}_")} == {"CANCELLED"}
    assert_none_left(f"sleep {marker}")
