"""`hpceval status`: runs' states with their GPU-hours and finished tasks' flags, refreshed as
often as asked, one scheduler query per refresh whatever the number of runs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpceval.api._load import RunSource, find
from hpceval.contract import model_dir, task_dir
from hpceval.records import RunFileError, read_run

if TYPE_CHECKING:
    from hpceval.backends import SchedulerClient
    from hpceval.results.flags import Flag
    from hpceval.results.runtime_view import Runtime
    from hpceval.runs.index import RunRef
    from hpceval.runs.state import RunState, Tracker


@dataclass(frozen=True)
class RunStatus:
    """One run's state, what its jobs held (GPUs x elapsed, every attempt), and what the
    servers of its running models did so far (``served``: model key -> Tracking.served's
    dict, for the models that are running and have a runtime.json, server-load.json or
    ledger)."""

    state: RunState
    cost: dict[str, Any]  # {accounted, gpu_hours, node_hours, unknown_jobs, models: [...]}
    served: dict[str, dict[str, Any]] = field(default_factory=dict)
    # A running sweep judge job's servers, by judge name: their latest load sample (its front
    # samples them into auxiliary/<name>/), {"unknown": why}; judges without one left out.
    judges: dict[str, dict[str, Any]] = field(default_factory=dict)


# A view that follows runs (status --watch, a notebook's loop) asks the scheduler at most this
# often: every ask is an RPC to a shared controller for as long as the runs last. The run's own
# files (task markers, request progress) are read on every refresh.
LIVE_POLL_S = 30.0
# The tasks' runtime.json files (a few hundred bytes each), the running models'
# server-load.json (under 64 KiB) and ledger (a few hundred bytes) read per refresh at most: a
# sweep of hundreds of running models must not turn a refresh into thousands of reads. A
# finished task's file is final and read once per Tracking.
LIVE_READS = 256
# A file written in this last stretch is a task being served now: its tokens/s count as live.
LIVE_WINDOW_S = 60.0
# Judges served in a model's job whose load a refresh reads (one or two is usual), from the
# same budget.
JUDGES_SHOWN = 4


class Tracking:
    """Runs followed together: each refresh is one scheduler query for all of them."""

    def __init__(self, refs: Sequence[RunRef], skipped: Sequence[tuple[RunRef, str]], *,
                 client: SchedulerClient | None = None,
                 min_interval_s: float = LIVE_POLL_S) -> None:
        from hpceval.runs.state import Tracker

        self.refs, self.skipped = list(refs), list(skipped)
        self._tracker: Tracker = Tracker(client, min_interval_s=min_interval_s)
        self._final: dict[str, Runtime] = {}  # done tasks' runtime.json, by task directory
        for ref in self.refs:
            self._tracker.add(ref)

    def refresh(self, *, force: bool = False) -> list[RunStatus]:
        """States and GPU-hours from the same, single scheduler call (at most one per
        ``min_interval_s`` unless ``force``)."""
        from hpceval.runs.cost import collect_usage, run_cost, usage_round
        from hpceval.runs.jobs import read_jobs

        backend_of = self._tracker.backend
        book, wanted = usage_round(backend_of, [(r.run_dir, read_run(r.run_dir),
                                                 read_jobs(r.run_dir)) for r in self.refs])
        states = self._tracker.refresh(force=force)  # asks about `wanted` too
        collect_usage(backend_of, wanted, book)
        budget = [LIVE_READS]
        return [RunStatus(s, run_cost(s.ref.run_dir, s.run, s.jobs, book),
                          self.served(s, budget), self.judges_served(s, budget))
                for s in states]

    def served(self, state: RunState, budget: list[int]) -> dict[str, dict[str, Any]]:
        """Per running model, summed over its tasks' runtime.json: ``requests``,
        ``tokens_per_s`` (of the files written in the last LIVE_WINDOW_S; None if none),
        ``tasks`` (files summed), ``unread`` (tasks left for a later refresh: `budget`, a
        one-item list shared by the runs of a refresh, ran out), ``unknown`` ({task key: why}
        for files that cannot be shown); ``server``: its servers' latest load sample
        (server-load.json's "last" with ``age_s``, {"unknown": why}, or None: no file, or
        `budget` ran out); and ``ledger``: its current job's phase (ledger_view.job_now,
        {"unknown": why}, or None: no ledger, or `budget` ran out). Models with none of
        these files are left out."""
        import time

        from hpceval.phases import Phase
        from hpceval.results.runtime_view import live_tokens_per_s, load_runtime, totals
        from hpceval.results.server_load import judges_served_in

        out: dict[str, dict[str, Any]] = {}
        now = time.time()
        for m in state.models:
            if m.phase is not Phase.RUNNING:
                continue
            found: dict[str, Runtime] = {}
            unread = 0
            for t in m.tasks:
                folder = task_dir(str(state.ref.run_dir), m.key, t.key)
                if folder in self._final:
                    found[t.key] = self._final[folder]
                elif budget[0] <= 0:
                    unread += 1
                else:
                    budget[0] -= 1
                    found[t.key] = load_runtime(folder)
                    if t.phase is Phase.DONE:
                        self._final[folder] = found[t.key]
            # after the tasks: what a refresh read before it had this read keeps its figures
            folder = model_dir(str(state.ref.run_dir), m.key)
            server = self._server(folder, budget, now)
            judges = {name: load for name, judge in judges_served_in(folder, JUDGES_SHOWN)
                      if (load := self._server(judge, budget, now)) is not None}
            ledger = self._ledger(str(state.ref.run_dir), m.key, m.job_id, budget, now)
            present = [r for r in found.values() if not r.missing]
            if not present and not unread and server is None and ledger is None and not judges:
                continue
            total = totals(present)
            out[m.key] = {"requests": total["requests"], "tokens_per_s": live_tokens_per_s(
                present, now, LIVE_WINDOW_S), "tasks": total["tasks"],
                "unread": unread, "unknown": {k: r.problem for k, r in found.items()
                                              if r.facts is None and not r.missing},
                "server": server, "judges": judges, "ledger": ledger}
        return out

    def judges_served(self, state: RunState, budget: list[int]) -> dict[str, dict[str, Any]]:
        """Each running sweep judge job's servers' latest load sample, by judge name (one read
        of its server-load.json each, from `budget`, after the models'); RunStatus.judges."""
        import time

        from hpceval.contract import aux_dir
        from hpceval.phases import Phase

        now = time.time()
        return {j.name: sample for j in state.judges if j.phase is Phase.RUNNING and (
            sample := self._server(str(aux_dir(state.ref.run_dir, j.name)), budget, now))}

    @staticmethod
    def _server(folder: str, budget: list[int], now: float) -> dict[str, Any] | None:
        """The latest load sample of the servers whose proxy writes into ``folder`` (a running
        model's, or a judge's in its job: one read of its server-load.json, from `budget`),
        {"unknown": why}, or None."""
        from hpceval.results.server_load import load_server_load

        if budget[0] <= 0:
            return None
        budget[0] -= 1
        load = load_server_load(folder)
        if load.facts is None:
            return None if load.missing else {"unknown": load.problem}
        last = load.facts["last"]
        return None if last is None else {**last, "age_s": round(max(0.0, now - last["t"]))}

    @staticmethod
    def _ledger(run_dir: str, key: str, job_id: str | None, budget: list[int], now: float
                ) -> dict[str, Any] | None:
        """A running model's current job in its ledger (one read of the file alone, from
        `budget`): the job the scheduler names, else the newest (a sweep's element writes its
        own job id, not <array>_<n>); {"unknown": why}, or None."""
        from hpceval.results.ledger import read_ledger
        from hpceval.results.ledger_view import job_now

        if budget[0] <= 0:
            return None
        budget[0] -= 1
        jobs, why = read_ledger(Path(model_dir(run_dir, key)), now=now, details=False)
        if why is not None:
            return {"unknown": why}
        if not jobs:
            return None
        return job_now(next((j for j in jobs if j.job_id == job_id), jobs[-1]))


def track(runs: Sequence[RunSource] | None = None, *, limit: int = 5,
          output_dirs: Iterable[str | Path] = (), client: SchedulerClient | None = None,
          min_interval_s: float = LIVE_POLL_S) -> Tracking:
    """Follow RUNs (default: the newest ``limit``). A run whose run.json or jobs.json is
    damaged is left out, with why, in ``Tracking.skipped``: one such run must not hide the
    state of every other one."""
    from hpceval.runs.index import list_runs
    from hpceval.runs.jobs import read_jobs

    dirs = list(output_dirs)
    refs = ([find(r, dirs) for r in runs] if runs
            else list_runs([Path(d) for d in dirs])[:limit])
    readable: list[RunRef] = []
    skipped: list[tuple[RunRef, str]] = []
    for ref in refs:
        try:
            read_run(ref.run_dir)
            read_jobs(ref.run_dir)
        except (RunFileError, OSError, ValueError, KeyError, TypeError) as exc:
            skipped.append((ref, f"{type(exc).__name__}: {exc}"))
            continue
        readable.append(ref)
    return Tracking(readable, skipped, client=client, min_interval_s=min_interval_s)


def task_flags(state: RunState) -> dict[tuple[str, str], list[Flag]]:
    """(model key, task key) -> the flags of each finished task of a run that has any (scores
    wrong without an error: all zero, all unparsable, a count short)."""
    from hpceval.results.flags import finished_task_flags

    out: dict[tuple[str, str], list[Flag]] = {}
    for m in state.models:
        for t in m.tasks:
            if t.phase.value == "done":
                found = finished_task_flags(task_dir(str(state.ref.run_dir), m.key, t.key))
                if found:
                    out[(m.key, t.key)] = found
    return out
