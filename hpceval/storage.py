"""Writing to shared storage, and where the user's cache lives: helpers every layer may use.

Shared file systems (NFS, Lustre, GPFS) make a half-written file visible to other nodes, so
every write goes to a temporary file in the same folder, is fsync'd, then renamed over the
target: readers see the old file or the new one, never a mix. This module imports nothing
else of hpceval, so any layer can use it without an arrow pointing the wrong way.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

# Nothing in a run directory is writable by group or others, whatever execution.umask says:
# a member of the group could otherwise replace a queued job's script (it then runs as its
# owner) or plant the server image the job runs (shared-cluster-4 N4). The umask decides who
# may read; 0007 and 0002 act as 0027 and 0022.
NOT_WRITABLE_BY_OTHERS = 0o022


def run_umask_bits(value: str) -> int:
    """The umask a run is written and its jobs run with, for execution.umask ``value``."""
    return int(value, 8) | NOT_WRITABLE_BY_OTHERS


def current_umask() -> int:
    """This process's umask, read without changing it where /proc allows."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def within(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or below it (both normalised already: a bind source, a
    mount point), by whole path components: /scratch2 is not within /scratch."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def atomic_write_text(path: Path, text: str, *, mode: int = 0o644, durable: bool = True) -> None:
    """`mode` is narrowed by the umask, as for any created file (execution.umask sets it).

    durable=False skips the fsyncs, for files rewritten every few seconds (the proxy's
    progress), where one round trip to an NFS server per write costs more than a lost update.
    The temp file's name is unique per call, so threads of one process may write at once.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(tmp, mode & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def atomic_write_json(path: Path, data: Any, *, mode: int = 0o644, durable: bool = True) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n", mode=mode,
                      durable=durable)


def fsync_dir(folder: Path) -> None:
    # Makes the rename itself durable; not every file system allows it, which is fine.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_json_object(path: Path) -> dict[str, Any] | None:
    """A JSON object from ``path``, or None when it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def cache_dir() -> Path:
    """The user's hpceval cache: $HPCEVAL_CACHE_DIR, else $XDG_CACHE_HOME/hpceval, else
    ~/.cache/hpceval (the run index, job states, the task catalogue's index)."""
    if os.environ.get("HPCEVAL_CACHE_DIR"):
        return Path(os.environ["HPCEVAL_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "hpceval"
