"""One judge per sweep on the real Slurm dev cluster: a 3-model sweep whose judge
(``auxiliary_deployments.judge``, ``scope: sweep``) is ONE job of its own.

The judge is a cheap ``type: command`` deployment: tests/fakes/reference_server.py behind a
line that appends one line per start to a file, so the number of judge loads is counted, not
assumed. The models are the oracle server answering ask-harness (as in test_controller.py).
Checked: the judge job loads once, the array elements start only after it started, it publishes
token (0600) then endpoint.json once healthy, the aggregation job's stop file ends it, and it
ends COMPLETED with its servers gone; `hpceval kill` cancels it too.
"""

from __future__ import annotations

import dataclasses
import json
import stat
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from test_controller import ORACLE, PYTHON, CountingClient, env, sweep_config

from hpceval.api import _configs
from hpceval.config.schema import AuxiliaryDeploymentSpec
from hpceval.runs.control import kill_run
from hpceval.runs.index import find_run
from hpceval.runs.state import RunState, Tracker
from hpceval.runs.submit import Submitted, submit_configs
from hpceval.slurm.client import CommandSlurmClient
from hpceval.slurm.states import Phase

pytestmark = pytest.mark.slurm
__all__ = ["env"]  # the fixture, imported from test_controller

FAKES = Path(__file__).resolve().parents[1] / "fakes"


def judge_command(loads: Path, startup_delay: float = 2.0) -> str:
    """The fake judge: one line per load in `loads`, then a server that is ready after
    `startup_delay` seconds (a model load)."""
    return (f'echo "$(date +%s.%N) ${{SLURM_JOB_ID:-local}} $(hostname)" >> {loads}; '
            f"exec {PYTHON} {FAKES / 'reference_server.py'} --model judge-model "
            f"--startup-delay {startup_delay}")


def submit_judged_sweep(out: Path, judge: str, models: int = 3,
                        client: CommandSlurmClient | None = None) -> Submitted:
    config: dict[str, Any] = sweep_config(out, ORACLE)
    config["models"] = [{"name": f"oracle-{c}"} for c in "abc"[:models]]
    config["execution"]["max_walltime"] = "00:10:00"  # the judge job's walltime
    aux = AuxiliaryDeploymentSpec(type="command", runtime="host", command=judge,
                                  served_model_name="judge-model", gpus_per_instance=0,
                                  scope="sweep", health_timeout=60)
    # The loader's side of auxiliary_deployments (NEL's form) is branch aux-job's: the
    # judge is set on the loaded configs here, as the loader will produce them.
    loaded = [dataclasses.replace(c, spec=dataclasses.replace(
        c.spec, auxiliary_deployments={"judge": aux}))
        for c in _configs(config, (), None, True)]
    return submit_configs(loaded, client)


def _sacct(ids: list[str]) -> dict[str, tuple[str, str, str]]:
    """job id -> (state, start, end) from the real sacct (array tasks as <id>_<i>)."""
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", ",".join(ids),
                          "-o", "JobID,State,Start,End"], capture_output=True, text=True,
                         check=True).stdout
    rows = [line.split("|") for line in out.splitlines() if line.strip()]
    return {r[0]: (r[1].split()[0], r[2], r[3]) for r in rows}


def test_a_three_model_sweep_loads_its_judge_once(slurm_cluster: CommandSlurmClient,
                                                  env: Path) -> None:
    loads = env / "judge-loads"
    client = CountingClient()
    run = submit_judged_sweep(env / "runs", judge_command(loads), client=client)
    array, aggregate, judge = run.job_ids
    assert client.calls["sbatch"] == 3  # judge, array, aggregation
    folder = run.run_dir / "auxiliary" / "judge"
    tracker = Tracker(client, min_interval_s=1.0)
    tracker.add(run.run_dir)
    endpoint: dict[str, Any] | None = None
    serving: RunState | None = None
    deadline = time.monotonic() + 150
    while True:  # watch endpoint.json appear while the sweep runs
        if endpoint is None and (folder / "endpoint.json").is_file():
            endpoint = json.loads((folder / "endpoint.json").read_text())
            (serving,) = tracker.refresh(force=True)
        (state,) = tracker.refresh()
        if state.phase.terminal and (folder / "stop").exists():
            break
        assert time.monotonic() < deadline, f"sweep stayed {state.phase}: {state.reason}"
        time.sleep(0.5)
    assert state.phase is Phase.DONE, state
    assert endpoint is not None, "endpoint.json never appeared while the sweep ran"
    assert endpoint["model_id"] == "judge-model" and endpoint["job_id"] == judge
    assert len(endpoint["urls"]) == 1 and endpoint["urls"][0].startswith("http://")
    assert serving is not None and serving.judges[0].phase is Phase.RUNNING
    token = folder / "token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and len(token.read_text().strip()) == 64

    # the judge job ends on the aggregation job's stop file: COMPLETED, endpoint withdrawn
    deadline = time.monotonic() + 60
    while True:
        records = _sacct([judge, array, aggregate])
        if records.get(judge, ("",))[0] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            break
        assert time.monotonic() < deadline, records
        time.sleep(1.0)
    assert records[judge][0] == "COMPLETED", records
    assert records[aggregate][0] == "COMPLETED", records
    assert not (folder / "endpoint.json").exists()
    log = (folder / f"slurm-{judge}.log").read_text()
    assert "judge serves at http://" in log and "the sweep is done" in log, log

    # ONE load for three models; every element started after the judge job had started
    lines = loads.read_text().splitlines()
    assert len(lines) == 1 and lines[0].split()[1] == judge, lines
    elements = _sacct([f"{array}_{i}" for i in range(3)])
    judge_start = records[judge][1]
    assert len(elements) == 3 and all(start >= judge_start for _, start, _ in
                                      elements.values()), (judge_start, elements)
    final = Tracker(client)
    final.add(run.run_dir)
    (state,) = final.refresh(force=True)
    assert [(j.phase, j.reason) for j in state.judges] == [
        (Phase.DONE, "stopped after the sweep")]


def test_kill_cancels_the_judge_job(slurm_cluster: CommandSlurmClient, env: Path) -> None:
    marker = f"{4000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6:06d}"
    client = CountingClient()
    # a judge that never gets healthy: it sits in its health wait, running
    run = submit_judged_sweep(env / "runs", f"exec sleep {marker}", models=2, client=client)
    judge = run.job_ids[-1]
    tracker = Tracker(client, min_interval_s=1.0)
    tracker.add(run.run_dir)
    deadline = time.monotonic() + 60
    while True:
        (state,) = tracker.refresh(force=True)
        if state.judges[0].phase is Phase.RUNNING:
            break
        assert time.monotonic() < deadline, state.judges
        time.sleep(1.0)
    assert state.judges[0].reason == "loading (no endpoint.json yet)"
    report = kill_run(find_run(run.invocation_id), client)
    assert report.still_active == [] and judge in report.cancelled
    deadline = time.monotonic() + 30
    while state.judges[0].phase is not Phase.CANCELLED:
        assert time.monotonic() < deadline, state.judges
        time.sleep(1.0)
        (state,) = tracker.refresh(force=True)
    time.sleep(3)  # KillWait=2 on the dev cluster, then SIGKILL
    left = subprocess.run(["pgrep", "-af", f"sleep {marker}"], capture_output=True,
                          text=True, check=False).stdout
    assert not [line for line in left.splitlines() if "pgrep" not in line], left
