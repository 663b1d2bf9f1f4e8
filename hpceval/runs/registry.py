"""The run registry on shared storage: one JSON line per submission, appended under a lock.

Several users and processes submit into one output directory at once; a filelock serializes the
appends (the lock file lives beside the registry, on the same shared file system). Each line is
written with a single write() and fsync'd before the lock is released, so a reader (which takes
no lock) sees whole lines only, except a torn last line of a crashed writer, which it skips.

Anyone who can write the registry can append to it, so a line is a claim, not a fact: readers
skip malformed lines (one warning per read) and `trusted_entries` keeps only the lines whose
run directory is the reader's own directory directly under this output directory. The registry
is opened without following symlinks. `check_writable` runs before submitting: a job must never run
without an entry.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import time
from pathlib import Path
from typing import Any

from hpceval.config.errors import ConfigError
from hpceval.errors import HpcevalError
from hpceval.trust import is_mine, owned_dir, owner_name

log = logging.getLogger(__name__)

REGISTRY_DIR = ".hpceval"
REGISTRY_FILE = "runs.jsonl"


class RegistryError(HpcevalError, OSError):
    """The registry cannot be written safely (a planted symlink, no permission)."""


def registry_path(output_dir: Path) -> Path:
    return output_dir / REGISTRY_DIR / REGISTRY_FILE


def _shared(output_dir: Path) -> bool:
    """A setgid output directory is one a group shares: its registry is group-writable."""
    try:
        return bool(output_dir.stat().st_mode & stat.S_ISGID)
    except OSError:
        return False


def _symlink(path: Path) -> bool:
    try:
        return stat.S_ISLNK(path.lstat().st_mode)
    except OSError:
        return False


def check_writable(output_dir: Path) -> None:
    """Make sure this user can append to the registry (writes nothing).

    Raises ConfigError (exit 2) naming the path and the fix; called before anything is
    written or submitted, so a refused submit leaves no job and no directory behind.
    """
    folder = output_dir / REGISTRY_DIR
    path = registry_path(output_dir)
    where = "execution.output_dir"
    for candidate in (folder, path, Path(str(path) + ".lock")):
        if _symlink(candidate):
            raise ConfigError.at(where, f"{candidate} is a symlink; hpceval does not write "
                                 "through symlinks in a registry", f"remove {candidate}")
    existing = folder
    while not os.path.lexists(existing) and existing.parent != existing:
        existing = existing.parent  # what would be created lies under the nearest existing dir
    # os.path.lexists: False, not an exception, for a path inside a folder we cannot search
    denied = [p for p in (existing, path, Path(str(path) + ".lock"))
              if os.path.lexists(p) and not os.access(p, os.W_OK)]
    if denied:
        owner = _owner(denied[0])
        raise ConfigError.at(where, f"{denied[0]} is not writable by you (owned by {owner}): "
                             "a job submitted now would have no registry entry",
                             "ask its owner to make it group-writable (chmod -R g+w and "
                             "chmod g+s on the output dir), or choose another output_dir")


def _owner(path: Path) -> str:
    try:
        uid = path.stat().st_uid
    except OSError:
        return "unknown"
    return owner_name(uid)


def register_run(output_dir: Path, entry: dict[str, Any]) -> None:
    from filelock import FileLock

    path = registry_path(output_dir)
    shared = _shared(output_dir)
    if not path.parent.exists():
        path.parent.mkdir(parents=True, mode=0o2770 if shared else 0o777, exist_ok=True)
        if shared:  # the umask must not take the group's write bit
            os.chmod(path.parent, 0o2770)
    line = json.dumps({**entry, "registered_at": time.time()}, sort_keys=True) + "\n"
    lock = Path(str(path) + ".lock")
    for candidate in (path.parent, path, lock):
        if _symlink(candidate):
            raise RegistryError(f"{candidate} is a symlink; not following it")
    # Modes: the umask (execution.umask) decides, except in a setgid (group-shared) output
    # directory, where the group must be able to append whatever the umask says.
    modes: dict[str, Any] = {"mode": 0o660} if shared else {}
    with FileLock(str(lock), timeout=60, **modes):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        except OSError as exc:
            if _symlink(path):  # planted between the check and the open
                raise RegistryError(f"{path} is a symlink; not following it") from exc
            raise
        try:
            if shared and is_mine(os.fstat(fd)):  # only its owner may chmod
                os.fchmod(fd, 0o660)
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)


def registry_stamp(output_dir: Path) -> list[int] | None:
    """(size, mtime_ns) of the registry: the local index re-reads it only when this changes."""
    try:
        st = registry_path(output_dir).stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _entry(raw: bytes) -> dict[str, Any] | None:
    try:
        entry = json.loads(raw.decode("utf-8"))
    except ValueError:  # a torn line from a crashed writer, or garbage: UnicodeDecodeError too
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("invocation_id"), str) \
            or not isinstance(entry.get("run_dir"), str):
        return None
    return entry


def read_registry(output_dir: Path) -> list[dict[str, Any]]:
    """Every well-formed line; malformed ones are counted in one warning, never fatal."""
    path = registry_path(output_dir)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.warning("hpceval: cannot read run registry %s: %s", path, exc.strerror or exc)
        return []
    runs, bad = [], 0
    for raw in data.splitlines():
        if not raw.strip():
            continue
        entry = _entry(raw)
        if entry is None:
            bad += 1
        else:
            runs.append(entry)
    if bad:
        log.warning("hpceval: skipped %d malformed line(s) in run registry %s", bad, path)
    return runs


def trusted_entries(output_dir: Path) -> list[dict[str, Any]]:
    """The registry lines this user may act on: run directories directly under `output_dir`,
    real directories (not symlinks) owned by this uid. Other users' runs in a shared output
    directory are left out silently; a line pointing outside it is a forgery and is named."""
    base = os.path.realpath(output_dir)
    uid = os.getuid()
    trusted = []
    outside = 0
    for entry in read_registry(output_dir):
        run_dir = entry["run_dir"]
        if not os.path.isabs(run_dir) or ".." in Path(run_dir).parts or \
                os.path.realpath(os.path.dirname(os.path.normpath(run_dir))) != base:
            outside += 1
            continue
        if owned_dir(Path(run_dir), uid):
            trusted.append(entry)
    if outside:
        log.warning("hpceval: ignored %d entry(ies) of run registry %s pointing outside %s",
                    outside, registry_path(output_dir), output_dir)
    return trusted
