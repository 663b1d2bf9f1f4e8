"""Checkpoints in the training run's folder, and THE rule for when one is complete.

A checkpoint is complete when its marker file exists (``--marker``), or, without a marker,
when its files (names, sizes, mtimes) were the same at two ticks at least ``grace`` seconds
apart; an empty folder is never complete. A half-written checkpoint therefore changes its
fingerprint between ticks and waits; a writer that pauses longer than the grace period is the
one case only a marker can catch (docs/watch.md). Only checkpoints (and markers) owned by a
trusted uid count at all (hpceval.watch.trust); the others are listed as foreign.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from hpceval.trust import foreign_owner
from hpceval.watch.spec import WatchSpec
from hpceval.watch.state import CheckpointEntry
from hpceval.watch.trust import trusted_uids

MAX_FILES = 100_000  # a checkpoint with more is read no further (hostile or broken folder)


@dataclass(frozen=True)
class Checkpoint:
    name: str  # directory name under the checkpoints folder
    path: Path
    step: int


@dataclass(frozen=True)
class Listing:
    checkpoints: list[Checkpoint]  # in step order
    ignored: list[str]  # names that matched the pattern but carry no step
    foreign: list[tuple[str, int]] = field(default_factory=list)  # (name, owner uid): not ours


@dataclass(frozen=True)
class Fingerprint:
    digest: str  # sha256 over (relative path, size, mtime_ns) of every file, sorted
    files: int
    size: int


def list_checkpoints(spec: WatchSpec) -> Listing:
    """The pattern's directories directly under spec.checkpoints (a missing folder: none)."""
    found: list[Checkpoint] = []
    ignored: list[str] = []
    foreign: list[tuple[str, int]] = []
    trusted = trusted_uids(spec.trust_uids)
    try:
        entries = list(os.scandir(spec.checkpoints))
    except FileNotFoundError:
        return Listing([], [])
    for entry in entries:
        if not fnmatch.fnmatchcase(entry.name, spec.pattern) or not _is_dir(entry):
            continue
        owner = foreign_owner(Path(entry.path), trusted)
        if owner is not None:
            foreign.append((entry.name, owner))
            continue
        step = spec.step_of(entry.name)
        if step is None:
            ignored.append(entry.name)
        else:
            found.append(Checkpoint(entry.name, Path(entry.path), step))
    found.sort(key=lambda c: (c.step, c.name))
    return Listing(found, sorted(ignored), sorted(foreign))


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()  # a symlink to a checkpoint folder counts: it is how some link
    except OSError:
        return False


def fingerprint(folder: Path) -> Fingerprint:
    """What changes while a checkpoint is written: every file's path, size and mtime."""
    rows: list[str] = []
    total = 0
    for root, dirs, files in os.walk(folder):  # symlinked folders are not followed
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue  # removed while we looked: the next tick sees the change
            rows.append(f"{os.path.relpath(path, folder)}\0{st.st_size}\0{st.st_mtime_ns}")
            total += st.st_size
            if len(rows) >= MAX_FILES:
                break
        if len(rows) >= MAX_FILES:
            break
    digest = hashlib.sha256("\n".join(rows).encode("utf-8", "surrogateescape")).hexdigest()
    return Fingerprint(digest, len(rows), total)


def has_marker(spec: WatchSpec, checkpoint: Path) -> bool:
    assert spec.marker is not None
    marker = checkpoint / spec.marker
    # a marker someone else put there (a group-writable checkpoint) does not count
    return marker.is_file() and foreign_owner(marker, trusted_uids(spec.trust_uids)) is None


def judge(spec: WatchSpec, checkpoint: Path, seen: CheckpointEntry, now: float) -> bool:
    """Whether `checkpoint` is complete now; updates `seen` (its state.json entry) with the
    fingerprint and since when it has been unchanged (grace mode)."""
    if spec.marker is not None:
        return has_marker(spec, checkpoint)
    fp = fingerprint(checkpoint)
    if seen.fingerprint != fp.digest:
        seen.fingerprint, seen.stable_since = fp.digest, now
        seen.files, seen.bytes = fp.files, fp.size
        return False  # new or changed since the last tick: wait a whole grace period
    since = seen.stable_since
    grace = spec.grace_s or 0
    return fp.files > 0 and since is not None and now - since >= grace
