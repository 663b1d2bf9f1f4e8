"""One tick of a watch: look, claim, submit, and queue the next tick. Runs on a compute node
(``python -m hpceval.job watch-tick --watch-dir DIR``), or anywhere for tests.

Under the watch's lock, from reading state.json to queuing the next tick:
1. the training job (``--after-job``): one backend query, made BEFORE the listing, so a
   checkpoint it wrote just before it ended is in this listing;
2. list the checkpoints, judge each new one (hpceval.watch.checkpoints); one not owned by a
   trusted uid (hpceval.watch.trust) is only recorded as ignored, with its owner;
3. claim the complete, unclaimed ones, at most ``max_per_tick`` (the rest wait, complete,
   for the next tick) (status ``claimed``, saved), then submit it through the
   same code path as ``hpceval submit`` with ``deployment.checkpoint_path`` set to it;
   record the run (``submitted``) or the error (``failed``);
4. end the watch when the training job had ended (at least min(interval, 60 s) before: a
   shared file system may show another node's newest files late) and this tick found
   nothing new and nothing pending; otherwise queue the next tick (``--begin=now+INTERVAL``,
   singleton).

Retries: a submission that failed before any job was queued is tried again at later ticks,
``attempts`` times in all (a transient submission error heals; a config error shows in status
each time). One that may have queued a job is never retried: exactly once comes first.
An evaluation that fails in its job is not retried by the watch (``hpceval resume RUN``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpceval.backends import JobRequest, SchedulerClient, backend_for
from hpceval.contract import WATCH_SCRIPT
from hpceval.errors import HpcevalError
from hpceval.phases import UNKNOWN
from hpceval.records import Reason, Role
from hpceval.watch import state as st
from hpceval.watch.checkpoints import Checkpoint, judge, list_checkpoints
from hpceval.watch.spec import WatchError, WatchSpec, read_spec

KEEP_TICKS = 50  # tick job entries kept in state.json (stop cancels the newest)
SETTLE_MAX_S = 60
MAX_IGNORED = 20


class SubmitFailed(Exception):
    def __init__(self, message: str, *, retryable: bool, run_dir: str | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.run_dir = run_dir


@dataclass
class TickReport:
    status: str  # the watch's status after this tick
    new: list[str] = field(default_factory=list)  # first seen at this tick
    submitted: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)  # complete, over this tick's cap
    cap: int = 0  # the watch's max_per_tick
    foreign: list[str] = field(default_factory=list)  # "NAME: owned by USER (uid N)"
    training: str | None = None  # the after-job's phase, as the backend said before the listing
    next_tick: str | None = None

    def lines(self) -> list[str]:
        out = [f"watch {self.status}: {len(self.new)} new, {len(self.submitted)} submitted, "
               f"{len(self.failed)} failed, {len(self.pending)} pending"]
        if self.training is not None:
            out.append(f"training job: {self.training}")
        out += [f"submitted {name}" for name in self.submitted]
        out += [f"failed {name}" for name in self.failed]
        if self.deferred:
            out.append(f"left for the next tick (at most {self.cap} submissions a tick): "
                       + ", ".join(self.deferred))
        out += [f"ignored {what}" for what in self.foreign]
        if self.next_tick:
            out.append(f"next tick: job {self.next_tick}")
        return out


Submitter = Callable[[WatchSpec, Checkpoint, SchedulerClient | None], dict[str, Any]]


def checkpoint_overrides(spec: WatchSpec, ckpt: Checkpoint) -> list[str]:
    """What a checkpoint's run adds to the watch's own -o list. Values are JSON strings
    (JSON is YAML), so any path survives the override parser unchanged."""
    return [*spec.overrides,
            f"deployment.checkpoint_path={json.dumps(str(ckpt.path))}",
            f"execution.job_name={json.dumps(f'hpceval-{spec.watch_id}-step{ckpt.step}')}"]


def submit_checkpoint(spec: WatchSpec, ckpt: Checkpoint,
                      client: SchedulerClient | None) -> dict[str, Any]:
    """`hpceval submit RUN_FILE -o deployment.checkpoint_path=CKPT ...`, as functions."""
    from hpceval.config import load_run
    from hpceval.config.errors import ConfigError
    from hpceval.runs.jobs import read_jobs
    from hpceval.runs.submit import create_run, submit_prepared

    try:
        configs = load_run(Path(spec.run_file), checkpoint_overrides(spec, ckpt),
                           profile=spec.profile)
        # preflight: the checkpoint folder is checked here too
        run = create_run(configs, client=client)
    except ConfigError as exc:
        raise SubmitFailed(f"config error: {exc}", retryable=True) from exc
    except Exception as exc:  # nothing queued yet; the next checkpoint must not wait on it
        raise SubmitFailed(f"{type(exc).__name__}: {exc}", retryable=True) from exc
    try:
        result = submit_prepared(run, client, written=True)
    except Exception as exc:
        # the scheduler may have queued the job before what failed: only a chain with nothing
        # left queued (none submitted, or all withdrawn: runs.submit.submit_jobs) is safe to
        # submit again
        queued = any(e.cancelled_at is None for e in read_jobs(run.run_dir).chain)
        raise SubmitFailed(f"{type(exc).__name__}: {exc}", retryable=not queued,
                           run_dir=str(run.run_dir)) from exc
    return {"run_id": result.invocation_id, "run_dir": str(result.run_dir),
            "job_ids": list(result.job_ids), "model": result.models[0]}


def settle_s(spec: WatchSpec) -> int:
    """How long after the training job ended its last files count as visible: a shared file
    system's attribute cache may hide a folder's newest entries from another node for up to
    a minute (NFS acdirmax), and a tick in that window must not end the watch."""
    return min(spec.interval_s, SETTLE_MAX_S)


def training_phase(client: SchedulerClient | None, spec: WatchSpec, at: float
                   ) -> tuple[str, bool]:
    """The after-job's phase, and whether it ended at least settle_s() before `at`: ONE
    backend query. A failed query is "not ended": the watch asks again at the next tick."""
    assert spec.after_job is not None
    try:
        info = backend_for(spec.kind, client=client).query([spec.after_job]).get(spec.after_job)
    except HpcevalError as exc:
        return f"unknown ({exc})", False
    status = UNKNOWN if info is None else info.status
    if not status.terminal:
        return status.phase.value, False
    end = info.ended_at if info is not None else None
    settled = end is None or at - end >= settle_s(spec)
    return status.phase.value + ("" if settled else " (settling)"), settled


def run_tick(watch_dir: Path, *, client: SchedulerClient | None = None,
             now: Callable[[], float] = time.time,
             submit: Submitter = submit_checkpoint, job_id: str | None = None) -> TickReport:
    """One tick; `job_id` is this tick's own Slurm job (recorded with its claims)."""
    spec = read_spec(watch_dir)
    me = job_id or f"pid {os.getpid()}"
    with st.locked(watch_dir):
        state = st.load_state(watch_dir)
        if state.status != st.WATCHING:
            return TickReport(state.status)
        report = TickReport(st.WATCHING)
        ended = False
        if spec.after_job:
            report.training, ended = training_phase(client, spec, now())
        _look(spec, state, report, now(), training_ended=ended)
        st.save_state(watch_dir, state)
        claimable = _claimable(spec, state)
        report.cap, report.deferred = spec.max_per_tick, claimable[spec.max_per_tick:]
        for name in claimable[:spec.max_per_tick]:
            _submit_one(watch_dir, spec, state, name, client, submit, report, now, me)
        report.pending = _pending(spec, state)
        state.last_tick = st.LastTick(now(), me, list(report.new), list(report.pending),
                                      report.training)
        if ended and not report.new and not report.pending and not report.submitted:
            state.status, report.status = st.ENDED, st.ENDED
            state.reason = f"training job {spec.after_job} ended and nothing new remains"
            st.save_state(watch_dir, state)
            return report
        try:
            report.next_tick = queue_tick(watch_dir, spec, state, client, now())
            state.reason = ""
        except Exception as exc:
            state.reason = (f"the next tick could not be queued ({exc}); "
                            "`hpceval watch resume` queues one")
            raise WatchError(state.reason) from exc
        finally:
            st.save_state(watch_dir, state)
        return report


def _look(spec: WatchSpec, state: st.WatchState, report: TickReport, at: float, *,
          training_ended: bool) -> None:
    """Record every checkpoint; judge the ones not yet claimed."""
    from hpceval.trust import owner_name

    listing = list_checkpoints(spec)
    state.ignored = listing.ignored[:MAX_IGNORED]
    foreign = dict(listing.foreign)
    state.foreign = [st.ForeignEntry(n, uid, owner_name(uid))
                     for n, uid in listing.foreign[:MAX_IGNORED]]
    report.foreign = [f"{f.name}: owned by {f.owner_name}" for f in state.foreign]
    entries = state.checkpoints
    for ckpt in listing.checkpoints:
        entry = entries.get(ckpt.name)
        if entry is None:
            entry = entries[ckpt.name] = st.CheckpointEntry(str(ckpt.path), ckpt.step,
                                                            first_seen=at)
            report.new.append(ckpt.name)
        if entry.status != st.PENDING:
            continue
        if judge(spec, ckpt.path, entry, at):
            entry.status, entry.complete_at = st.COMPLETE, at
        elif training_ended and spec.marker is not None:
            # no marker now, and no writer left to write it
            entry.status = st.INCOMPLETE
            entry.error = f"the training job ended without writing {spec.marker}"
    listed = {c.name for c in listing.checkpoints}
    for name, entry in entries.items():
        if entry.status == st.CLAIMED:  # the tick that claimed it died mid-submission
            entry.status, entry.retryable = st.FAILED, False
            entry.error = ("a tick stopped while submitting it; not resubmitted, as its job "
                           "may exist (hpceval ls runs)")
        elif entry.status in (st.PENDING, st.COMPLETE) and name in foreign:
            # replaced by someone else's folder (a group-writable folder without the
            # sticky bit) after an earlier tick saw the user's own
            entry.status = st.GONE
            entry.error = f"now owned by {owner_name(foreign[name])}: not evaluated"
        elif entry.status in (st.PENDING, st.COMPLETE) and name not in listed:
            # removed before it was complete (training keeps only the last N checkpoints),
            # or while it waited for a tick under the cap
            entry.status, entry.error = st.GONE, "removed before it was submitted"


def _pending(spec: WatchSpec, state: st.WatchState) -> list[str]:
    """What a later tick still has to do: incomplete checkpoints, complete ones over the
    cap, submissions to retry."""
    return sorted(n for n, e in state.checkpoints.items()
                  if e.status in (st.PENDING, st.COMPLETE)
                  or (e.status == st.FAILED and _retry_left(spec, e)))


def _retry_left(spec: WatchSpec, entry: st.CheckpointEntry) -> bool:
    return entry.retryable and entry.attempts < spec.attempts


def _claimable(spec: WatchSpec, state: st.WatchState) -> list[str]:
    entries = state.checkpoints
    names = [n for n, e in entries.items()
             if e.status == st.COMPLETE or (e.status == st.FAILED and _retry_left(spec, e))]
    return sorted(names, key=lambda n: (entries[n].step, n))


def _submit_one(watch_dir: Path, spec: WatchSpec, state: st.WatchState, name: str,
                client: SchedulerClient | None, submit: Submitter, report: TickReport,
                now: Callable[[], float], me: str) -> None:
    entry = state.checkpoints[name]
    entry.status, entry.claimed_at, entry.claimed_by = st.CLAIMED, now(), me
    entry.attempts += 1
    st.save_state(watch_dir, state)  # the claim is on disk before anything is submitted
    ckpt = Checkpoint(name, Path(entry.path), entry.step)
    try:
        run = submit(spec, ckpt, client)
        entry.run_id, entry.run_dir = str(run["run_id"]), str(run["run_dir"])
        entry.job_ids, entry.model = [str(j) for j in run["job_ids"]], str(run["model"])
        entry.status, entry.submitted_at, entry.error = st.SUBMITTED, now(), ""
        report.submitted.append(name)
    except SubmitFailed as exc:
        entry.status, entry.error, entry.retryable = st.FAILED, str(exc), exc.retryable
        entry.failed_at = now()
        if exc.run_dir:
            entry.run_dir = exc.run_dir
        report.failed.append(name)
    st.save_state(watch_dir, state)


def queue_tick(watch_dir: Path, spec: WatchSpec, state: st.WatchState,
               client: SchedulerClient | None, at: float, *, delay_s: int | None = None) -> str:
    """Submit the next tick (one at a time: same job name + singleton) and record it."""
    backend = backend_for(spec.kind, client=client)
    delay = spec.interval_s if delay_s is None else delay_s
    request = JobRequest(WATCH_SCRIPT, begin=f"now+{delay}" if delay > 0 else None,
                         singleton=True, role=Role.WATCH, reason=Reason.TICK)
    (entry,) = backend.submit(watch_dir, request)
    state.ticks.append(st.TickEntry(entry.id, entry.kind, entry.submitted_at, at + delay))
    del state.ticks[:-KEEP_TICKS]
    return entry.id


def main(argv: Sequence[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m hpceval.job watch-tick",
                                     description="One tick of a checkpoint watch.")
    parser.add_argument("--watch-dir", required=True, type=Path)
    parser.add_argument("--job-id", default="", help="this tick's Slurm job id")
    args = parser.parse_args(list(argv))
    try:
        report = run_tick(args.watch_dir, job_id=args.job_id or None)
    except WatchError as exc:
        print(f"hpceval watch-tick: {exc}", file=sys.stderr)
        return 2
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    for line in report.lines():
        print(f"[{stamp}] {line}")
    return 0  # a checkpoint's failed submission is in state.json and status, not the tick's
