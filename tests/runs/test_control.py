"""kill and resume through the job chain; logs and info; local execution for real."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from support.runs import configs, finish_task
from support.slurm import FakeSlurm

from hpceval.backends.slurm.states import Phase
from hpceval.durations import walltime_seconds
from hpceval.runs.control import ResumeRefused, kill_run, resume_run
from hpceval.runs.index import find_run
from hpceval.runs.jobs import read_jobs
from hpceval.runs.logs import log_files
from hpceval.runs.state import Tracker, read_run
from hpceval.runs.submit import submit_configs

ONE, TWO = "ut-harness.ut_one", "ut-harness.ut_two"


def test_kill_cancels_every_job_of_the_chain_and_verifies(tmp_path: Path,
                                                          fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path, 3), fake)
    array, aggregate = result.job_ids
    fake.states.update({f"{array}_0": "RUNNING", f"{array}_1": "PENDING",
                        f"{array}_2": "COMPLETED", aggregate: "PENDING"})
    report = kill_run(find_run(result.invocation_id), fake, sleep=lambda _: None)
    assert fake.cancels == [[array, aggregate]]  # one scancel, the array by its base id
    assert report.still_active == []
    # one squeue for the owners before scancel, one to verify after it
    assert len(fake.squeue_calls) == 2 and len(fake.sacct_calls) == 1
    assert all(e.cancelled_at for e in read_jobs(result.run_dir).chain)


def test_kill_reports_what_stays_active(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    fake.states[result.job_ids[0]] = "COMPLETING"
    report = kill_run(find_run(result.invocation_id), fake, verify_s=0.0,
                      sleep=lambda _: None)
    assert report.still_active == [result.job_ids[0]]


def test_resume_resubmits_only_unfinished_array_elements(tmp_path: Path,
                                                         fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path, 4), fake)
    array = result.job_ids[0]
    for i in range(4):
        fake.states[f"{array}_{i}"] = "TIMEOUT"
    fake.states[result.job_ids[1]] = "COMPLETED"
    for model in ("model-00", "model-02"):
        for key in (ONE, TWO):
            finish_task(result.run_dir, model, key)
    finish_task(result.run_dir, "model-01", ONE)  # half done: the job skips it
    entries = resume_run(find_run(result.invocation_id), fake)
    resubmit, aggregate = fake.submits[2:]
    assert resubmit["script"] == result.run_dir / "sweep.sbatch"  # the same dispatcher
    assert resubmit["extra_args"] == ["--array=1,3%2"]
    assert aggregate["dependency"] == f"afterany:{resubmit['id']}"
    jobs = read_jobs(result.run_dir)
    assert jobs.ids == [array, result.job_ids[1], resubmit["id"], aggregate["id"]]
    assert jobs.current(1).scheduler_id(1) == f"{resubmit['id']}_1"  # type: ignore[union-attr]
    assert jobs.current(0).id == array  # type: ignore[union-attr]
    assert entries[0].reason == "resume"


def test_a_run_whose_first_sbatch_failed_resumes_on_its_backend(tmp_path: Path,
                                                               fake: FakeSlurm) -> None:
    from hpceval.runs.index import ref_from_dir
    from hpceval.runs.submit import create_run

    run = create_run(configs(tmp_path))  # written, never submitted: no jobs.json
    assert read_jobs(run.run_dir).chain == ()
    # status reads it "unknown" (no job recorded), so resume wants --force
    [entry] = resume_run(ref_from_dir(run.run_dir), fake, force=True)
    assert (entry.kind, entry.reason) == ("slurm", "resume")
    assert fake.submits[0]["script"] == run.run_dir / "job.sbatch"
    assert read_jobs(run.run_dir).ids == [entry.id]


def test_resume_refuses_while_jobs_live_and_when_all_done(tmp_path: Path,
                                                          fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    ref = find_run(result.invocation_id)
    fake.states[result.job_ids[0]] = "RUNNING"
    with pytest.raises(ResumeRefused, match="still has live work"):
        resume_run(ref, fake)
    for key in (ONE, TWO):
        finish_task(result.run_dir, "solo", key)
    with pytest.raises(ResumeRefused, match="every task is done"):
        resume_run(ref, fake)
    assert len(fake.submits) == 1


def test_logs_point_at_the_newest_job(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path, 2), fake, aggregate=False)
    run, jobs = read_run(result.run_dir), read_jobs(result.run_dir)
    files = log_files(result.run_dir, run, jobs)
    array = result.job_ids[0]
    assert [p for _, p in files] == [result.run_dir / "logs" / f"slurm-{array}_{i}.log"
                                     for i in range(2)]
    (task,) = log_files(result.run_dir, run, jobs, model="model-01", task="ut_two")
    assert task[1] == result.run_dir / "models/model-01/tasks" / TWO / "harness.log"


def test_server_logs_include_the_judges(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path, 2), fake, aggregate=False)
    run, jobs = read_run(result.run_dir), read_jobs(result.run_dir)
    model_dir = result.run_dir / "models" / "model-01"
    for path in (model_dir / "server" / "instance-0.log", model_dir / "proxy.log",
                 model_dir / "auxiliary" / "judge" / "server" / "instance-0.log",
                 model_dir / "auxiliary" / "judge" / "proxy.log"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x\n")
    files = log_files(result.run_dir, run, jobs, model="model-01", server=True)
    assert [label for label, _ in files] == [
        "model-01 server instance-0", "model-01 proxy", "model-01 judge server instance-0",
        "model-01 judge proxy"]


def test_info_lists_scripts_and_chain(tmp_path: Path, fake: FakeSlurm) -> None:
    from hpceval.cli.main import cli

    result = submit_configs(configs(tmp_path, 2), fake)
    out = CliRunner().invoke(cli, ["info", result.invocation_id, "--script"])
    assert out.exit_code == 0, out.output
    assert f"job        {result.job_ids[0]} main" in out.output
    assert "# ===== sweep.sbatch =====" in out.output
    assert "models/model-01/job.sh" in out.output
    missing = CliRunner().invoke(cli, ["info", "nope"])
    assert missing.exit_code == 1 and "no run 'nope'" in missing.output


def test_walltime_formats() -> None:
    assert walltime_seconds("30") == 1800
    assert walltime_seconds("01:30") == 90
    assert walltime_seconds("04:00:00") == 14400
    assert walltime_seconds("1-02") == 93600
    assert walltime_seconds("1-00:00:10") == 86410


def _local_run(tmp_path: Path, command: str, walltime: str = "00:05:00") -> Path:
    run = {
        "defaults": [{"execution": "local"}],
        "execution": {"gpus_per_node": 0, "output_dir": str(tmp_path / "out"),
                      "walltime": walltime, "signal_seconds": 30},
        "deployment": {"type": "command", "runtime": "host", "command": command,
                       "health_timeout": 20, "served_model_name": "loc"},
        "evaluation": {"tasks": [{"name": "ut_one"}]},
    }
    path = tmp_path / "job-on-this-machine.yaml"  # not local.yaml: that would be the profile
    path.write_text(yaml.safe_dump(run))
    return path


def test_local_execution_runs_kills_and_resumes(tmp_path: Path) -> None:
    from hpceval.config import load_run

    # A "server" that never becomes healthy: the job waits in the health loop until killed.
    path = _local_run(tmp_path, "exec sleep 300")
    result = submit_configs(load_run(path, check_environment=False))
    ref = find_run(result.invocation_id)
    entry = read_jobs(result.run_dir).chain[0]
    assert entry.kind == "local" and entry.pid and entry.pid_start
    tracker = Tracker()
    tracker.add(ref)
    deadline = time.monotonic() + 20
    while tracker.refresh(force=True)[0].phase is not Phase.RUNNING:
        assert time.monotonic() < deadline, "the local job did not start"
        time.sleep(0.2)
    report = kill_run(ref)
    assert report.cancelled == [entry.id] and report.still_active == []
    (state,) = tracker.refresh(force=True)
    assert state.phase is Phase.CANCELLED
    resumed = resume_run(ref)
    assert resumed[0].reason == "resume" and len(read_jobs(result.run_dir).chain) == 2
    assert kill_run(ref).still_active == []


def test_follow_prints_what_appears_until_the_run_ends(tmp_path: Path) -> None:
    import io

    from hpceval.runs.logs import follow

    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("one\n")
    out = io.StringIO()
    polls = iter([False, False, True])

    def sleep(_: float) -> None:  # the job writes between polls; b appears later
        with a.open("a") as handle:
            handle.write("two\n")
        b.write_text("server up\n")

    follow([("job", a), ("server", b)], lambda: next(polls), out, sleep=sleep)
    text = out.getvalue()
    assert text.count("one\n") == 1 and text.count("two\n") == 2
    assert "===== server" in text and "server up" in text


@pytest.mark.parametrize("n_models", [1, 2])
def test_resume_refuses_while_a_variable_the_job_reads_is_unset(
        tmp_path: Path, fake: FakeSlurm, monkeypatch: pytest.MonkeyPatch, n_models: int) -> None:
    """submit checked it in its shell; a resume from another shell must check again, before
    the job queues and loads the model only to stop at ${NAME:?...}."""
    result = submit_configs(configs(tmp_path, n_models, execution={
        "env_vars": {"UT_TOKEN": "host:UT_TOKEN"}}), fake)
    for job_id in result.job_ids:
        fake.states[job_id] = "TIMEOUT"
    for i in range(n_models):
        fake.states[f"{result.job_ids[0]}_{i}"] = "TIMEOUT"
    monkeypatch.delenv("UT_TOKEN", raising=False)
    before = len(fake.submits)
    with pytest.raises(ResumeRefused, match=r"\$UT_TOKEN by name .* `export UT_TOKEN=\.\.\.`"):
        resume_run(find_run(result.invocation_id), fake)
    assert len(fake.submits) == before  # nothing submitted
    monkeypatch.setenv("UT_TOKEN", "s3cret")
    assert resume_run(find_run(result.invocation_id), fake)
    assert len(fake.submits) > before


def test_kill_leaves_alone_a_job_of_yours_that_is_not_this_runs(
        tmp_path: Path, fake: FakeSlurm, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24, finding 6: a jobs.json (planted, or copied from another run) naming one of
    the user's own jobs, a training job, must not cancel it: every job of a run carries the
    run's id in its --comment (the rendered header), and kill checks it (one squeue call)."""
    result = submit_configs(configs(tmp_path, 3), fake)
    array, aggregate = result.job_ids
    # what submit gave the fake: the rendered headers' comments, the run's id in both
    assert fake.comments == {array: f"hpceval:{result.invocation_id}",
                             aggregate: f"hpceval:{result.invocation_id}"}
    fake.states.update({f"{array}_0": "RUNNING", aggregate: "PENDING"})
    fake.comments[aggregate] = "training run 7"  # the user's own job, named by a jobs.json
    report = kill_run(find_run(result.invocation_id), fake, sleep=lambda _: None)
    assert fake.cancels == [[array]]
    assert report.cancelled == [array] and report.foreign == {aggregate: "training run 7"}
    assert report.skipped == {} and fake.states[aggregate] == "PENDING"
    assert fake.squeue_calls[0] == [array, aggregate]  # ONE look-up for owners and comments
    chain = {e.id: e for e in read_jobs(result.run_dir).chain}
    assert not chain[aggregate].cancelled_at
    # a comment that names another run of hpceval is not this run's either
    fake.comments[array] = "hpceval:20990101-000000-abcdef"
    fake.states[f"{array}_0"] = "RUNNING"
    from hpceval.cli.main import cli

    monkeypatch.setattr("hpceval.backends.slurm.client.CommandSlurmClient", lambda **_: fake)
    out = CliRunner().invoke(cli, ["kill", result.invocation_id])
    assert out.exit_code == 0, out.output
    assert f"skipped job {array}: its comment 'hpceval:20990101-000000-abcdef' does not " \
           "carry this run's id" in out.stderr
    assert "no job to cancel" in out.stdout and len(fake.cancels) == 1


def test_kill_of_a_run_submitted_before_job_comments_still_cancels_its_jobs(
        tmp_path: Path, fake: FakeSlurm) -> None:
    """A run submitted by an hpceval that did not tag its jobs (run.json without jobs_tagged)
    must stay killable after the upgrade: its jobs carry no comment, so only owners count."""
    result = submit_configs(configs(tmp_path, 3), fake)
    array, aggregate = result.job_ids
    run_file = result.run_dir / "run.json"
    data = json.loads(run_file.read_text())
    assert data.pop("jobs_tagged") is True  # what today's submit records
    run_file.write_text(json.dumps(data))
    fake.states.update({f"{array}_0": "RUNNING", aggregate: "PENDING"})
    fake.comments.update({array: "", aggregate: ""})  # what squeue shows for such jobs
    report = kill_run(find_run(result.invocation_id), fake, sleep=lambda _: None)
    assert report.foreign == {} and sorted(report.cancelled) == sorted([array, aggregate])


def test_kill_leaves_alone_a_job_squeue_shows_owned_by_another_user(
        tmp_path: Path, fake: FakeSlurm, monkeypatch: pytest.MonkeyPatch) -> None:
    # review F6: a jobs.json naming someone else's job (planted, or copied) must not make a
    # user who may cancel others' jobs (root, an operator) cancel it
    result = submit_configs(configs(tmp_path, 3), fake)
    array, aggregate = result.job_ids
    fake.states.update({f"{array}_0": "RUNNING", aggregate: "PENDING"})
    fake.owners[aggregate] = 65534
    report = kill_run(find_run(result.invocation_id), fake, sleep=lambda _: None)
    assert fake.cancels == [[array]]
    assert report.cancelled == [array] and report.skipped == {aggregate: 65534}
    assert fake.states[aggregate] == "PENDING"
    assert fake.squeue_calls[0] == [array, aggregate]  # ONE owner look-up, before scancel
    chain = {e.id: e for e in read_jobs(result.run_dir).chain}
    assert chain[array].cancelled_at and not chain[aggregate].cancelled_at
    # the CLI names the owner; nothing of the other user's is cancelled
    from hpceval.cli.main import cli

    fake.owners[array] = 65534
    fake.states[f"{array}_0"] = "RUNNING"
    monkeypatch.setattr("hpceval.backends.slurm.client.CommandSlurmClient", lambda **_: fake)
    out = CliRunner().invoke(cli, ["kill", result.invocation_id])
    assert out.exit_code == 0, out.output
    assert f"skipped job {array}: owned by nobody (uid 65534), not by you" in out.stderr
    assert "no job to cancel" in out.stdout and len(fake.cancels) == 1
