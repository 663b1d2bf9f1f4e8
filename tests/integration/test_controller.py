"""The controller on the real Slurm dev cluster: a sweep is one array job; status, results,
resume and kill against real sbatch/sacct/squeue/scancel.

Models are served by tests/fakes/oracle_server.py through the `command` deployment; the task
is tests/fakes/ask-harness.yaml (one scored chat request), with container_runtime none.
"""

from __future__ import annotations

import csv
import stat
import subprocess
import time
import uuid
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from hpceval import api
from hpceval.backends.slurm.client import CommandSlurmClient
from hpceval.backends.slurm.records import JobRecord
from hpceval.backends.slurm.states import Phase
from hpceval.runs.control import kill_run, resume_run
from hpceval.runs.index import find_run
from hpceval.runs.state import RunState, Tracker
from tests.integration.drill_support import assert_none_left

pytestmark = pytest.mark.slurm

FAKES = Path(__file__).resolve().parents[1] / "fakes"
PYTHON = FAKES / "job_python"  # runs hpceval.job with the test venv's Python


class CountingClient(CommandSlurmClient):
    """The real client, counting the calls the controller makes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {"sbatch": 0, "sacct": 0, "scancel": 0, "squeue": 0}

    def submit(self, script_path: Path, *, extra_args: Sequence[str] = (),
               dependency: str | None = None, script_args: Sequence[str] = ()) -> str:
        self.calls["sbatch"] += 1
        return super().submit(script_path, extra_args=extra_args, dependency=dependency,
                              script_args=script_args)

    def sacct(self, job_ids: Sequence[str], *, starttime: datetime | None = None
              ) -> dict[str, JobRecord]:
        self.calls["sacct"] += 1
        return super().sacct(job_ids, starttime=starttime)

    def cancel(self, job_ids: Sequence[str]) -> None:
        self.calls["scancel"] += 1
        super().cancel(job_ids)

    def squeue(self, job_ids: Sequence[str]) -> Any:
        self.calls["squeue"] += 1
        return super().squeue(job_ids)


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


def wait_state(tracker: Tracker, want: set[Phase], timeout: float) -> RunState:
    deadline = time.monotonic() + timeout
    while True:
        (state,) = tracker.refresh(force=True)
        if state.phase in want:
            return state
        assert time.monotonic() < deadline, f"run stayed {state.phase}: {state.reason}"
        time.sleep(1.0)


ORACLE = f"exec {PYTHON} {FAKES / 'oracle_server.py'} --host 0.0.0.0 --model oracle"


def test_a_two_model_sweep_is_one_array_job(slurm_cluster: CommandSlurmClient,
                                            ask_env: Path) -> None:
    behaviour = _answer_key().behaviour
    client = CountingClient()
    run = api.submit(sweep_config(ask_env / "runs", ORACLE), client=client)
    assert client.calls["sbatch"] == 2  # the array + its dependent aggregation job
    array = run.job_ids[0]
    tracker = Tracker(client, min_interval_s=1.0)
    tracker.add(run.run_dir)
    state = wait_state(tracker, {Phase.DONE, Phase.FAILED, Phase.CANCELLED}, 90)
    assert state.phase is Phase.DONE, state
    assert [(m.key, m.job_id, m.phase) for m in state.models] == [
        ("oracle-a", f"{array}_0", Phase.DONE), ("oracle-b", f"{array}_1", Phase.DONE)]
    # both elements ran from the one dispatcher, each into its own model directory
    # (the run is DONE once every task's done marker is written; the element's last log line
    # follows after the job's final watchdog check: wait for it, bounded)
    for i, key in enumerate(("oracle-a", "oracle-b")):
        path = run.run_dir / "logs" / f"slurm-{array}_{i}.log"
        deadline = time.monotonic() + 30
        while "all 2 task(s) passed" not in path.read_text() and time.monotonic() < deadline:
            time.sleep(0.5)
        log = path.read_text()
        assert f"model {key}" in log and "all 2 task(s) passed" in log, log[-2000:]
    frame = api.results([run.invocation_id])
    want = {(m, f"ask-harness.ask_{c}"): float(behaviour(i) != "wrong")
            for m in ("oracle-a", "oracle-b") for c, i in zip("ab", _items(), strict=True)}
    assert dict(zip(zip(frame["model"], frame["task"], strict=True), frame["value"],
                    strict=True)) == want
    deadline = time.monotonic() + 30  # the afterany aggregation job follows the array
    while not (run.run_dir / "results.csv").exists():
        assert time.monotonic() < deadline, "the aggregation job wrote no results.csv"
        time.sleep(0.5)
    # one row per model and task, each from its own model's results (the table also carries
    # each task's directory, which names the model too: count rows, not substrings)
    with (run.run_dir / "results.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted((r["model"], r["task"]) for r in rows) == sorted(want)
    # execution.umask (0027) reached the jobs through sbatch: nothing they wrote is
    # world-readable (results, manifests, done markers, cache shards, logs, results.csv)
    written = [p for p in run.run_dir.rglob("*") if p.is_file() and not p.is_symlink()]
    assert any(p.name == "results.json" for p in written)
    assert any(p.name.startswith("shard-") for p in written)
    world = [f"{p}: {stat.S_IMODE(p.stat().st_mode):o}" for p in written
             if p.stat().st_mode & 0o007]
    assert world == []

    # resume after losing one model's task: only that array element is resubmitted
    (run.run_dir / "models/oracle-b/tasks/ask-harness.ask_b/done").unlink()
    entries = resume_run(find_run(run.invocation_id), client, aggregate=False)
    assert client.calls["sbatch"] == 3 and entries[0].models == (1,)
    tracker = Tracker(client, min_interval_s=1.0)
    tracker.add(run.run_dir)
    state = wait_state(tracker, {Phase.DONE, Phase.FAILED, Phase.CANCELLED}, 60)
    assert state.phase is Phase.DONE and state.models[1].job_id == f"{entries[0].id}_1"
    log = (run.run_dir / "logs" / f"slurm-{entries[0].id}_1.log").read_text()
    assert "task ask-harness.ask_a: done in an earlier job, skipped" in log
    assert not (run.run_dir / "logs" / f"slurm-{entries[0].id}_0.log").exists()


def test_kill_during_a_running_sweep_leaves_nothing(slurm_cluster: CommandSlurmClient,
                                                    ask_env: Path) -> None:
    marker = f"{3000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6:06d}"
    client = CountingClient()
    # a "server" that never gets healthy: each element sits in its health wait, running
    run = api.submit(sweep_config(ask_env / "runs", f"exec sleep {marker}", 300), client=client)
    tracker = Tracker(client, min_interval_s=1.0)
    tracker.add(run.run_dir)
    deadline = time.monotonic() + 60
    while True:
        (state,) = tracker.refresh(force=True)
        if all(m.phase is Phase.RUNNING for m in state.models):
            break
        assert time.monotonic() < deadline, state
        time.sleep(1.0)
    before = client.calls["sacct"]
    report = kill_run(find_run(run.invocation_id), client)
    assert report.still_active == [], report
    assert client.calls["scancel"] == 1 and client.calls["sacct"] == before + 1
    ids = list(run.job_ids)
    queue = subprocess.run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i %T"],
                           capture_output=True, text=True, check=False).stdout
    assert not [line for line in queue.splitlines()
                if line.split()[1] in ("PENDING", "RUNNING")], queue
    final = Tracker(client)
    final.add(run.run_dir)
    state = wait_state(final, {Phase.CANCELLED}, 20)
    assert [m.phase for m in state.models] == [Phase.CANCELLED, Phase.CANCELLED]
    records = client.sacct(ids)
    assert {r.state for j, r in records.items() if j.startswith(f"{ids[0]}_")} == {"CANCELLED"}
    assert_none_left(f"sleep {marker}")
