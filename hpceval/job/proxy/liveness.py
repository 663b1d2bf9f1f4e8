"""Is a job-launched model server still the process the job started?

A port says nothing about who listens on it: when a server exits mid-task, another uid on the
node can bind its port within a second and answer `/health` with 200 (review F1). The proxy
therefore trusts an instance the job launched only while the processes the job started for it
run. The job script passes their pids (`--upstream-pids`); they are its children on this node
(the local process, or the `srun` that holds the remote step), so `kill(pid, 0)` is cheap and
exact. A zombie counts as gone: it has exited, the shell just has not reaped it yet.
"""

from __future__ import annotations

import os
from pathlib import Path


def parse_pids(text: str, flag: str = "--upstream-pids") -> tuple[int, ...]:
    """'12,34' -> (12, 34); anything else is a usage error naming the flag."""
    try:
        pids = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError as exc:
        raise ValueError(f"{flag} {text!r}: give comma-separated process ids") from exc
    if not pids or min(pids) <= 1:
        raise ValueError(f"{flag} {text!r}: give comma-separated process ids (> 1)")
    return pids


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, but another user's: never a pid the job started
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (or it just went): kill() said it exists
    # "pid (comm) S ...": comm may hold spaces and parentheses; the state follows the last ')'
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def all_alive(pids: tuple[int, ...]) -> bool:
    return all(alive(p) for p in pids)
