"""jobs.json: the chain of jobs (or local processes) that worked on a run, oldest first.

Every submission appends entries, it never rewrites them: the first submission, a `resume` (only
the unfinished models), the dependent aggregation job. The newest main entry that covers a
model is the one whose state that model has; older entries stay for `kill` and `info`.
A filelock beside the file serialises writers (a resume racing a kill); each write is atomic.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpceval._version import __version__
from hpceval.backends.base import JobEntry
from hpceval.contract import JOBS_FILE, SUCCESSORS_FILE, aux_dir, model_dir
from hpceval.records import Reason, Role, RunFileError, read_run
from hpceval.storage import atomic_write_json

JOBS_SCHEMA = 2


@dataclass(frozen=True)
class Jobs:
    kind: str
    chain: tuple[JobEntry, ...] = field(default_factory=tuple)

    def main_for(self, model_index: int) -> list[JobEntry]:
        """Main entries that ran (or run) this model, oldest first."""
        return [e for e in self.chain if e.role == Role.MAIN and model_index in e.models]

    def current(self, model_index: int) -> JobEntry | None:
        entries = self.main_for(model_index)
        return entries[-1] if entries else None

    def judge(self, name: str) -> JobEntry | None:
        """The newest job serving the sweep's auxiliary deployment ``name`` (scope: sweep)."""
        entries = [e for e in self.chain if e.role == Role.JUDGE and e.aux == name]
        return entries[-1] if entries else None

    @property
    def ids(self) -> list[str]:
        return [e.id for e in self.chain]


def _path(run_dir: Path) -> Path:
    return run_dir / JOBS_FILE


def read_jobs(run_dir: Path) -> Jobs:
    """The chain from jobs.json, followed by successors the jobs submitted themselves."""
    import json

    path = _path(run_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Jobs(kind="unknown")
    if "chain" not in data:  # schema 1 (early hpceval): {"kind", "jobs": [ids]}
        at = float(data.get("submitted_at") or path.stat().st_mtime)
        entries = tuple(JobEntry(str(j), data.get("kind", "slurm"), Role.MAIN, (0,), False, at)
                        for j in data.get("jobs", []))
        jobs = Jobs(data.get("kind", "slurm"), entries)
    else:
        jobs = Jobs(data["kind"], tuple(JobEntry.from_json(e) for e in data["chain"]))
    return _with_successors(run_dir, jobs)


def _with_successors(run_dir: Path, jobs: Jobs) -> Jobs:
    """Auto-resume: a job stopped by the walltime submits its successor itself and appends
    "<id> [model key]" to jobs.chain (the run's, or its model's); those jobs join the chain
    here, in file order, after the submissions hpceval made."""
    if not jobs.chain:
        return jobs
    try:
        run = read_run(run_dir)
        index, judge_names = {m.key: m.index for m in run.models}, run.judge_names
    except RunFileError:  # the run's own jobs.chain still counts
        index, judge_names = {}, []
    single = len(index) <= 1
    files: list[tuple[Path, str | None]] = [(run_dir / SUCCESSORS_FILE, None)]
    files += [(model_dir(run_dir, k) / SUCCESSORS_FILE, k) for k in index]
    # a sweep judge's successors (its walltime is capped by the partition's MaxTime): in its
    # own folder, so the aggregation job, which waits for the models' successors, never waits
    # for the judge it ends
    judges = [(aux_dir(run_dir, n) / SUCCESSORS_FILE, n) for n in judge_names]
    known = {e.id for e in jobs.chain}
    # Successors start after the first submission: its time is a safe -S bound.
    at = jobs.chain[0].submitted_at
    added: list[JobEntry] = []
    for path, owner in files:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        for line in lines:
            words = line.split()
            if not words or not words[0].isdigit() or words[0] in known:
                continue
            key = words[1] if len(words) > 1 else owner
            models: tuple[int, ...] = ((index[key],) if key in index
                                       else (0,) if single else ())  # () : kill-only
            added.append(JobEntry(words[0], jobs.kind, Role.MAIN, models, False, at,
                                  Reason.AUTO_RESUME))
            known.add(words[0])
    for path, name in judges:
        added += [JobEntry(job, jobs.kind, Role.JUDGE, (), False, at, Reason.AUTO_RESUME,
                           aux=name)
                  for job in _successor_ids(path) if job not in known]
        known.update(e.id for e in added)
    return Jobs(jobs.kind, (*jobs.chain, *added)) if added else jobs


def _successor_ids(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    return list(dict.fromkeys(w[0] for w in (line.split() for line in lines)
                              if w and w[0].isdigit()))


def _write(run_dir: Path, jobs: Jobs) -> None:
    atomic_write_json(_path(run_dir), {
        "schema": JOBS_SCHEMA, "kind": jobs.kind, "updated_at": time.time(),
        "hpceval_version": __version__,
        "jobs": jobs.ids,  # flat list for humans and scripts; the chain has the details
        # successors read from jobs.chain are written too: a later resume stays after them
        "chain": [e.to_json() for e in jobs.chain]})


def _lock(run_dir: Path) -> Any:
    from filelock import FileLock

    return FileLock(str(run_dir / f".{JOBS_FILE}.lock"), timeout=60)


def append_jobs(run_dir: Path, kind: str, entries: Iterable[JobEntry]) -> Jobs:
    with _lock(run_dir):
        jobs = read_jobs(run_dir)
        updated = Jobs(kind if jobs.kind == "unknown" else jobs.kind,
                       (*jobs.chain, *entries))
        _write(run_dir, updated)
        return updated


def mark_cancelled(run_dir: Path, ids: Iterable[str]) -> Jobs:
    wanted, now = set(ids), time.time()
    with _lock(run_dir):
        jobs = read_jobs(run_dir)
        chain = tuple(dataclasses.replace(e, cancelled_at=e.cancelled_at or now)
                      if e.id in wanted else e for e in jobs.chain)
        updated = Jobs(jobs.kind, chain)
        _write(run_dir, updated)
        return updated


def cancel_marker(run_dir: Path) -> Callable[[list[str]], None]:
    """The ``mark`` a backend's cancel calls with the ids it cancelled: marks them in
    ``run_dir``'s jobs.json (kill, a withdrawn submission, a superseded job)."""
    def mark(ids: list[str]) -> None:
        mark_cancelled(run_dir, ids)

    return mark
