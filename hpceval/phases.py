"""What any backend says about a job: a phase users ask about, with a reason in words.

The scheduler's own states map onto these in its backend (Slurm's in
``hpceval.backends.slurm.states``); everything above the backends (runs, watch, status) reads
only these.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum


class Phase(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    RESUMING = "resuming"  # requeued (timeout/preemption/node failure) and will run again
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"

    @property
    def terminal(self) -> bool:
        return self in (Phase.DONE, Phase.FAILED, Phase.CANCELLED)


@dataclass(frozen=True)
class JobStatus:
    phase: Phase
    reason: str = ""  # human words: "exit code 3", "walltime reached (TIMEOUT)", "held"
    raw_state: str = ""  # Slurm's own string, for logs and debugging

    @property
    def terminal(self) -> bool:
        return self.phase.terminal


UNKNOWN = JobStatus(Phase.UNKNOWN, "not (yet) listed by the scheduler")


def combine(statuses: Iterable[JobStatus]) -> JobStatus:
    """One status for a whole array: the worst terminal outcome once all tasks are terminal,
    otherwise the most "alive" phase so an array with one running task reads as running."""
    items = list(statuses)
    if not items:
        return UNKNOWN
    if all(s.terminal for s in items):
        for phase in (Phase.FAILED, Phase.CANCELLED):
            bad = [s for s in items if s.phase is phase]
            if bad:
                return JobStatus(
                    phase,
                    f"{len(bad)}/{len(items)} tasks {phase.value}: {bad[0].reason}",
                    bad[0].raw_state,
                )
        return JobStatus(Phase.DONE, "", "COMPLETED")
    for phase in (Phase.RUNNING, Phase.RESUMING, Phase.QUEUED):
        if any(s.phase is phase for s in items):
            return JobStatus(phase, "", "")
    return UNKNOWN
