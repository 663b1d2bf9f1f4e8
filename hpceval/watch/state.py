"""state.json: what a watch has seen, claimed and submitted; the one record of "exactly once".

Every writer (a tick, `watch stop`) holds the watch's filelock from reading the state to
writing it back, and writes atomically (hpceval.storage), so a claim is either on disk or not,
and two ticks that run at once (a duplicate, a tick and a stop) take turns. Readers (status)
take no lock. A state file that does not parse is an error that names the file and the copy
of the last good state (state.json.bak): it is never reset, so no claim is ever forgotten and
no checkpoint evaluated twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hpceval.contract import WATCH_LOCK_FILE, WATCH_STATE_FILE
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


def state_path(watch_dir: Path) -> Path:
    return watch_dir / WATCH_STATE_FILE


def new_state() -> dict[str, Any]:
    return {"schema": STATE_SCHEMA, "status": WATCHING, "reason": "", "updated_at": time.time(),
            "checkpoints": {}, "ticks": [], "ignored": [], "last_tick": None}


def load_state(watch_dir: Path) -> dict[str, Any]:
    path = state_path(watch_dir)
    backup = f"{path}{BACKUP_SUFFIX}"
    fix = (f"repair it, or check {backup} (the last state hpceval wrote) and move it over "
           f"{path}; then `hpceval watch resume`")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise WatchStateError(f"{path} is missing ({fix})") from exc
    except OSError as exc:
        raise WatchStateError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise WatchStateError(f"{path} is not valid JSON ({exc}); nothing was changed: "
                              f"{fix}") from exc
    problem = _shape_problem(data)
    if problem:
        raise WatchStateError(f"{path} is not a watch state ({problem}); nothing was "
                              f"changed: {fix}")
    assert isinstance(data, dict)
    return data


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


def save_state(watch_dir: Path, state: dict[str, Any]) -> None:
    """Atomic; the same state also goes to state.json.bak, the copy a repair starts from."""
    state["updated_at"] = time.time()
    path = state_path(watch_dir)
    atomic_write_json(Path(f"{path}{BACKUP_SUFFIX}"), state)
    atomic_write_json(path, state)


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


def counts(state: dict[str, Any]) -> dict[str, int]:
    """Checkpoints by status (the status line and the tick's log)."""
    out: dict[str, int] = {}
    for entry in state["checkpoints"].values():
        out[entry["status"]] = out.get(entry["status"], 0) + 1
    return out
