"""Raw Slurm states -> the phases users ask about."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpceval.backends.slurm.records import JobRecord, QueueEntry, parse_sacct
from hpceval.backends.slurm.states import (
    UNKNOWN,
    JobStatus,
    Phase,
    classify,
    combine,
    resolve_preempted,
)

DATA = Path(__file__).parent / "data"


def rec(raw_state: str, exit_code: str = "0:0", reason: str = "None") -> JobRecord:
    line = f"7|job|{raw_state}|{exit_code}|{reason}|Unknown|Unknown|00:00:00|node1|Unknown|debug"
    return parse_sacct(line)["7"]


@pytest.mark.parametrize(
    ("raw", "exit_code", "phase", "reason"),
    [
        ("PENDING", "0:0", Phase.QUEUED, ""),
        ("CONFIGURING", "0:0", Phase.QUEUED, ""),
        ("PLANNED", "0:0", Phase.QUEUED, ""),
        ("RUNNING", "0:0", Phase.RUNNING, ""),
        ("COMPLETING", "0:0", Phase.RUNNING, ""),
        ("SUSPENDED", "0:0", Phase.RUNNING, "suspended"),
        ("REQUEUED", "0:0", Phase.RESUMING, "requeued"),
        ("REQUEUE_HOLD", "0:0", Phase.RESUMING, "requeued and held"),
        ("COMPLETED", "0:0", Phase.DONE, ""),
        ("FAILED", "3:0", Phase.FAILED, "exit code 3"),
        ("FAILED", "0:9", Phase.FAILED, "killed by signal 9"),
        ("TIMEOUT", "0:0", Phase.FAILED, "walltime reached (TIMEOUT)"),
        ("NODE_FAIL", "0:0", Phase.FAILED, "node failure (NODE_FAIL) on node1"),
        ("OUT_OF_MEMORY", "0:125", Phase.FAILED, "out of memory (OUT_OF_MEMORY)"),
        ("BOOT_FAIL", "0:0", Phase.FAILED, "node failed to boot (BOOT_FAIL)"),
        ("PREEMPTED", "0:0", Phase.FAILED, "preempted and not requeued (PREEMPTED)"),
        ("CANCELLED by 0", "0:0", Phase.CANCELLED, "cancelled by uid 0"),
        ("CANCELLED", "0:0", Phase.CANCELLED, "cancelled"),
        ("SOMETHING_NEW", "0:0", Phase.UNKNOWN, "unrecognised Slurm state 'SOMETHING_NEW'"),
    ],
)
def test_classify(raw: str, exit_code: str, phase: Phase, reason: str) -> None:
    status = classify(rec(raw, exit_code))
    assert status.phase is phase
    assert status.reason == reason
    assert status.raw_state == raw


def test_missing_job_is_unknown_not_failed() -> None:
    status = classify(None)
    assert status.phase is Phase.UNKNOWN
    assert not status.terminal


def test_pending_reasons_are_spelled_out() -> None:
    assert classify(rec("PENDING", reason="JobHeldUser")).reason == "held by user"
    never = classify(rec("PENDING", reason="DependencyNeverSatisfied"))
    assert (never.phase, never.reason) == (Phase.QUEUED, "dependency can never be satisfied")
    assert classify(rec("PENDING", reason="Priority")).reason == "Priority"


def test_squeue_entries_classify_too() -> None:
    status = classify(QueueEntry("8", "PENDING", "Dependency", ""))
    assert (status.phase, status.reason) == (Phase.QUEUED, "waiting for dependency")


def test_terminal_phases() -> None:
    assert {p for p in Phase if p.terminal} == {Phase.DONE, Phase.FAILED, Phase.CANCELLED}


def test_resolve_preempted_depends_on_successor() -> None:
    preempted = classify(rec("PREEMPTED"))
    assert resolve_preempted(preempted, successor_exists=False) is preempted
    resumed = resolve_preempted(preempted, successor_exists=True)
    assert resumed.phase is Phase.RESUMING
    done = classify(rec("COMPLETED"))
    assert resolve_preempted(done, successor_exists=True) is done


def test_combine_array_tasks() -> None:
    done = JobStatus(Phase.DONE)
    failed = JobStatus(Phase.FAILED, "exit code 5", "FAILED")
    running = JobStatus(Phase.RUNNING)
    queued = JobStatus(Phase.QUEUED)
    assert combine([done, done]).phase is Phase.DONE
    summary = combine([done, failed, done, done])
    assert (summary.phase, summary.reason) == (Phase.FAILED, "1/4 tasks failed: exit code 5")
    assert combine([done, running, queued]).phase is Phase.RUNNING
    assert combine([done, queued]).phase is Phase.QUEUED
    assert combine([done, UNKNOWN]).phase is Phase.UNKNOWN
    assert combine([]).phase is Phase.UNKNOWN


def test_a_squeue_entry_is_classified_by_its_state_alone() -> None:
    """squeue gives no raw state, exit code or signal: its state word stands in for the raw
    state, and a FAILED entry is just 'failed'."""
    assert classify(QueueEntry("7", "PENDING", "None", "")) == JobStatus(Phase.QUEUED, "",
                                                                          "PENDING")
    assert classify(QueueEntry("7", "PENDING", "", "")).reason == ""
    assert classify(QueueEntry("7", "FAILED", "None", "")) == JobStatus(Phase.FAILED, "failed",
                                                                         "FAILED")
    assert classify(QueueEntry("7", "CANCELLED", "None", "")) == JobStatus(
        Phase.CANCELLED, "cancelled", "CANCELLED")


def test_revoked_and_cancelled_name_who_when_slurm_says() -> None:
    assert classify(rec("REVOKED")) == JobStatus(Phase.CANCELLED, "cancelled", "REVOKED")
    assert classify(rec("CANCELLED by 1001")).reason == "cancelled by uid 1001"
    assert classify(rec("FAILED", "0:9")).reason == "killed by signal 9"
    assert classify(rec("FAILED", "0:0")).reason == "failed"


def test_a_preempted_job_with_a_successor_is_resuming_and_keeps_its_raw_state() -> None:
    status = classify(rec("PREEMPTED"))
    assert resolve_preempted(status, successor_exists=True) == JobStatus(
        Phase.RESUMING, "preempted; continues in a successor job", "PREEMPTED")
    assert resolve_preempted(status, successor_exists=False) is status
