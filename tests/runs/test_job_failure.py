"""A job-level cause (the job script's `job-failure` file: a server died, the results directory
is not writable) leads the model's reason in `status`, but only for the job that wrote it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from support.runs import configs, finish_task
from support.slurm import FakeSlurm

from hpceval.backends.slurm.states import Phase
from hpceval.runs.jobs import read_jobs
from hpceval.runs.state import JOB_FAILURE_FILE, Tracker
from hpceval.runs.submit import submit_configs

ONE, TWO = "ut-harness.ut_one", "ut-harness.ut_two"
CAUSE = "model server instance 0 (head) on node1 exited while tasks ran (log: x.log)"


def _state(run_dir: Path, fake: FakeSlurm) -> tuple[Phase, str]:
    tracker = Tracker(fake)
    tracker.add(run_dir)
    (state,) = tracker.refresh(force=True)
    return state.models[0].phase, state.models[0].reason


def test_the_job_failure_leads_the_reason(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    model_dir = result.run_dir / "models" / "solo"
    finish_task(result.run_dir, "solo", ONE)
    failed = model_dir / "tasks" / TWO
    failed.mkdir(parents=True)
    (failed / "failed.json").write_text(json.dumps({"reason": "harness exited with status 1"}))
    (model_dir / JOB_FAILURE_FILE).write_text(CAUSE + "\n")
    fake.states[result.job_ids[0]] = "FAILED"
    assert _state(result.run_dir, fake) == (
        Phase.FAILED, f"{CAUSE}; 1/2 task(s) failed: {TWO}: harness exited with status 1")


def test_a_job_failure_without_failed_tasks_replaces_the_exit_code(tmp_path: Path,
                                                                   fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    (result.run_dir / "models" / "solo" / JOB_FAILURE_FILE).write_text(
        "results directory not writable: /x/tasks/t (Permission denied)\n")
    fake.states[result.job_ids[0]] = "FAILED"
    phase, reason = _state(result.run_dir, fake)
    assert phase is Phase.FAILED
    assert reason.startswith("results directory not writable: /x/tasks/t (Permission denied); ")


def test_a_failure_older_than_the_newest_job_is_ignored(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    record = result.run_dir / "models" / "solo" / JOB_FAILURE_FILE
    record.write_text(CAUSE + "\n")
    submitted = read_jobs(result.run_dir).chain[0].submitted_at
    os.utime(record, (submitted - 60, submitted - 60))  # written by an earlier job
    fake.states[result.job_ids[0]] = "FAILED"
    phase, reason = _state(result.run_dir, fake)
    assert phase is Phase.FAILED and CAUSE not in reason, reason


def test_a_running_job_does_not_show_it(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    record = result.run_dir / "models" / "solo" / JOB_FAILURE_FILE
    record.write_text(CAUSE + "\n")
    os.utime(record, (time.time() + 1, time.time() + 1))
    fake.states[result.job_ids[0]] = "RUNNING"
    assert _state(result.run_dir, fake) == (Phase.RUNNING, "")
