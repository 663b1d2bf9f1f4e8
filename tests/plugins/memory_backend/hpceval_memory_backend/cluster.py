"""The scheduler the memory backend talks to: a queue of job records, in this process's memory.

Nothing runs. A job is a record (its script, run directory, role, what it waits for) whose
phase the test sets with ``MemoryCluster.set`` (queued, running, done, failed, cancelled,
timeout), with what it held (GPUs, nodes, elapsed seconds) for cost accounting. Every question
the backend asks about jobs is one entry of ``calls``, so a test counts this scheduler's calls
as it counts a real one's (one per status refresh, whatever the number of runs).

One cluster per process (``CLUSTER``) serves every backend made without one; a test that wants
its own passes a ``MemoryCluster`` as the scheduler client (``submit_configs(configs, cluster)``,
``Tracker(cluster)``), the way the Slurm tests pass their fake.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from hpceval.phases import JobStatus, Phase

# what a test may set, as the backend reports it: (phase, reason, the scheduler's own word)
STATES: dict[str, JobStatus] = {
    "queued": JobStatus(Phase.QUEUED, "waiting in the in-memory queue", "queued"),
    "running": JobStatus(Phase.RUNNING, "", "running"),
    "done": JobStatus(Phase.DONE, "", "done"),
    "failed": JobStatus(Phase.FAILED, "exit code 1", "failed"),
    "cancelled": JobStatus(Phase.CANCELLED, "cancelled", "cancelled"),
    "timeout": JobStatus(Phase.FAILED, "walltime reached (timeout)", "timeout"),
}
LIVE = frozenset({"queued", "running"})


@dataclass(frozen=True)
class MemoryJob:
    """One job (or one array element: ``id`` "<base>_<element>") as the scheduler keeps it."""

    id: str
    base: str  # the job's id; an array element's array id
    script: Path
    run_dir: Path
    role: str
    after: tuple[str, ...]
    submitted_at: float
    state: str = "queued"
    started_at: float | None = None
    ended_at: float | None = None
    gpus: int = 0
    nodes: int = 1
    elapsed_s: int | None = None  # what the test says it ran; else from started/ended
    # a cancel does not stop it (a job stuck in its teardown): kill must report it still active
    sticky: bool = False

    @property
    def status(self) -> JobStatus:
        found = STATES[self.state]
        if self.state == "queued" and self.after:
            return replace(found, reason=f"waiting for {', '.join(self.after)}")
        return found

    @property
    def live(self) -> bool:
        return self.state in LIVE

    def elapsed(self, now: float) -> int | None:
        """Seconds it ran (so far); None before it started."""
        if self.elapsed_s is not None:
            return self.elapsed_s
        if self.started_at is None:
            return None
        return int((self.ended_at or now) - self.started_at)


@dataclass
class MemoryCluster:
    """The jobs, by scheduler id, and a record of every call the backend made."""

    jobs: dict[str, MemoryJob] = field(default_factory=dict)
    arrays: dict[str, tuple[str, ...]] = field(default_factory=dict)  # base id -> element ids
    calls: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)  # (what, ids asked)
    submits: list[MemoryJob] = field(default_factory=list)  # each job (array) as submitted
    cancels: list[tuple[str, ...]] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- what the backend does ---------------------------------------------------------------
    def add(self, script: Path, run_dir: Path, role: str, after: Sequence[str],
            elements: Sequence[int] | None) -> MemoryJob:
        """Queue one job, or an array of ``elements``; the job (the array's base) comes back."""
        with self._lock:
            base = f"mem-{next(self._ids)}"
            job = MemoryJob(base, base, script, run_dir, role, tuple(after), time.time())
            self.submits.append(job)
            if elements is None:
                self.jobs[base] = job
            else:
                ids = tuple(f"{base}_{i}" for i in elements)
                self.arrays[base] = ids
                self.jobs.update({i: replace(job, id=i) for i in ids})
            return job

    def ask(self, what: str, ids: Iterable[str]) -> dict[str, tuple[MemoryJob, ...]]:
        """One call about ``ids`` (recorded): for each id it knows, its job, or an array's
        elements for the array's base id."""
        asked = tuple(ids)
        with self._lock:
            self.calls.append((what, asked))
            found = {i: tuple(self.jobs[e] for e in self.elements(i) if e in self.jobs)
                     for i in asked}
            return {i: jobs for i, jobs in found.items() if jobs}

    def elements(self, job_id: str) -> tuple[str, ...]:
        """The scheduler ids behind ``job_id``: an array's elements, or itself."""
        return self.arrays.get(job_id, (job_id,))

    def cancel(self, ids: Sequence[str]) -> None:
        """Cancel every live job (element) behind ``ids``; a sticky one stays as it is."""
        with self._lock:
            self.cancels.append(tuple(ids))
            now = time.time()
            for job_id in ids:
                for e in self.elements(job_id):
                    job = self.jobs.get(e)
                    if job is not None and job.live and not job.sticky:
                        self.jobs[e] = replace(job, state="cancelled", ended_at=now)

    # -- what the test does ------------------------------------------------------------------
    def set(self, job_id: str, state: str, *, gpus: int | None = None,
            nodes: int | None = None, elapsed_s: int | None = None,
            sticky: bool | None = None) -> None:
        """Drive a job (every element of an array by its base id) to ``state`` (one of STATES),
        with what it held; it starts when it first runs and ends at a terminal state."""
        if state not in STATES:
            raise ValueError(f"unknown state {state!r} (one of {', '.join(STATES)})")
        now = time.time()
        with self._lock:
            for e in self.elements(job_id):
                job = self.jobs[e]
                started = job.started_at
                if started is None and state != "queued":
                    started = now
                self.jobs[e] = replace(
                    job, state=state, started_at=started,
                    ended_at=None if state in LIVE else job.ended_at or now,
                    gpus=job.gpus if gpus is None else gpus,
                    nodes=job.nodes if nodes is None else nodes,
                    elapsed_s=job.elapsed_s if elapsed_s is None else elapsed_s,
                    sticky=job.sticky if sticky is None else sticky)

    def state(self, job_id: str) -> str:
        return self.jobs[job_id].state

    def asked(self, what: str = "states") -> list[tuple[str, ...]]:
        """The ids of each call of one kind (states, query, usage, cancel-check)."""
        return [ids for kind, ids in self.calls if kind == what]


CLUSTER = MemoryCluster()  # this process's scheduler, for a backend made without a cluster
