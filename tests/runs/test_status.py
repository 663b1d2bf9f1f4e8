"""Tracking: one sacct per refresh for any number of jobs; markers beat the scheduler."""

from __future__ import annotations

import json
import time
from pathlib import Path

from click.testing import CliRunner
from support.runs import configs, finish_task
from support.slurm import FakeSlurm

from hpceval.backends.base import JobEntry
from hpceval.backends.slurm.states import Phase
from hpceval.runs.jobs import append_jobs
from hpceval.runs.state import Tracker
from hpceval.runs.submit import submit_configs

ONE, TWO = "ut-harness.ut_one", "ut-harness.ut_two"


def test_a_refresh_of_50_jobs_is_one_sacct_call(tmp_path: Path, fake: FakeSlurm) -> None:
    runs = configs(tmp_path)
    tracker = Tracker(fake)
    for i in range(40):  # 40 single-model runs ...
        result = submit_configs(runs, fake)
        fake.states[result.job_ids[0]] = "RUNNING" if i % 2 else "PENDING"
        tracker.add(result.run_dir)
    sweep = submit_configs(configs(tmp_path / "s", 10), fake, aggregate=False)
    for i in range(10):  # ... and one sweep of 10 array tasks: 50 jobs
        fake.states[f"{sweep.job_ids[0]}_{i}"] = "RUNNING"
    tracker.add(sweep.run_dir)
    states = tracker.refresh(force=True)
    assert len(fake.sacct_calls) == 1
    assert len(fake.sacct_calls[0]) == 50
    assert {s.phase for s in states} == {Phase.RUNNING, Phase.QUEUED}
    tracker.refresh()  # inside the rate limit: no second call
    assert len(fake.sacct_calls) == 1


def test_finished_jobs_are_not_asked_about_again(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    fake.states[result.job_ids[0]] = "FAILED"
    first = Tracker(fake)
    first.add(result.run_dir)
    assert first.refresh(force=True)[0].phase is Phase.FAILED
    later = Tracker(fake)  # a later `hpceval status`: the cached final state answers
    later.add(result.run_dir)
    assert later.refresh(force=True)[0].phase is Phase.FAILED
    assert len(fake.sacct_calls) == 1


def test_done_markers_need_no_sacct(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    for key in (ONE, TWO):
        finish_task(result.run_dir, "solo", key)
    tracker = Tracker(fake)
    tracker.add(result.run_dir)
    (state,) = tracker.refresh(force=True)
    assert state.phase is Phase.DONE
    assert fake.sacct_calls == []


def test_a_job_sacct_does_not_list_yet_is_unknown_not_failed(tmp_path: Path,
                                                              fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    tracker = Tracker(fake)
    tracker.add(result.run_dir)
    (state,) = tracker.refresh(force=True)
    assert state.phase is Phase.UNKNOWN
    assert state.models[0].tasks[0].phase is Phase.QUEUED


def test_task_failures_give_the_reason(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    finish_task(result.run_dir, "solo", ONE)
    failed = result.run_dir / "models" / "solo" / "tasks" / TWO
    failed.mkdir(parents=True)
    (failed / "failed.json").write_text(json.dumps({"reason": "harness exited with status 2"}))
    fake.states[result.job_ids[0]] = "FAILED"
    tracker = Tracker(fake)
    tracker.add(result.run_dir)
    (state,) = tracker.refresh(force=True)
    model = state.models[0]
    assert model.phase is Phase.FAILED
    assert model.reason == f"1/2 task(s) failed: {TWO}: harness exited with status 2"
    assert [t.phase for t in model.tasks] == [Phase.DONE, Phase.FAILED]


def test_running_task_and_live_progress(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    model_dir = result.run_dir / "models" / "solo"
    (model_dir / "tasks" / ONE).mkdir(parents=True)
    (model_dir / "tasks" / ONE / "command.sh").write_text("true\n")
    (model_dir / "progress.json").write_text(json.dumps({
        "requests": {"done": 120, "failed": 0, "expected": 500}, "rate_per_s": 4.0,
        "eta_s": 95.0}))
    fake.states[result.job_ids[0]] = "RUNNING"
    tracker = Tracker(fake)
    tracker.add(result.run_dir)
    (state,) = tracker.refresh(force=True)
    model = state.models[0]
    assert [t.phase for t in model.tasks] == [Phase.RUNNING, Phase.QUEUED]
    assert model.progress is not None and model.progress.done == 120
    from hpceval.runs.display import format_states

    assert "120/500, 4.0/s, ETA 1m35s" in format_states([state])


def test_a_resubmitted_job_is_followed_and_reads_resuming(tmp_path: Path,
                                                          fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path, 3), fake, aggregate=False)
    base = result.job_ids[0]
    for i in range(3):
        fake.states[f"{base}_{i}"] = "TIMEOUT"
    append_jobs(result.run_dir, "slurm", [JobEntry("2000", "slurm", "main", (1, 2), True,
                                                   1e9, "resume")])
    fake.states["2000_1"] = "PENDING"
    fake.states["2000_2"] = "RUNNING"
    tracker = Tracker(fake)
    tracker.add(result.run_dir)
    (state,) = tracker.refresh(force=True)
    phases = {m.key: (m.phase, m.job_id) for m in state.models}
    assert phases == {"model-00": (Phase.FAILED, f"{base}_0"),
                      "model-01": (Phase.RESUMING, "2000_1"),
                      "model-02": (Phase.RUNNING, "2000_2")}
    assert len(fake.sacct_calls) == 1


def test_status_cli_json(tmp_path: Path, fake: FakeSlurm, monkeypatch: object) -> None:
    import pytest

    result = submit_configs(configs(tmp_path, 2), fake)
    fake.states[f"{result.job_ids[0]}_0"] = "RUNNING"
    fake.states[f"{result.job_ids[0]}_1"] = "COMPLETED"
    mp = pytest.MonkeyPatch()
    mp.setattr("hpceval.backends.slurm.client.CommandSlurmClient", lambda **_: fake)
    try:
        from hpceval.cli.main import cli

        out = CliRunner().invoke(cli, ["status", "--json"])
        text = CliRunner().invoke(cli, ["status", result.invocation_id[:18]])
        listing = CliRunner().invoke(cli, ["ls", "runs"])
    finally:
        mp.undo()
    assert out.exit_code == 0, out.output
    (run,) = json.loads(out.output)
    assert run["state"] == "running"
    assert [m["state"] for m in run["models"]] == ["running", "failed"]
    assert run["models"][1]["reason"] == "the job ended but tasks are unfinished"
    assert text.exit_code == 0 and "model-00  running" in text.output
    assert result.invocation_id in listing.output


def test_successors_a_job_submitted_itself_are_followed(tmp_path: Path, fake: FakeSlurm) -> None:
    from hpceval.runs.jobs import read_jobs

    single = submit_configs(configs(tmp_path / "one"), fake)
    first = single.job_ids[0]
    (single.run_dir / "jobs.chain").write_text("4001\n")  # auto-resume, single model
    fake.states.update({first: "TIMEOUT", "4001": "PENDING"})
    sweep = submit_configs(configs(tmp_path / "two", 2), fake, aggregate=False)
    (sweep.run_dir / "jobs.chain").write_text("4002 model-01\n")  # a sweep: key given
    fake.states.update({f"{sweep.job_ids[0]}_0": "COMPLETED",
                        f"{sweep.job_ids[0]}_1": "TIMEOUT", "4002": "RUNNING"})
    tracker = Tracker(fake)
    tracker.add(single.run_dir)
    tracker.add(sweep.run_dir)
    one, two = tracker.refresh(force=True)
    assert (one.models[0].phase, one.models[0].job_id) == (Phase.RESUMING, "4001")
    assert [m.job_id for m in two.models] == [f"{sweep.job_ids[0]}_0", "4002"]
    assert two.models[1].phase is Phase.RUNNING
    assert len(fake.sacct_calls) == 1
    assert read_jobs(single.run_dir).ids == [first, "4001"]


def test_one_refresh_asks_each_backend_once_and_a_local_run_never_asks_slurm(
        tmp_path: Path, fake: FakeSlurm) -> None:
    from hpceval.runs.submit import create_run

    slurm_runs = [submit_configs(configs(tmp_path / f"s{i}", 2), fake) for i in range(3)]
    local = create_run(configs(tmp_path / "l", execution={"type": "local"}))
    append_jobs(local.run_dir, "local", [JobEntry("local-1", "local", "main", (0,), False,
                                                  time.time())])  # no pid: it has ended
    for run in slurm_runs:
        fake.states.update({f"{run.job_ids[0]}_{i}": "RUNNING" for i in range(2)})
    tracker = Tracker(fake)
    for run in slurm_runs:
        tracker.add(run.run_dir)
    tracker.add(local.run_dir)
    states = tracker.refresh(force=True)
    assert len(fake.sacct_calls) == 1  # six array tasks of three runs: one sacct
    assert [s.phase for s in states] == [Phase.RUNNING] * 3 + [Phase.FAILED]
    assert states[-1].models[0].reason == "the local runner ended without a status"

    alone = Tracker(fake)
    alone.add(local.run_dir)
    alone.refresh(force=True)
    assert len(fake.sacct_calls) == 1 and list(alone._backends) == ["local"]
