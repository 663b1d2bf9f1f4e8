"""What `status` says about a run the scheduler interrupted, and resume racing resume.

The integration drills (tests/integration/test_fault_drills_cancel.py and
test_fault_drills_node.py) break real jobs; these pin the same rules without a cluster: where a
cancelled job stood (queued, loading the model, mid-task) comes from what it left on disk, and
two resumes of one run submit one job.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from support.runs import configs, finish_task
from support.slurm import FakeSlurm

from hpceval.backends.slurm.states import Phase
from hpceval.runs.control import ResumeRefused, resume_run
from hpceval.runs.index import find_run
from hpceval.runs.state import RunState, Tracker
from hpceval.runs.submit import submit_configs

ONE, TWO = "ut-harness.ut_one", "ut-harness.ut_two"
HINT = "`hpceval resume` continues"


def state_of(run_dir: Path, fake: FakeSlurm) -> RunState:
    tracker = Tracker(fake)
    tracker.add(run_dir)
    (state,) = tracker.refresh(force=True)
    return state


def started(run_dir: Path, job_id: str, *task_keys: str) -> None:
    """What a job that began leaves: its Slurm log, and command.sh of each task it started."""
    model_dir = run_dir / "models" / "solo"
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / f"slurm-{job_id}.log").write_text("[hpceval] job started\n")
    for key in task_keys:
        (model_dir / "tasks" / key).mkdir(parents=True, exist_ok=True)
        (model_dir / "tasks" / key / "command.sh").write_text("true\n")


def test_cancelled_while_queued(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    fake.states[result.job_ids[0]] = "CANCELLED by 0"  # no log: the job never started
    state = state_of(result.run_dir, fake)
    assert state.phase is Phase.CANCELLED
    assert state.reason == f"cancelled by uid 0 while queued (it never started); {HINT}"


def test_cancelled_while_the_server_loads(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    started(result.run_dir, result.job_ids[0])
    fake.states[result.job_ids[0]] = "CANCELLED by 0"
    state = state_of(result.run_dir, fake)
    assert state.phase is Phase.CANCELLED
    assert state.reason == ("cancelled by uid 0 while the model server was loading "
                            f"(no task had started); {HINT}")


def test_cancelled_while_the_server_loads_with_tasks_already_started(
        tmp_path: Path, fake: FakeSlurm) -> None:
    """evaluation.overlap_load: the tasks start while the servers load; a job cancelled before
    it recorded its load (models/<key>/loads) stopped in the load, not mid-task."""
    result = submit_configs(configs(tmp_path), fake)
    started(result.run_dir, result.job_ids[0], ONE, TWO)
    server = result.run_dir / "models" / "solo" / "server"
    server.mkdir()
    (server / "instance-0.log").write_text("INFO loading weights\n")  # this job launched it
    fake.states[result.job_ids[0]] = "CANCELLED by 0"
    state = state_of(result.run_dir, fake)
    assert state.reason == ("cancelled by uid 0 while the model server was loading "
                            f"(no task had started); {HINT}")
    (result.run_dir / "models" / "solo" / "loads").write_text(f"{result.job_ids[0]} 42\n")
    state = state_of(result.run_dir, fake)  # healthy, then cancelled: mid-task
    assert state.reason == f"cancelled by uid 0 mid-task (0/2 tasks done); {HINT}"


def test_cancelled_mid_task_counts_what_is_done(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    started(result.run_dir, result.job_ids[0], ONE, TWO)
    finish_task(result.run_dir, "solo", ONE)
    fake.states[result.job_ids[0]] = "CANCELLED by 0"
    state = state_of(result.run_dir, fake)
    assert state.phase is Phase.CANCELLED
    assert state.reason == f"cancelled by uid 0 mid-task (1/2 tasks done); {HINT}"
    assert [t.phase for t in state.models[0].tasks] == [Phase.DONE, Phase.CANCELLED]


def test_a_task_an_earlier_job_started_does_not_count_for_the_resumed_one(
        tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    first = result.job_ids[0]
    started(result.run_dir, first, ONE)  # job 1 started task one, then was cancelled
    fake.states[first] = "CANCELLED by 0"
    [entry] = resume_run(find_run(result.invocation_id), fake)
    started(result.run_dir, entry.id)  # job 2 began, loaded no model yet
    # job 1 wrote command.sh a minute before the resume
    an_hour_ago = time.time() - 3600
    os.utime(result.run_dir / "models" / "solo" / "tasks" / ONE / "command.sh",
             (an_hour_ago, an_hour_ago))
    fake.states[entry.id] = "CANCELLED by 0"
    state = state_of(result.run_dir, fake)
    assert "while the model server was loading" in state.reason, state.reason


def test_node_failure_names_the_node_and_says_resume(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    started(result.run_dir, result.job_ids[0], ONE)
    fake.states[result.job_ids[0]] = "NODE_FAIL"
    state = state_of(result.run_dir, fake)
    assert state.phase is Phase.FAILED
    assert state.reason == f"node failure (NODE_FAIL) on node1; {HINT}"


def test_two_resumes_at_once_submit_one_job(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    fake.states[result.job_ids[0]] = "CANCELLED by 0"
    real_submit = fake.submit

    def slow_submit(*args: object, **kwargs: object) -> str:
        time.sleep(0.3)  # both resumes checked the state before either submitted
        return real_submit(*args, **kwargs)  # type: ignore[arg-type]

    fake.submit = slow_submit  # type: ignore[method-assign]
    outcomes: list[object] = []
    barrier = threading.Barrier(2)

    def resume() -> None:
        barrier.wait()
        try:
            outcomes.append(resume_run(find_run(result.invocation_id), fake)[0].id)
        except ResumeRefused as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=resume) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(fake.submits) == 2, fake.submits  # the first submission and ONE resume
    resumed = fake.submits[1]["id"]
    assert resumed in outcomes
    [refused] = [o for o in outcomes if isinstance(o, ResumeRefused)]
    assert f"already resumed as job {resumed}" in str(refused)


def test_resume_refused_names_a_live_job_it_did_not_start(tmp_path: Path,
                                                          fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    fake.states[result.job_ids[0]] = "RUNNING"
    with pytest.raises(ResumeRefused, match="still has live work: solo"):
        resume_run(find_run(result.invocation_id), fake)
