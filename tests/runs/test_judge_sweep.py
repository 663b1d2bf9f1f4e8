"""A sweep's judge job through the controller, with the fake Slurm: submission order and
dependencies, jobs.json, kill, status and resume."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pytest
from support.runs import configs, finish_task, judged, submitted
from support.slurm import FakeSlurm

from hpceval.backends.slurm.states import Phase
from hpceval.runs.control import kill_run, resume_run
from hpceval.runs.display import format_states, rich_states, state_to_dict
from hpceval.runs.index import find_run
from hpceval.runs.jobs import read_jobs
from hpceval.runs.state import RunState, Tracker
from hpceval.runs.submit import Submitted, submit_configs

ONE, TWO = "ut-harness.ut_one", "ut-harness.ut_two"


def test_judge_first_array_after_it_started_aggregation_after_the_array(
        tmp_path: Path, fake: FakeSlurm) -> None:
    result, array, aggregate, judge = submitted(tmp_path, fake)
    run_dir = result.run_dir
    assert [(s["script"], s["dependency"]) for s in fake.submits] == [
        (run_dir / "auxiliary/judge/judge.sbatch", None),
        (run_dir / "sweep.sbatch", f"after:{judge}"),
        (run_dir / "aggregate.sbatch", f"afterany:{array}")]
    assert result.roles == ("main", "aggregate", "judge judge")
    chain = read_jobs(run_dir).chain
    assert [(e.id, e.role, e.aux, e.models) for e in chain] == [
        (judge, "judge", "judge", ()), (array, "main", None, (0, 1, 2)),
        (aggregate, "aggregate", None, ())]
    run = json.loads((run_dir / "run.json").read_text())
    assert run["auxiliary"] == [{"name": "judge", "script": "auxiliary/judge/judge.sbatch"}]
    stop = (run_dir / "aggregate.sbatch").read_text()
    assert f": > {run_dir}/auxiliary/judge/stop" in stop


def test_no_aggregate_still_submits_the_job_that_ends_the_judge(tmp_path: Path,
                                                                fake: FakeSlurm) -> None:
    result, *_ = submitted(tmp_path, fake, aggregate=False)
    assert [s["script"].name for s in fake.submits] == [
        "judge.sbatch", "sweep.sbatch", "aggregate.sbatch"]
    assert len(result.job_ids) == 3


def test_without_a_sweep_judge_nothing_changes(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path, 2, execution={"type": "slurm"}), fake)
    assert [s["dependency"] for s in fake.submits] == [None, f"afterany:{result.job_ids[0]}"]
    assert json.loads((result.run_dir / "run.json").read_text())["auxiliary"] == []


def test_kill_cancels_the_judge_job_too(tmp_path: Path, fake: FakeSlurm) -> None:
    result, array, aggregate, judge = submitted(tmp_path, fake)
    fake.states.update({judge: "RUNNING", f"{array}_0": "RUNNING", f"{array}_1": "PENDING",
                        f"{array}_2": "PENDING", aggregate: "PENDING"})
    report = kill_run(find_run(result.invocation_id), fake, sleep=lambda _: None)
    assert fake.cancels == [[judge, array, aggregate]] and report.still_active == []
    assert fake.states[judge].startswith("CANCELLED")


def test_status_has_a_line_for_the_judge(tmp_path: Path, fake: FakeSlurm) -> None:
    result, array, _, judge = submitted(tmp_path, fake)
    folder = result.run_dir / "auxiliary" / "judge"
    fake.states.update({judge: "RUNNING", f"{array}_0": "PENDING", f"{array}_1": "PENDING",
                        f"{array}_2": "PENDING"})
    tracker = Tracker(fake, min_interval_s=0.0)
    tracker.add(result.run_dir)
    (state,) = tracker.refresh(force=True)
    assert [(j.name, j.phase, j.job_id) for j in state.judges] == [
        ("judge", Phase.RUNNING, judge)]
    assert state.judges[0].reason == "loading (no endpoint.json yet)"
    assert len(fake.sacct_calls) == 1  # the judge is asked in the models' one call
    (folder / "endpoint.json").write_text(json.dumps(
        {"urls": ["http://n1:8000", "http://n1:8001"], "model_id": "judge-m", "job_id": judge}))
    published = time.time() - 600  # ready 10 minutes ago, and the array still queues
    os.utime(folder / "endpoint.json", (published, published))
    (state,) = tracker.refresh(force=True)
    assert state.judges[0].reason == ("serving 2 instance(s); no model's job has left the queue "
                                      "yet: its GPUs have waited 10 min for them")
    fake.states[f"{array}_0"] = "RUNNING"  # one element runs: the judge serves it
    (state,) = tracker.refresh(force=True)
    assert state.judges[0].reason == "serving 2 instance(s)"
    text = format_states([state])
    assert f"  judge judge  running    job {judge}  serving 2 instance(s)" in text
    assert state_to_dict(state)["judges"][0]["state"] == "running"
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(rich_states([state]))
    assert any("judge judge" in line and judge in line and "serving 2 instance(s)" in line
               for line in console.export_text().splitlines())
    # the judge failed: its job-failure line is the reason
    fake.states[judge] = "FAILED"
    (folder / "job-failure").write_text("model server instance 0 (head) on n1 exited\n")
    (state,) = _fresh(result, fake)
    assert state.judges[0].phase is Phase.FAILED
    assert state.judges[0].reason.startswith("model server instance 0 (head) on n1 exited")


def _fresh(result: Submitted, fake: FakeSlurm) -> list[RunState]:
    tracker = Tracker(fake, min_interval_s=0.0)
    tracker.add(result.run_dir)
    return tracker.refresh(force=True)


def _timed_out(result: Submitted, fake: FakeSlurm, array: str, aggregate: str) -> None:
    for i in range(3):
        fake.states[f"{array}_{i}"] = "TIMEOUT"
    fake.states[aggregate] = "COMPLETED"
    for model in ("model-00", "model-02"):
        for key in (ONE, TWO):
            finish_task(result.run_dir, model, key)


def test_resume_submits_a_new_judge_when_the_old_one_ended(tmp_path: Path,
                                                           fake: FakeSlurm) -> None:
    result, array, aggregate, judge = submitted(tmp_path, fake)
    _timed_out(result, fake, array, aggregate)
    fake.states[judge] = "COMPLETED"
    folder = result.run_dir / "auxiliary" / "judge"
    (folder / "stop").touch()  # the aggregation ended it
    (folder / "endpoint.json").write_text("{}")  # stale: a killed judge leaves one
    (folder / "token").write_text("old\n")
    (folder / "job-failure").write_text("model server exited\n")  # the old judge's
    entries = resume_run(find_run(result.invocation_id), fake, aggregate=False)
    new_judge, resubmit, new_aggregate = fake.submits[3:]
    assert new_judge["script"] == folder / "judge.sbatch"
    assert resubmit["dependency"] == f"after:{new_judge['id']}"
    assert resubmit["extra_args"] == ["--array=1%2"]  # only the unfinished model
    # the aggregation job comes even with aggregate=False: it ends the new judge
    assert new_aggregate["dependency"] == f"afterany:{resubmit['id']}"
    for stale in ("stop", "endpoint.json", "token", "job-failure"):
        assert not (folder / stale).exists(), stale
    assert [e.role for e in entries] == ["main", "aggregate", "judge"]
    newest = read_jobs(result.run_dir).judge("judge")
    assert newest is not None and newest.id == new_judge["id"]


def test_resume_reuses_a_judge_that_still_serves(tmp_path: Path, fake: FakeSlurm) -> None:
    result, array, aggregate, judge = submitted(tmp_path, fake)
    _timed_out(result, fake, array, aggregate)
    fake.states[judge] = "RUNNING"  # no stop file: it serves (e.g. --no-aggregate earlier)
    resume_run(find_run(result.invocation_id), fake)
    resubmit, _ = fake.submits[3:]
    assert resubmit["dependency"] == f"after:{judge}"
    assert fake.cancels == []


def test_resume_cancels_a_judge_that_is_stopping(tmp_path: Path, fake: FakeSlurm) -> None:
    result, array, aggregate, judge = submitted(tmp_path, fake)
    _timed_out(result, fake, array, aggregate)
    fake.states[judge] = "RUNNING"
    (result.run_dir / "auxiliary" / "judge" / "stop").touch()
    resume_run(find_run(result.invocation_id), fake)
    assert fake.cancels == [[judge]]  # removing its stop file must not keep it serving
    new_judge, resubmit, _ = fake.submits[3:]
    assert resubmit["dependency"] == f"after:{new_judge['id']}"


@pytest.mark.parametrize("started", [(), ("5",)])
def test_slurm_backend_dependency_text(tmp_path: Path, fake: FakeSlurm,
                                       started: tuple[str, ...]) -> None:
    from hpceval.backends import JobRequest
    from hpceval.backends.slurm.backend import SlurmBackend

    backend = SlurmBackend(fake)
    backend.submit(tmp_path, JobRequest("x.sbatch", after=("7",), started_after=started))
    backend.submit(tmp_path, JobRequest("y.sbatch", started_after=("5", "6")))
    want = "after:5,afterany:7" if started else "afterany:7"
    assert [s["dependency"] for s in fake.submits] == [want, "after:5:6"]


def test_the_aggregation_script_waits_for_successors_before_it_stops_the_judge(
        tmp_path: Path, fake: FakeSlurm) -> None:
    """The rendered aggregate.sbatch, run with bash (this Python, the fake sbatch on PATH): an
    element that continues in an auto-resume successor still needs the judge."""
    import os
    import subprocess
    import sys

    from support import FAKES

    from hpceval.contract import AGGREGATE_WAITED_FILE, SUCCESSORS_FILE

    loaded = [dataclasses.replace(c, spec=dataclasses.replace(c.spec, execution=dataclasses.replace(
        c.spec.execution, python=sys.executable))) for c in judged(tmp_path)]
    result = submit_configs(loaded, fake)
    run_dir = result.run_dir
    folder = run_dir / "auxiliary" / "judge"
    log = tmp_path / "sbatch.log"
    env = {**os.environ, "FAKE_SBATCH_LOG": str(log),
           "PATH": f"{FAKES / 'recording_sbatch'}:{os.environ['PATH']}"}

    def aggregate() -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(run_dir / "aggregate.sbatch")], env=env,
                              capture_output=True, text=True, check=False, cwd=run_dir)

    (run_dir / SUCCESSORS_FILE).write_text("4001 model-01\n")
    first = aggregate()
    assert first.returncode == 0, first.stderr
    assert "aggregation waits for them" in first.stdout
    assert not (folder / "stop").exists()  # the successor needs the judge
    assert not (run_dir / "results.csv").exists()
    assert "--dependency=afterany:4001" in log.read_text()
    assert str(run_dir / "aggregate.sbatch") in log.read_text()
    assert (run_dir / AGGREGATE_WAITED_FILE).read_text() == "4001\n"
    chain = read_jobs(run_dir).chain
    assert [(e.role, e.reason) for e in chain][-1] == ("aggregate", "auto-resume")
    for i in range(3):
        for key in (ONE, TWO):
            finish_task(run_dir, f"model-{i:02d}", key)
    second = aggregate()  # the successor has ended: aggregate, then stop the judge
    assert second.returncode == 0, second.stderr
    assert (folder / "stop").exists() and (run_dir / "results.csv").exists()
    assert len(log.read_text().splitlines()) == 1


def test_info_names_the_judge_job(tmp_path: Path, fake: FakeSlurm) -> None:
    from click.testing import CliRunner

    from hpceval.cli.main import cli

    result, _, _, judge = submitted(tmp_path, fake)
    out = CliRunner().invoke(cli, ["info", result.invocation_id])
    assert out.exit_code == 0, out.output
    assert f"job        {judge} judge judge (submit, " in out.output


def test_logs_show_the_judge_job(tmp_path: Path, fake: FakeSlurm) -> None:
    from hpceval.runs.logs import log_files
    from hpceval.runs.state import read_run

    result, _, _, judge = submitted(tmp_path, fake)
    run_dir = result.run_dir
    (run_dir / "auxiliary/judge/server").mkdir(parents=True, exist_ok=True)
    (run_dir / "auxiliary/judge/server/instance-0.log").write_text("up\n")
    run, jobs = read_run(run_dir), read_jobs(run_dir)
    assert log_files(run_dir, run, jobs)[-1] == (
        "judge judge job", run_dir / "auxiliary" / "judge" / f"slurm-{judge}.log")
    assert log_files(run_dir, run, jobs, server=True)[-1] == (
        "judge judge server instance-0", run_dir / "auxiliary/judge/server/instance-0.log")
    assert all(not label.startswith("judge")
               for label, _ in log_files(run_dir, run, jobs, model="model-00"))
