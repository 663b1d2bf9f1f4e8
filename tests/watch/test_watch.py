"""Checkpoint watches (hpceval.watch): completeness, exactly-once claims, the end condition,
damaged state, status and stop. The commands (start's refusals, ls, results, report, kill, the
API): test_watch_cli.py.

Ticks here run the real submit path (create_run + submit_prepared) against the counting
FakeSlurm; tests/integration/test_watch_drill.py runs a watch on the real dev cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.slurm import FakeSlurm
from support.watches import options, started, write_ckpt

from hpceval.watch import state as st
from hpceval.watch.checkpoints import judge
from hpceval.watch.control import find_watch, stop_watch, submitted_points
from hpceval.watch.spec import WatchSpec, step_of
from hpceval.watch.status import format_watch, watch_status
from hpceval.watch.tick import SubmitFailed, run_tick, submit_checkpoint

HERE = Path(__file__).resolve().parent


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


# -- the step of a checkpoint, and when it is complete -------------------------------------

def test_step_is_the_last_integer_or_the_regex_group() -> None:
    assert step_of("step_1000") == 1000
    assert step_of("run3-iter_0042") == 42
    assert step_of("final") is None
    assert step_of("iter_7_of_9", r"iter_(\d+)") == 7
    assert step_of("final", r"iter_(\d+)") is None


def test_marker_decides_completeness(tmp_path: Path) -> None:
    spec = options(tmp_path, marker="COMPLETE")
    ckpt = write_ckpt(Path(spec.checkpoints), "step_10")
    seen = st.CheckpointEntry(str(ckpt), 10)
    assert not judge(spec, ckpt, seen, 0.0)
    (ckpt / "COMPLETE").write_text("")
    assert judge(spec, ckpt, seen, 0.0)


def test_grace_needs_the_same_files_for_the_whole_grace_period(tmp_path: Path) -> None:
    spec = options(tmp_path, grace_s=30)
    ckpt = write_ckpt(Path(spec.checkpoints), "step_10", {"part-1": "x" * 10})
    seen = st.CheckpointEntry(str(ckpt), 10)
    assert not judge(spec, ckpt, seen, 100.0)  # first sight: never complete
    assert not judge(spec, ckpt, seen, 120.0)  # unchanged, but only for 20 s
    (ckpt / "part-2").write_text("y")  # the writer goes on: the clock starts again
    assert not judge(spec, ckpt, seen, 131.0)
    assert not judge(spec, ckpt, seen, 160.0)
    assert judge(spec, ckpt, seen, 161.0)
    with open(ckpt / "part-2", "a") as handle:  # a file that grows is a change too
        handle.write("more")
    assert not judge(spec, ckpt, seen, 500.0)


def test_an_empty_folder_is_never_complete(tmp_path: Path) -> None:
    spec = options(tmp_path, grace_s=1)
    ckpt = Path(spec.checkpoints) / "step_1"
    ckpt.mkdir()
    seen = st.CheckpointEntry(str(ckpt), 10)
    assert not judge(spec, ckpt, seen, 0.0)
    assert not judge(spec, ckpt, seen, 1000.0)


# -- ticks ----------------------------------------------------------------------------------

def test_tick_submits_each_complete_checkpoint_once_and_requeues_itself(
        tmp_path: Path, fake: FakeSlurm) -> None:
    watch_dir = started(tmp_path, fake, marker="COMPLETE")
    first_tick = fake.submits[0]
    assert first_tick["script"] == watch_dir / "tick.sbatch"
    assert first_tick["dependency"] == "singleton" and first_tick["extra_args"] == []
    ckpts = tmp_path / "ckpts"
    write_ckpt(ckpts, "step_200", {"COMPLETE": "", "w": "1"})
    write_ckpt(ckpts, "step_100", {"COMPLETE": "", "w": "1"})
    write_ckpt(ckpts, "step_300", {"w": "half"})  # no marker yet
    report = run_tick(watch_dir, client=fake, job_id="77")
    assert report.submitted == ["step_100", "step_200"] and report.pending == ["step_300"]
    evals = [s for s in fake.submits if s["script"].name == "job.sbatch"]
    assert len(evals) == 2
    for sub, step in zip(evals, (100, 200), strict=True):
        run_yaml = (sub["script"].parent / "run.yaml").read_text()
        assert f"checkpoint_path: {ckpts}/step_{step}" in run_yaml
        assert f"hpceval-{watch_dir.name}-step{step}" in sub["script"].read_text()
    tick = fake.submits[-1]
    assert tick["script"].name == "tick.sbatch"
    assert tick["extra_args"] == ["--begin=now+60"] and tick["dependency"] == "singleton"
    state = st.load_state(watch_dir)
    assert state.checkpoints["step_100"].claimed_by == "77"
    # the next tick: step_300 completes, the others are not submitted again
    (ckpts / "step_300" / "COMPLETE").write_text("")
    assert run_tick(watch_dir, client=fake).submitted == ["step_300"]
    assert run_tick(watch_dir, client=fake).submitted == []
    assert len([s for s in fake.submits if s["script"].name == "job.sbatch"]) == 3
    assert [p[0] for p in submitted_points(watch_dir)] == [100, 200, 300]


def test_half_written_checkpoint_waits_in_grace_mode(tmp_path: Path, fake: FakeSlurm) -> None:
    watch_dir = started(tmp_path, fake, grace_s=30)
    clock = Clock()
    ckpt = write_ckpt(tmp_path / "ckpts", "step_5", {"config.json": "{}"})
    assert run_tick(watch_dir, client=fake, now=clock).submitted == []
    clock.t += 60
    (ckpt / "model.safetensors").write_text("w" * 100)  # the rest lands after a tick
    assert run_tick(watch_dir, client=fake, now=clock).submitted == []
    clock.t += 29
    assert run_tick(watch_dir, client=fake, now=clock).submitted == []
    clock.t += 1
    assert run_tick(watch_dir, client=fake, now=clock).submitted == ["step_5"]


_RACER = """
import json, sys
from pathlib import Path
from support.slurm import FakeSlurm
from hpceval.watch.tick import run_tick
start = float(sys.argv[2])
import time
while time.time() < start:
    time.sleep(0.001)
report = run_tick(Path(sys.argv[1]), client=FakeSlurm(), job_id=sys.argv[3])
print(json.dumps(report.submitted))
"""


def test_two_ticks_at_once_submit_each_checkpoint_exactly_once(tmp_path: Path,
                                                                fake: FakeSlurm) -> None:
    """Real processes, the real filelock, started at the same instant, three rounds."""
    watch_dir = started(tmp_path, fake, marker="DONE")
    script = tmp_path / "racer.py"
    script.write_text(_RACER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(  # the repository and tests/ (support)
        [str(HERE.parents[1]), str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    everything: list[str] = []
    for round_ in range(3):
        for i in range(3):
            write_ckpt(tmp_path / "ckpts", f"step_{round_ * 10 + i}", {"DONE": "", "w": "1"})
        go = f"{time.time() + 1.5}"
        procs = [subprocess.Popen([sys.executable, str(script), str(watch_dir), go, f"p{n}"],
                                  stdout=subprocess.PIPE, text=True, env=env)
                 for n in range(2)]
        outs = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
        assert all(p.returncode == 0 for p in procs)
        assert sorted(outs[0] + outs[1]) == sorted(f"step_{round_ * 10 + i}" for i in range(3))
        assert not set(outs[0]) & set(outs[1])
        everything += outs[0] + outs[1]
    runs = sorted(p for p in (tmp_path / "out").iterdir() if (p / "run.json").is_file())
    assert len(runs) == len(everything) == 9  # one run directory per checkpoint
    claimed = {e.claimed_by for e in st.load_state(watch_dir).checkpoints.values()}
    assert claimed <= {"p0", "p1"}


def test_failed_submission_does_not_block_the_next_and_is_retried(
        tmp_path: Path, fake: FakeSlurm) -> None:
    watch_dir = started(tmp_path, fake, marker="OK", attempts=2)
    for step in (1, 2):
        write_ckpt(tmp_path / "ckpts", f"step_{step}", {"OK": ""})
    calls: list[str] = []

    def flaky(spec: WatchSpec, ckpt: Any, client: Any) -> dict[str, Any]:
        calls.append(ckpt.name)
        if ckpt.name == "step_1":
            raise SubmitFailed("sbatch: Socket timed out", retryable=True)
        return submit_checkpoint(spec, ckpt, client)

    report = run_tick(watch_dir, client=fake, submit=flaky)
    assert report.failed == ["step_1"] and report.submitted == ["step_2"]
    assert report.pending == ["step_1"]  # one attempt left
    report = run_tick(watch_dir, client=fake, submit=flaky)
    assert report.failed == ["step_1"] and report.pending == []  # attempts used up
    assert run_tick(watch_dir, client=fake, submit=flaky).failed == []
    assert calls == ["step_1", "step_2", "step_1"]
    entry = st.load_state(watch_dir).checkpoints["step_1"]
    assert entry.status == st.FAILED and "Socket timed out" in entry.error


def test_a_submission_that_may_have_queued_a_job_is_never_retried(
        tmp_path: Path, fake: FakeSlurm) -> None:
    watch_dir = started(tmp_path, fake, marker="OK")
    write_ckpt(tmp_path / "ckpts", "step_1", {"OK": ""})
    st_before = st.load_state(watch_dir)
    st_before.checkpoints["step_1"] = st.CheckpointEntry(str(tmp_path / "ckpts" / "step_1"),
                                                         1, st.CLAIMED, attempts=1)
    st.save_state(watch_dir, st_before)  # a tick died between its claim and its record
    report = run_tick(watch_dir, client=fake)
    assert report.submitted == [] and report.pending == []
    entry = st.load_state(watch_dir).checkpoints["step_1"]
    assert entry.status == st.FAILED and "its job may exist" in entry.error


def test_after_job_ends_the_watch_once_nothing_new_remains(tmp_path: Path,
                                                           fake: FakeSlurm) -> None:
    fake.states["555"] = "RUNNING"
    watch_dir = started(tmp_path, fake, marker="OK", after_job="555")
    write_ckpt(tmp_path / "ckpts", "step_1", {"OK": ""})
    assert run_tick(watch_dir, client=fake).training == "running"
    # the training job writes its last checkpoint and ends
    write_ckpt(tmp_path / "ckpts", "step_2", {"OK": ""})
    write_ckpt(tmp_path / "ckpts", "step_3", {"w": "crashed before its marker"})
    fake.states["555"] = "COMPLETED"
    report = run_tick(watch_dir, client=fake)
    assert report.submitted == ["step_2"] and report.status == st.WATCHING  # one more look
    ticks_before = len(st.load_state(watch_dir).ticks)
    report = run_tick(watch_dir, client=fake)
    assert report.status == st.ENDED and report.next_tick is None
    state = st.load_state(watch_dir)
    assert state.status == st.ENDED and len(state.ticks) == ticks_before
    assert state.checkpoints["step_3"].status == st.INCOMPLETE
    assert run_tick(watch_dir, client=fake).submitted == []  # a stray tick does nothing


def test_grace_mode_waits_for_a_pending_checkpoint_after_the_training_ended(
        tmp_path: Path, fake: FakeSlurm) -> None:
    fake.states["9"] = "FAILED"
    watch_dir = started(tmp_path, fake, grace_s=30, after_job="9")
    clock = Clock()
    write_ckpt(tmp_path / "ckpts", "step_1")
    assert run_tick(watch_dir, client=fake, now=clock).status == st.WATCHING  # new: pending
    clock.t += 30
    assert run_tick(watch_dir, client=fake, now=clock).submitted == ["step_1"]
    assert run_tick(watch_dir, client=fake, now=clock).status == st.ENDED


# -- damaged state --------------------------------------------------------------------------

def test_damaged_state_is_an_error_and_nothing_is_lost(tmp_path: Path,
                                                       fake: FakeSlurm) -> None:
    watch_dir = started(tmp_path, fake, marker="OK")
    write_ckpt(tmp_path / "ckpts", "step_1", {"OK": ""})
    run_tick(watch_dir, client=fake)
    write_ckpt(tmp_path / "ckpts", "step_2", {"OK": ""})
    damaged = b'{"schema": 1, "status": "watching", "checkpoints": {"step_1": {"sta'
    (watch_dir / "state.json").write_bytes(damaged)
    submits = len(fake.submits)
    with pytest.raises(st.WatchStateError, match=r"not valid JSON.*state\.json\.bak"):
        run_tick(watch_dir, client=fake)
    assert (watch_dir / "state.json").read_bytes() == damaged  # never reset
    assert len(fake.submits) == submits  # nothing submitted, no tick queued
    backup = json.loads((watch_dir / "state.json.bak").read_text())
    assert backup["checkpoints"]["step_1"]["status"] == st.SUBMITTED  # the claim survives
    data = watch_status(watch_dir, client=fake)
    assert data["status"] == "error" and "not valid JSON" in data["reason"]
    # repaired from the copy: step_1 stays claimed, step_2 is next
    (watch_dir / "state.json").write_bytes((watch_dir / "state.json.bak").read_bytes())
    assert run_tick(watch_dir, client=fake).submitted == ["step_2"]


def test_state_of_the_wrong_shape_is_refused(tmp_path: Path, fake: FakeSlurm) -> None:
    watch_dir = started(tmp_path, fake, marker="OK")
    (watch_dir / "state.json").write_text('{"schema": 1, "status": "watching", '
                                          '"checkpoints": [], "ticks": []}')
    with pytest.raises(st.WatchStateError, match="checkpoints is not an object"):
        run_tick(watch_dir, client=fake)


# -- status, stop, find ---------------------------------------------------------------------

def test_status_asks_sacct_once_for_every_run_the_tick_and_the_training_job(
        tmp_path: Path, fake: FakeSlurm) -> None:
    fake.states["4242"] = "RUNNING"
    watch_dir = started(tmp_path, fake, marker="OK", after_job="4242")
    for step in (1, 2, 3):
        write_ckpt(tmp_path / "ckpts", f"step_{step}", {"OK": ""})
    write_ckpt(tmp_path / "ckpts", "step_4", {"w": ""})
    run_tick(watch_dir, client=fake)
    state = st.load_state(watch_dir)
    jobs = {n: e.job_ids[0] for n, e in state.checkpoints.items() if e.job_ids}
    fake.states.update({jobs["step_1"]: "COMPLETED", jobs["step_2"]: "RUNNING",
                        jobs["step_3"]: "FAILED", state.ticks[-1].id: "PENDING"})
    from support.runs import finish_task

    run_dir = Path(str(state.checkpoints["step_1"].run_dir))
    for task in ("ut-harness.ut_one", "ut-harness.ut_two"):
        finish_task(run_dir, "solo", task)
    fake.sacct_calls.clear()
    data = watch_status(watch_dir, client=fake)
    assert len(fake.sacct_calls) == 1
    # step_1's tasks are done on disk: its job is not asked about
    assert set(fake.sacct_calls[0]) == {jobs["step_2"], jobs["step_3"],
                                        state.ticks[-1].id, "4242"}
    assert data["summary"] == {"seen": 4, "evaluated": 1, "running": 1, "pending": 1,
                               "failed": 1}
    assert data["tick"]["state"] == "queued" and data["training"]["state"] == "running"
    text = format_watch(data)
    assert "4 seen, 1 evaluated, 1 running, 1 pending, 1 failed" in text
    # a run directory that went away (or broke) is failed with the reason, the rest still show
    (Path(str(state.checkpoints["step_2"].run_dir)) / "run.json").write_text("{")
    data = watch_status(watch_dir, client=fake)
    assert data["summary"]["failed"] == 2 and data["summary"]["evaluated"] == 1
    assert "missing or unreadable" in format_watch(data)


def test_stop_cancels_the_queued_tick_and_later_ticks_do_nothing(tmp_path: Path,
                                                                 fake: FakeSlurm) -> None:
    watch_dir = started(tmp_path, fake, marker="OK")
    tick = st.load_state(watch_dir).ticks[-1].id
    fake.states[tick] = "PENDING"
    assert stop_watch(watch_dir, fake, verify_s=0) == [tick]
    assert fake.cancels == [[tick]]
    write_ckpt(tmp_path / "ckpts", "step_1", {"OK": ""})
    submits = len(fake.submits)
    assert run_tick(watch_dir, client=fake).status == st.STOPPED
    assert len(fake.submits) == submits


def test_find_watch_by_id_prefix_and_directory(tmp_path: Path, fake: FakeSlurm) -> None:
    watch_dir = started(tmp_path, fake, marker="OK")
    assert find_watch(watch_dir.name) == watch_dir  # start remembered the output dir
    assert find_watch(watch_dir.name[:14]) == watch_dir
    assert find_watch(str(watch_dir)) == watch_dir.resolve()


def test_a_failing_sacct_for_the_training_job_does_not_end_or_break_the_watch(
        tmp_path: Path, fake: FakeSlurm, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpceval.backends.slurm.client import SlurmError

    fake.states["31"] = "RUNNING"
    watch_dir = started(tmp_path, fake, marker="OK", after_job="31")

    def broken(job_ids: Any, **kw: Any) -> Any:
        raise SlurmError(["sacct"], 1, "slurmdbd: connection refused")

    monkeypatch.setattr(fake, "sacct", broken)
    report = run_tick(watch_dir, client=fake)
    assert report.status == st.WATCHING and report.next_tick is not None
    assert report.training is not None and "connection refused" in report.training


def test_tick_main_reports_a_damaged_state_with_exit_2(tmp_path: Path, fake: FakeSlurm,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from hpceval.job.__main__ import main

    watch_dir = started(tmp_path, fake, marker="OK")
    (watch_dir / "state.json").write_text("{")
    assert main(["watch-tick", "--watch-dir", str(watch_dir)]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_slurm_backend_renders_begin_and_singleton(tmp_path: Path, fake: FakeSlurm) -> None:
    from hpceval.backends import JobRequest, backend_for

    backend = backend_for("slurm", client=fake)
    backend.submit(tmp_path, JobRequest("x.sbatch", after=("5",), begin="now+9", singleton=True))
    backend.submit(tmp_path, JobRequest("y.sbatch", after=("6",)))
    assert [(s["extra_args"], s["dependency"]) for s in fake.submits] == [
        (["--begin=now+9"], "afterany:5,singleton"), ([], "afterany:6")]
    assert backend.schedules_later and not backend_for("local").schedules_later


def test_the_watch_ends_only_once_the_training_job_ended_a_settle_time_ago(
        tmp_path: Path, fake: FakeSlurm, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shared file system may show another node's newest files up to a minute late."""
    from datetime import datetime

    from hpceval.backends.slurm.records import JobRecord

    fake.states["77"] = "RUNNING"
    watch_dir = started(tmp_path, fake, marker="OK", after_job="77", interval_s=600)
    clock = Clock()
    ended_at = {"t": clock.t - 30}

    def sacct(job_ids: Any, **kw: Any) -> dict[str, JobRecord]:
        end = datetime.fromtimestamp(ended_at["t"]).astimezone()
        return {"77": JobRecord("77", "COMPLETED", "COMPLETED", 0, 0, "None", "n1", end=end)}

    monkeypatch.setattr(fake, "sacct", sacct)
    report = run_tick(watch_dir, client=fake, now=clock)
    assert report.status == st.WATCHING and report.training == "done (settling)"
    ended_at["t"] = clock.t - 60  # min(interval, 60 s) ago
    assert run_tick(watch_dir, client=fake, now=clock).status == st.ENDED
