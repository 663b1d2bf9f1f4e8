"""One shared, rate-limited poller for any number of Slurm jobs: submitit's, with more.

`SacctPoller` is submitit's `SlurmInfoWatcher` (registration, the finished-job set, the call
counter, `get_state` / `is_done`). Every refresh asks sacct about *all* unfinished registered
jobs in a single call, so a sweep of hundreds of jobs costs one RPC per interval instead of
hundreds (sacct RPC storms are a classic way to get an HPC account throttled). Jobs missing
from the answer stay UNKNOWN: sacct lags the controller, and missing is not failed.

What hpceval adds (docs/controller.md, "Job states: submitit's watcher"): the sacct call goes
through the `SlurmClient` (a fake in unit tests; -X, a start-time window -S, a timeout, a
standard time format), a fixed minimum interval on an injectable clock instead of submitit's
back-off, whole arrays registered task by task, requeues seen between two polls, and sacct
failures counted rather than only logged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta

from submitit.slurm.slurm import SlurmInfoWatcher

from hpceval.backends.slurm.client import SlurmClient, SlurmError
from hpceval.backends.slurm.records import JobRecord, base_job_id
from hpceval.backends.slurm.states import NOT_LISTED, JobStatus, Phase, classify, combine

log = logging.getLogger(__name__)


class SacctPoller(SlurmInfoWatcher):
    """Tracks registered job ids ("12", or "12_3" for one array task) through one sacct call.

    Register arrays with `register_array("12", range(4))`: each task "12_0".."12_3" is polled,
    and "12" itself reads as the combination of exactly those tasks, so the array is finished
    only once every task's row has shown up. A bare `register("12")` of an array can only
    combine the task rows sacct happened to return, and sacct lags on array tasks by seconds:
    it may report the array finished while a late task's row is still missing.
    """

    def __init__(
        self,
        client: SlurmClient,
        *,
        min_interval_s: float = 2.0,
        starttime_slack_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(delay_s=max(1, round(min_interval_s)))
        self._client = client
        self._min_interval_s = min_interval_s
        # -S is compared with the controller's clock: allow for skew between login node and it.
        self._slack = timedelta(seconds=starttime_slack_s)
        self._clock = clock
        # registration order (submitit keeps a set): sacct is asked in the order jobs came
        self._submitted: dict[str, datetime | None] = {}
        self._statuses: dict[str, JobStatus] = {}
        self._records: dict[str, JobRecord] = {}
        self._arrays: dict[str, list[str]] = {}  # base id -> its registered task ids
        self._last_call: float | None = None
        self._lock = threading.RLock()
        self.consecutive_errors = 0
        self.last_error: SlurmError | None = None

    # -- registration -----------------------------------------------------------------------

    def register(self, job_id: str, *, submitted_at: datetime | None = None) -> None:
        """Poll a job. `submitted_at` (just before sbatch) lets sacct skip older jobs that had
        the same id; leave it None for jobs of unknown age, which disables that filter."""
        with self._lock:
            if job_id not in self._submitted and job_id not in self._arrays:
                self._submitted[job_id] = submitted_at
                super().register_job(job_id)

    def register_job(self, job_id: str) -> None:  # submitit's name (get_info registers too)
        self.register(job_id)

    def register_array(
        self, base_id: str, tasks: Iterable[int], *, submitted_at: datetime | None = None
    ) -> list[str]:
        """Poll array tasks one by one; `status(base_id)` then combines exactly these tasks."""
        task_ids = [f"{base_id}_{task}" for task in tasks]
        with self._lock:
            self._drop(base_id)
            self._arrays[base_id] = task_ids
            for task_id in task_ids:
                self.register(task_id, submitted_at=submitted_at)
        return task_ids

    def forget(self, job_id: str) -> None:
        with self._lock:
            for task_id in self._arrays.pop(job_id, []):
                self._drop(task_id)
            self._drop(job_id)

    @property
    def job_ids(self) -> list[str]:
        with self._lock:
            return [*self._submitted, *self._arrays]

    @property
    def sacct_calls(self) -> int:
        return self.num_calls

    # -- queries ----------------------------------------------------------------------------

    def status(self, job_id: str) -> JobStatus:
        """Last known status (no sacct call); UNKNOWN for ids never registered or never seen."""
        with self._lock:
            if job_id in self._arrays:
                return combine(self.status(task_id) for task_id in self._arrays[job_id])
            return self._statuses.get(job_id, NOT_LISTED)

    def record(self, job_id: str) -> JobRecord | None:
        """Last sacct record of a job (node list, times, exit code), if sacct has shown it."""
        with self._lock:
            return self._records.get(job_id)

    def statuses(self) -> dict[str, JobStatus]:
        with self._lock:
            return {job_id: self.status(job_id) for job_id in self.job_ids}

    def is_done(self, job_id: str, mode: str = "standard") -> bool:
        """submitit's question, answered with hpceval's states (a requeue is not an end)."""
        with self._lock:
            self.get_info(job_id, mode=mode)
            return self.status(job_id).terminal

    def refresh(self, *, force: bool = False) -> dict[str, JobStatus]:
        """Update all unfinished jobs with ONE sacct call, unless the last call was less than
        `min_interval_s` ago (then the cached statuses are returned; `force=True` bypasses).

        A failing sacct is logged and leaves the statuses as they were (clusters have transient
        slurmdbd hiccups); `consecutive_errors`/`last_error` let callers give up eventually.
        """
        with self._lock:
            self.update_if_long_enough("force" if force else "standard")
            return self.statuses()

    def wait(
        self,
        job_ids: Iterable[str] | None = None,
        *,
        timeout_s: float,
        poll_s: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> dict[str, JobStatus]:
        """Poll until the given (default: all) jobs are terminal or `timeout_s` passes; returns
        their statuses either way, so the caller decides what a timeout means."""
        wanted = list(job_ids) if job_ids is not None else self.job_ids
        for job_id in wanted:
            self.register(job_id)
        interval = self._min_interval_s if poll_s is None else poll_s
        deadline = self._clock() + timeout_s
        while True:
            self.refresh(force=True)
            current = {job_id: self.status(job_id) for job_id in wanted}
            if all(s.terminal for s in current.values()) or self._clock() >= deadline:
                return current
            sleep(max(0.05, min(interval, deadline - self._clock())))

    # -- submitit's hooks -------------------------------------------------------------------

    def update_if_long_enough(self, mode: str) -> None:
        """A fixed minimum interval on our clock (submitit backs off from 2 s to `delay_s`,
        which would leave `status --watch` minutes behind a long-running job)."""
        if mode == "cache":
            return
        last = self._last_call
        if mode != "force" and last is not None and self._clock() - last < self._min_interval_s:
            return
        self.update()

    def update(self) -> None:
        """ONE sacct call for every registered, unfinished job, through the SlurmClient."""
        with self._lock:
            pending = [j for j in self._submitted if j not in self._finished]
            if not pending:
                return
            self._last_call = self._clock()
            self._num_calls += 1
            try:
                records = self._client.sacct(pending, starttime=self._starttime(pending))
            except SlurmError as exc:
                self.consecutive_errors += 1
                self.last_error = exc
                log.warning("sacct failed (%d in a row), keeping last known states: %s",
                            self.consecutive_errors, exc)
                return
            self.consecutive_errors = 0
            self.last_error = None
            self._last_status_check = time.time()
            for job_id in pending:
                status, found = _lookup(job_id, records)
                current = _follow(self._statuses.get(job_id, NOT_LISTED), status)
                self._statuses[job_id] = current
                if found is not None:
                    self._records[job_id] = found
                    self._info_dict[job_id] = {"JobID": found.job_id, "State": found.raw_state,
                                               "NodeList": found.node_list}
                if current.terminal:
                    self._finished.add(job_id)

    def clear(self) -> None:
        with self._lock:
            super().clear()
            self._statuses.clear()
            self._records.clear()
            self._last_call = None

    # -- internals --------------------------------------------------------------------------

    def _drop(self, job_id: str) -> None:
        self._registered.discard(job_id)
        self._finished.discard(job_id)
        for table in (self._submitted, self._statuses, self._records, self._info_dict):
            table.pop(job_id, None)

    def _starttime(self, pending: list[str]) -> datetime | None:
        times = [self._submitted.get(job_id) for job_id in pending]
        known = [t for t in times if t is not None]
        if not known or len(known) != len(times):
            return None  # one job of unknown age: a filter could hide it, so use none
        return min(known) - self._slack


def _follow(previous: JobStatus, current: JobStatus) -> JobStatus:
    """Next status of a job, given what sacct said before and says now."""
    if current.phase is Phase.UNKNOWN and previous.phase is not Phase.UNKNOWN:
        # Seen before, missing now: a sacct hiccup (e.g. a skipped stand-in row), not news.
        return previous
    if current.phase is Phase.QUEUED and previous.phase in (Phase.RUNNING, Phase.RESUMING):
        # Back in the queue after running = requeued. sacct shows the REQUEUED row only for a
        # few seconds before the new PENDING record replaces it, so a poll can easily miss it.
        return JobStatus(Phase.RESUMING, "requeued; waiting to run again", current.raw_state)
    return current


def _lookup(job_id: str, records: Mapping[str, JobRecord]) -> tuple[JobStatus, JobRecord | None]:
    record = records.get(job_id)
    if record is not None:
        return classify(record), record
    base = base_job_id(job_id)
    if job_id != base:
        # An array task with no row of its own yet: a pending array can be listed as a single
        # "12|PENDING" row until it is split into tasks. Anything else: not visible yet.
        whole = records.get(base)
        return (classify(whole), None) if whole is not None else (NOT_LISTED, None)
    tasks = [r for key, r in records.items() if base_job_id(key) == job_id and r.job_id != job_id]
    if tasks:  # the base id of an array: combine its tasks
        return combine(classify(r) for r in tasks), None
    return NOT_LISTED, None
