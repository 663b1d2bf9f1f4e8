"""state.json: what a watch has seen, claimed and submitted; the one record of "exactly once".

`WatchState` is the file, typed: `load_state` is its one reader, `save_state` its one writer.
Every writer (a tick, `watch stop`) holds the watch's filelock from reading the state to
writing it back, and writes atomically (hpceval.storage), so a claim is either on disk or not,
and two ticks that run at once (a duplicate, a tick and a stop) take turns. Readers (status)
take no lock. A state file that does not parse is a `WatchStateError` that names the file and
the copy of the last good state (state.json.bak), as run.json's RunFileError does: it is never
reset, so no claim is ever forgotten and no checkpoint evaluated twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from hpceval.contract import WATCH_LOCK_FILE, WATCH_STATE_FILE
from hpceval.records import read_json_record
from hpceval.storage import atomic_write_json
from hpceval.watch.spec import WatchError

STATE_SCHEMA = 1
BACKUP_SUFFIX = ".bak"
LOCK_TIMEOUT_S = 300.0  # a tick holds the lock while it submits; a few submissions at most

# the watch
WATCHING, STOPPED, ENDED = "watching", "stopped", "ended"
# one checkpoint
PENDING = "pending"  # seen, not complete yet
CLAIMED = "claimed"  # a tick is submitting it (found by a later tick: that tick died)
SUBMITTED = "submitted"  # its run exists (run_id, run_dir, job_ids)
FAILED = "failed"  # its submission failed (retried while attempts are left and retryable)
INCOMPLETE = "incomplete"  # the training job ended without writing its marker
GONE = "gone"  # removed from the folder before it was complete
COMPLETE = "complete"  # judged complete; claimed in the same tick


class WatchStateError(WatchError):
    """state.json cannot be read as a watch state: nothing is written until it is repaired."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        super().__init__(f"{path}: {what}; nothing was changed",
                         f"repair it, or check {path}{BACKUP_SUFFIX} (the last state hpceval "
                         f"wrote) and move it over {path}; then `hpceval watch resume`")


@dataclass
class CheckpointEntry:
    """One checkpoint folder the watch has seen (state.json "checkpoints"[name])."""

    path: str
    step: int
    status: str = PENDING
    first_seen: float = 0.0
    attempts: int = 0  # submissions tried
    error: str = ""  # why it failed, is incomplete or gone ("" once submitted)
    retryable: bool = False  # a failed submission that queued nothing: tried again
    # grace mode: the folder's files as last seen, and since when they have not changed
    fingerprint: str | None = None
    stable_since: float | None = None
    files: int | None = None
    bytes: int | None = None
    complete_at: float | None = None
    claimed_at: float | None = None
    claimed_by: str | None = None  # the tick's job id (or "pid N")
    submitted_at: float | None = None
    failed_at: float | None = None
    # its run: submitted (run_dir also for a failed submission that made its directory)
    run_id: str | None = None
    run_dir: str | None = None
    job_ids: list[str] | None = None
    model: str | None = None

    def to_json(self) -> dict[str, Any]:
        # what is not known is left out, as the file always had it
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class TickEntry:
    """A tick job the watch queued (state.json "ticks", the newest last)."""

    id: str
    kind: str = "slurm"
    submitted_at: float = 0.0
    begin_at: float = 0.0


@dataclass
class ForeignEntry:
    """A folder in the checkpoints directory that a user the watch does not trust owns."""

    name: str
    owner: int
    owner_name: str


@dataclass
class LastTick:
    at: float
    job: str
    new: list[str]
    pending: list[str]
    training: str | None


@dataclass
class WatchState:
    """state.json, typed (mutable: a tick changes it under the lock, then saves it)."""

    status: str = WATCHING
    reason: str = ""
    updated_at: float = 0.0
    checkpoints: dict[str, CheckpointEntry] = field(default_factory=dict)
    ticks: list[TickEntry] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # folder names without a step
    foreign: list[ForeignEntry] = field(default_factory=list)
    last_tick: LastTick | None = None
    schema: int = STATE_SCHEMA

    def counts(self) -> dict[str, int]:
        """Checkpoints by status (the status line and the tick's log)."""
        out: dict[str, int] = {}
        for entry in self.checkpoints.values():
            out[entry.status] = out.get(entry.status, 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {"schema": self.schema, "status": self.status, "reason": self.reason,
                "updated_at": self.updated_at,
                "checkpoints": {n: e.to_json() for n, e in self.checkpoints.items()},
                "ticks": [asdict(t) for t in self.ticks], "ignored": list(self.ignored),
                "foreign": [asdict(f) for f in self.foreign],
                "last_tick": None if self.last_tick is None else asdict(self.last_tick)}

    @classmethod
    def from_json(cls, data: Any, path: Path) -> WatchState:
        """The state of a parsed state.json; WatchStateError (naming ``path``) otherwise."""
        problem = _shape_problem(data)
        if problem:
            raise WatchStateError(path, f"not a watch state ({problem})")
        try:
            return cls(
                str(data["status"]), str(data.get("reason") or ""),
                float(data.get("updated_at") or 0.0),
                {str(n): _entry(e) for n, e in data["checkpoints"].items()},
                [TickEntry(str(t["id"]), str(t.get("kind") or "slurm"),
                           float(t.get("submitted_at") or 0.0), float(t.get("begin_at") or 0.0))
                 for t in data["ticks"]],
                [str(n) for n in data.get("ignored") or ()],
                [ForeignEntry(str(f["name"]), int(f["owner"]), str(f.get("owner_name") or ""))
                 for f in data.get("foreign") or ()],
                _last_tick(data.get("last_tick")), int(data["schema"]))
        except KeyError as exc:
            raise WatchStateError(path, f"not a watch state (no {exc.args[0]!r} where a tick "
                                        "writes one)") from exc
        except (TypeError, ValueError, AttributeError) as exc:
            raise WatchStateError(path, f"not a watch state ({exc})") from exc


_ENTRY_FIELDS = {f.name for f in fields(CheckpointEntry)}


def _entry(data: dict[str, Any]) -> CheckpointEntry:
    known = {k: v for k, v in data.items() if k in _ENTRY_FIELDS}
    # what a tick compares and sorts by, as the types it compares, whatever wrote them
    known.update(path=str(data["path"]), step=int(data["step"]),
                 attempts=int(data.get("attempts") or 0))
    entry = CheckpointEntry(**known)
    if entry.job_ids is not None:
        entry.job_ids = [str(j) for j in entry.job_ids]
    return entry


def _last_tick(data: Any) -> LastTick | None:
    if data is None:
        return None
    return LastTick(float(data["at"]), str(data.get("job") or ""),
                    [str(n) for n in data.get("new") or ()],
                    [str(n) for n in data.get("pending") or ()],
                    None if data.get("training") is None else str(data["training"]))


def _shape_problem(data: Any) -> str:
    if not isinstance(data, dict):
        return "not a JSON object"
    if data.get("schema") != STATE_SCHEMA:
        return f"schema {data.get('schema')!r}, expected {STATE_SCHEMA}"
    if data.get("status") not in (WATCHING, STOPPED, ENDED):
        return f"status {data.get('status')!r}"
    checkpoints = data.get("checkpoints")
    if not isinstance(checkpoints, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("status"), str)
            for v in checkpoints.values()):
        return "checkpoints is not an object of entries with a status"
    if not isinstance(data.get("ticks"), list):
        return "ticks is not a list"
    return ""


def state_path(watch_dir: Path) -> Path:
    return watch_dir / WATCH_STATE_FILE


def new_state() -> WatchState:
    return WatchState(updated_at=time.time())


def load_state(watch_dir: Path) -> WatchState:
    """THE reader of state.json: its state, or WatchStateError naming the file and the fix."""
    path = state_path(watch_dir)
    return WatchState.from_json(read_json_record(path, WatchStateError), path)


def save_state(watch_dir: Path, state: WatchState) -> None:
    """THE writer of state.json: atomic; the same state also goes to state.json.bak, the copy
    a repair starts from."""
    state.updated_at = time.time()
    data = state.to_json()
    path = state_path(watch_dir)
    atomic_write_json(Path(f"{path}{BACKUP_SUFFIX}"), data)
    atomic_write_json(path, data)


@contextmanager
def locked(watch_dir: Path, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """The watch's filelock (beside state.json, on the same shared file system)."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(watch_dir / WATCH_LOCK_FILE), timeout=timeout_s)
    try:
        lock.acquire()
    except Timeout as exc:
        raise WatchError(f"{watch_dir / WATCH_LOCK_FILE} is held by another tick or command "
                         f"for over {timeout_s:g} s") from exc
    try:
        yield
    finally:
        lock.release()
