"""Turn Slurm's ~25 raw job states into the handful of phases users actually ask about.

The main rule: a job that sacct does not list is UNKNOWN, never FAILED. sacct lags slurmctld
(a fresh job is invisible for up to a second, array tasks for several), so "missing" is normal.
"""

from __future__ import annotations

from hpceval.backends.slurm.records import JobRecord, QueueEntry
from hpceval.phases import UNKNOWN, JobStatus, Phase, combine

# Phase, JobStatus and combine are every backend's words (hpceval.phases); imported from here too
__all__ = ["NOT_LISTED", "UNKNOWN", "JobStatus", "Phase", "classify", "combine",
           "resolve_preempted"]

NOT_LISTED = JobStatus(Phase.UNKNOWN, "not (yet) listed by sacct")



_QUEUED = {"PENDING", "CONFIGURING", "PLANNED", "RESV_DEL_HOLD"}
_RUNNING = {"RUNNING", "COMPLETING", "RESIZING", "SIGNALING", "STAGE_OUT", "SUSPENDED", "STOPPED"}
_RESUMING = {"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"}
# States in which a job may still run processes (CONFIGURING: its nodes boot, its prolog may
# run): a cache lease of such a job is live; any other state (ended, pending, requeued) holds
# no process that could use the cache.
MAY_RUN_PROCESSES = frozenset(_RUNNING | {"CONFIGURING"})
# Terminal failures that are not the program's own exit status: say what happened, in words.
_FAILED_REASONS = {
    "TIMEOUT": "walltime reached (TIMEOUT)",
    "NODE_FAIL": "node failure (NODE_FAIL)",
    "BOOT_FAIL": "node failed to boot (BOOT_FAIL)",
    "OUT_OF_MEMORY": "out of memory (OUT_OF_MEMORY)",
    "DEADLINE": "deadline reached before the job could finish (DEADLINE)",
    "SPECIAL_EXIT": "special exit requested by the job (SPECIAL_EXIT)",
    "PREEMPTED": "preempted and not requeued (PREEMPTED)",
}
# Pending reasons worth spelling out: the raw names are cryptic and "never" matters to users.
_PENDING_REASONS = {
    "DependencyNeverSatisfied": "dependency can never be satisfied",
    "JobHeldUser": "held by user",
    "JobHeldAdmin": "held by administrator",
    "Dependency": "waiting for dependency",
    "BeginTime": "waiting for begin time",
}


def classify(record: JobRecord | QueueEntry | None) -> JobStatus:
    """Phase of one job or array task from its sacct record (or squeue entry); None = missing."""
    if record is None:
        return NOT_LISTED
    state = record.state
    raw = getattr(record, "raw_state", state)
    if state in _QUEUED:
        return JobStatus(Phase.QUEUED, _pending_reason(record.reason), raw)
    if state in _RUNNING:
        return JobStatus(Phase.RUNNING, "suspended" if state == "SUSPENDED" else "", raw)
    if state in _RESUMING:
        held = " and held" if state == "REQUEUE_HOLD" else ""
        return JobStatus(Phase.RESUMING, f"requeued{held}", raw)
    if state == "COMPLETED":
        return JobStatus(Phase.DONE, "", raw)
    if state == "FAILED":
        return JobStatus(Phase.FAILED, _exit_reason(record), raw)
    if state in ("CANCELLED", "REVOKED"):
        who = raw.split(" by ", 1)
        by = f" by uid {who[1].strip()}" if len(who) == 2 else ""
        return JobStatus(Phase.CANCELLED, f"cancelled{by}", raw)
    if state in _FAILED_REASONS:
        # Which node failed is what an admin asks first: name it when Slurm says.
        where = f" on {record.node_list}" if state == "NODE_FAIL" and record.node_list else ""
        return JobStatus(Phase.FAILED, _FAILED_REASONS[state] + where, raw)
    return JobStatus(Phase.UNKNOWN, f"unrecognised Slurm state {raw!r}", raw)


def resolve_preempted(status: JobStatus, *, successor_exists: bool) -> JobStatus:
    """A PREEMPTED job whose work goes on in another job (Slurm requeue, or our own resubmission
    recorded in jobs.json) is resuming, not failed. Only the caller knows about successors."""
    if status.raw_state.startswith("PREEMPTED") and successor_exists:
        reason = "preempted; continues in a successor job"
        return JobStatus(Phase.RESUMING, reason, status.raw_state)
    return status


def _exit_reason(record: JobRecord | QueueEntry) -> str:
    code = getattr(record, "exit_code", None)
    signal = getattr(record, "signal", None)
    if code:
        return f"exit code {code}"
    if signal:
        return f"killed by signal {signal}"
    return "failed"


def _pending_reason(reason: str) -> str:
    if reason in ("", "None"):
        return ""
    return _PENDING_REASONS.get(reason, reason)
