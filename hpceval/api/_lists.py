"""The listing verbs (`hpceval ls`): runs, watches, site profiles, catalogue tasks. None of
them asks the scheduler."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpceval.config.profiles import ProfileInfo
    from hpceval.runs.index import RunRef
    from hpceval.tasks import TaskDef


def runs(*, limit: int = 0, output_dirs: Iterable[str | Path] = ()) -> list[RunRef]:
    """Runs in the registries of the known output directories, newest first (``limit``: the
    newest N only; 0: all). Known: every output directory you submitted to,
    $HPCEVAL_OUTPUT_DIRS and ``output_dirs``."""
    from hpceval.runs.index import list_runs

    found = list_runs([Path(d) for d in output_dirs])
    return found[:limit] if limit else found


def watches(*, output_dirs: Iterable[str | Path] = ()) -> list[dict[str, Any]]:
    """Checkpoint watches, newest first, with their checkpoint counts as their state files say
    (the rows of `hpceval ls watches --json`; a damaged one has status "damaged" and a
    reason)."""
    from collections import Counter

    from hpceval.watch.control import list_watches
    from hpceval.watch.spec import WatchError, read_spec
    from hpceval.watch.state import FAILED, SUBMITTED, load_state

    rows: list[dict[str, Any]] = []
    for watch_dir in list_watches([Path(d) for d in output_dirs]):
        try:
            spec, state = read_spec(watch_dir), load_state(watch_dir)
        except WatchError as exc:
            rows.append({"watch_id": watch_dir.name, "watch_dir": str(watch_dir),
                         "status": "damaged", "reason": str(exc)})
            continue
        counts = Counter(state.counts())
        rows.append({"watch_id": watch_dir.name, "watch_dir": str(watch_dir),
                     "status": state.status, "checkpoints": spec.checkpoints,
                     "seen": sum(counts.values()), "submitted": counts[SUBMITTED],
                     "failed": counts[FAILED]})
    return rows


def profiles() -> list[ProfileInfo]:
    """Site profiles on the search path ($HPCEVAL_PROFILE_PATH, ~/.config/hpceval/profiles,
    shipped; first wins), each with where it comes from and what it shadows."""
    from hpceval.config.profiles import list_profiles

    return list_profiles()


def tasks(*, harness: str | None = None, endpoint_type: str | None = None) -> list[TaskDef]:
    """Tasks of the catalogue (shipped, ~/.config/hpceval/tasks, $HPCEVAL_TASKS_PATH)."""
    from hpceval.tasks import load_catalogue

    return load_catalogue().list(harness=harness, endpoint_type=endpoint_type)
