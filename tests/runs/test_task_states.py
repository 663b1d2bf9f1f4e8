"""Each task's state as `status` shows it, from the markers in its folder and its job's phase:
done, running (a retry after a failure too), failed with its reason, stopped with the job, or
queued. `resume` and `status` read these; a wrong one hides unfinished work or shows a dead
task as running."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hpceval.contract import COMMAND_FILE, DONE_MARKER, FAILED_FILE, LOADS_FILE, TASKS_DIR
from hpceval.phases import JobStatus, Phase
from hpceval.records import TaskRecord
from hpceval.runs.state import (
    RESUME_HINT,
    ModelState,
    TaskState,
    combine_models,
    model_phase,
    read_loads,
    task_states,
)

TASK = TaskRecord("t0", "lm-evaluation-harness.gsm8k")
RUNNING, QUEUED = JobStatus(Phase.RUNNING), JobStatus(Phase.QUEUED)


def folder_of(model: Path) -> Path:
    path = model / TASKS_DIR / TASK.key
    path.mkdir(parents=True, exist_ok=True)
    return path


def at(path: Path, text: str, mtime: float) -> None:
    path.write_text(text)
    os.utime(path, (mtime, mtime))


def test_a_finished_task_is_done_whatever_the_job(tmp_path: Path) -> None:
    (folder_of(tmp_path) / DONE_MARKER).write_text("")
    for job in (RUNNING, JobStatus(Phase.FAILED, "exit code 1")):
        assert task_states(tmp_path, [TASK], job) == [TaskState("t0", TASK.task, Phase.DONE)]


def test_a_task_started_again_after_a_failure_is_running_not_failed(tmp_path: Path) -> None:
    here = folder_of(tmp_path)
    at(here / FAILED_FILE, json.dumps({"reason": "harness exited 3"}), 1000.0)
    at(here / COMMAND_FILE, "", 2000.0)  # retried after the failure was written
    assert task_states(tmp_path, [TASK], RUNNING) == [TaskState("t0", TASK.task, Phase.RUNNING)]
    at(here / COMMAND_FILE, "", 1000.0)  # same second: not a retry
    assert task_states(tmp_path, [TASK], RUNNING) == [
        TaskState("t0", TASK.task, Phase.FAILED, "harness exited 3")]
    at(here / COMMAND_FILE, "", 500.0)
    assert task_states(tmp_path, [TASK], RUNNING)[0].phase is Phase.FAILED


@pytest.mark.parametrize(("record", "reason"), [
    ({"reason": "out of memory", "stage": "run"}, "out of memory"),
    ({"stage": "collect"}, "collect"),
    ({}, "failed"),
    (None, "failed (failed.json unreadable)"),
])
def test_a_failed_task_says_why(tmp_path: Path, record: dict[str, str] | None,
                                reason: str) -> None:
    text = "{cut" if record is None else json.dumps(record)
    (folder_of(tmp_path) / FAILED_FILE).write_text(text)
    assert task_states(tmp_path, [TASK], QUEUED) == [
        TaskState("t0", TASK.task, Phase.FAILED, reason)]


@pytest.mark.parametrize(("job", "phase"), [
    (JobStatus(Phase.CANCELLED, "cancelled"), Phase.CANCELLED),
    (JobStatus(Phase.FAILED, "walltime reached (TIMEOUT)"), Phase.FAILED),
])
def test_an_unfinished_task_of_an_ended_job_ends_with_it(tmp_path: Path, job: JobStatus,
                                                         phase: Phase) -> None:
    (folder_of(tmp_path) / COMMAND_FILE).write_text("")
    assert task_states(tmp_path, [TASK], job) == [
        TaskState("t0", TASK.task, phase, f"not finished (job {job.phase.value})")]


def test_a_task_of_a_waiting_job_is_queued(tmp_path: Path) -> None:
    assert task_states(tmp_path, [TASK], QUEUED) == [TaskState("t0", TASK.task, Phase.QUEUED)]
    (folder_of(tmp_path) / COMMAND_FILE).write_text("")  # written, but the job is not running
    assert task_states(tmp_path, [TASK], QUEUED)[0].phase is Phase.QUEUED


def _model(key: str, phase: Phase, reason: str = "") -> ModelState:
    return ModelState(key, 0, phase, reason, None, 1, [], None, ())


def test_a_sweeps_phase_is_its_most_active_models_and_its_reason_counts_them() -> None:
    assert combine_models([]) == (Phase.UNKNOWN, "no models")
    assert combine_models([_model("a", Phase.FAILED, "exit code 1")]) == (
        Phase.FAILED, "exit code 1")
    sweep = [_model("a", Phase.DONE), _model("b", Phase.RUNNING, "loading"),
             _model("c", Phase.DONE), _model("d", Phase.FAILED, "oom")]
    assert combine_models(sweep) == (Phase.RUNNING, "2 done, 1 running, 1 failed")
    assert combine_models([_model("a", Phase.DONE), _model("b", Phase.DONE)]) == (
        Phase.DONE, "2 done")


def test_a_model_still_in_the_queue_says_which_attempt_and_what_failed(tmp_path: Path) -> None:
    failed = TaskState("t1", "x", Phase.FAILED, "harness exited 3")
    stopped = TaskState("t2", "y", Phase.FAILED, "not finished (job failed)")
    queued = JobStatus(Phase.QUEUED, "held by user")
    assert model_phase(queued, [failed], 3, tmp_path) == (
        Phase.RESUMING, "attempt 3 queued (held by user)")
    assert model_phase(JobStatus(Phase.QUEUED), [failed], 2, tmp_path) == (
        Phase.RESUMING, "attempt 2 queued")
    assert model_phase(JobStatus(Phase.RUNNING, "r"), [failed, stopped], 1, tmp_path) == (
        Phase.RUNNING, "r; 1 task(s) failed")
    assert model_phase(JobStatus(Phase.RUNNING, "r"), [stopped], 1, tmp_path) == (
        Phase.RUNNING, "r")
    cancelled = JobStatus(Phase.CANCELLED, "cancelled by uid 0")
    assert model_phase(cancelled, [stopped], 1, tmp_path, stopped="while loading") == (
        Phase.CANCELLED, f"cancelled by uid 0 while loading; {RESUME_HINT}")
    assert model_phase(cancelled, [stopped], 1, tmp_path) == (
        Phase.CANCELLED, f"cancelled by uid 0; {RESUME_HINT}")
    assert model_phase(JobStatus(Phase.FAILED, "exit code 1"), [stopped, failed], 1,
                       tmp_path) == (Phase.FAILED, "1/2 task(s) failed: t1: harness exited 3")


def test_model_loads_are_read_line_by_line_and_malformed_ones_skipped(tmp_path: Path) -> None:
    (tmp_path / LOADS_FILE).write_bytes(b"900 42\n901 x\nbad\n902 7 8\n\n 5\n903 \xff\n904 13\n")
    assert read_loads(tmp_path) == (("900", 42), ("904", 13))
    assert read_loads(tmp_path / "missing") == ()
