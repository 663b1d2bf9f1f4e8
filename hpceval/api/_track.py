"""`hpceval status`: runs' states with their GPU-hours and finished tasks' flags, refreshed as
often as asked, one scheduler query per refresh whatever the number of runs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpceval.api._load import RunSource, find
from hpceval.contract import task_dir
from hpceval.records import RunFileError, read_run

if TYPE_CHECKING:
    from hpceval.backends.slurm.client import SlurmClient
    from hpceval.results.flags import Flag
    from hpceval.runs.index import RunRef
    from hpceval.runs.state import RunState, Tracker


@dataclass(frozen=True)
class RunStatus:
    """One run's state, and what its jobs held (GPUs x elapsed, every attempt)."""

    state: RunState
    cost: dict[str, Any]  # {accounted, gpu_hours, node_hours, unknown_jobs, models: [...]}


# A view that follows runs (status --watch, a notebook's loop) asks the scheduler at most this
# often: every ask is an RPC to a shared controller for as long as the runs last. The run's own
# files (task markers, request progress) are read on every refresh.
LIVE_POLL_S = 30.0


class Tracking:
    """Runs followed together: each refresh is one scheduler query for all of them."""

    def __init__(self, refs: Sequence[RunRef], skipped: Sequence[tuple[RunRef, str]], *,
                 client: SlurmClient | None = None, min_interval_s: float = LIVE_POLL_S) -> None:
        from hpceval.runs.state import Tracker

        self.refs, self.skipped = list(refs), list(skipped)
        self._tracker: Tracker = Tracker(client, min_interval_s=min_interval_s)
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
        return [RunStatus(s, run_cost(s.ref.run_dir, s.run, s.jobs, book)) for s in states]


def track(runs: Sequence[RunSource] | None = None, *, limit: int = 5,
          output_dirs: Iterable[str | Path] = (), client: SlurmClient | None = None,
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
