"""What `status` says of a sweep's judge job, from its phase and its folder: serving (its
endpoint record), loading, stopped by the aggregation, or why it failed."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from hpceval.backends.base import JobEntry
from hpceval.contract import AUX_ENDPOINT_FILE, AUX_STOP_FILE, JOB_FAILURE_FILE, aux_folder
from hpceval.phases import JobStatus, Phase
from hpceval.runs.state import JudgeState, judge_state

ENTRY = JobEntry("900", "slurm", "judge", (0,), False, time.time() - 60)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path / aux_folder("judge")
    path.mkdir(parents=True)
    return path


def state(tmp_path: Path, job: JobStatus | None, entry: JobEntry | None = ENTRY) -> JudgeState:
    return judge_state(tmp_path, "judge", entry, job)


def test_a_judge_without_a_job_record_is_unknown(tmp_path: Path, folder: Path) -> None:
    unknown = JudgeState("judge", Phase.UNKNOWN, "no judge job recorded (submission failed?)",
                         None)
    assert state(tmp_path, None) == unknown
    assert state(tmp_path, JobStatus(Phase.RUNNING), entry=None) == unknown


def test_a_running_judge_is_serving_once_its_endpoint_is_recorded(tmp_path: Path,
                                                                   folder: Path) -> None:
    running = JobStatus(Phase.RUNNING, "", "RUNNING")
    (folder / AUX_STOP_FILE).write_text("")  # a stop asked for: still running until it ends
    assert state(tmp_path, running) == JudgeState("judge", Phase.RUNNING,
                                                  "loading (no endpoint.json yet)", "900")
    (folder / AUX_ENDPOINT_FILE).write_text(json.dumps({"urls": ["http://a:1", "http://b:2"]}))
    assert state(tmp_path, running).reason == "serving 2 instance(s)"
    (folder / AUX_ENDPOINT_FILE).write_text("{not json")
    assert state(tmp_path, running).reason == "loading (no endpoint.json yet)"


def test_a_finished_judge_says_whether_the_aggregation_stopped_it(tmp_path: Path,
                                                                  folder: Path) -> None:
    done = JobStatus(Phase.DONE, "", "COMPLETED")
    assert state(tmp_path, done) == JudgeState("judge", Phase.DONE, "", "900")
    (folder / AUX_STOP_FILE).write_text("")
    assert state(tmp_path, done).reason == "stopped after the sweep"
    failed = JobStatus(Phase.FAILED, "exit code 1", "FAILED")
    assert state(tmp_path, failed).reason == "exit code 1"  # the stop file is for DONE only


def test_a_failed_judge_gives_its_own_cause_before_slurms(tmp_path: Path, folder: Path) -> None:
    failed = JobStatus(Phase.FAILED, "exit code 1", "FAILED")
    assert state(tmp_path, failed).reason == "exit code 1"
    cause = folder / JOB_FAILURE_FILE
    cause.write_text("the judge's vLLM did not start: out of memory\n")
    assert state(tmp_path, failed).reason == ("the judge's vLLM did not start: out of memory; "
                                              "exit code 1")
    assert state(tmp_path, JobStatus(Phase.FAILED, "", "FAILED")).reason == \
        "the judge's vLLM did not start: out of memory"
    old = ENTRY.submitted_at - 3600  # an earlier job's record: not this one's cause
    os.utime(cause, (old, old))
    assert state(tmp_path, failed).reason == "exit code 1"
