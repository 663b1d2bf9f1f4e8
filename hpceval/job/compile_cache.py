"""Compile caches that outlive a job: ``python -m hpceval.job compile-cache seed|publish STORE
CACHE``, run by each host server's step on its node (templates/deployment/_launch.j2).

A host server writes its caches (vLLM's torch.compile artifacts, Inductor's FX graphs and
kernels, Triton, FlashInfer, CUDA's ComputeCache) to a fresh 0700 folder of its own on its
node, CACHE: a fixed name in a node's shared /tmp is every user's to plant compiled code in
(shared-cluster-4 N5). Alone, that makes every job compile from cold: a resume, a successor,
the next element of a sweep. STORE keeps what a model's servers compiled, per model and engine
(the render names the folder: ``execution.compile_cache_dir``, else the run's own), on shared
storage:

- ``seed``, before the server starts: STORE's published tree is copied into CACHE (a copy, not
  links: the server writes there, and CACHE is on the node's own disk where $TMPDIR is).
- ``publish``, after the server ended: the files CACHE has and STORE does not are copied into a
  fresh ``.incoming-*`` folder of STORE; then, under an exclusive lock, the published files are
  hard-linked in beside them and that folder is renamed to ``current`` in one step. Concurrent
  jobs of the same model each add what they compiled (a union: none loses the other's), and a
  reader under the shared lock never sees half a tree. A publish cut short (a job killed in its
  teardown) leaves an ``.incoming-*`` folder, removed by a later publish after a day.

Trust: STORE is opened once, as a directory, not through a link, and must be yours and writable
by nobody else (trust.stat_problem on its descriptor); everything after goes through that
descriptor (``/proc/self/fd``), so a folder swapped in later is not read. What a server loads
from its cache is code: a STORE that others could write is refused, and the server compiles
from cold. A file system without working locks (``flock``), a lock held longer than the wait,
or a tree over PUBLISH_LIMIT: the cache is skipped, said in the server's log; the server still
starts. The step never fails because of this module (exit status 0, a line of why).
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from hpceval.trust import stat_problem

CURRENT = "current"
LOCK = ".lock"
INCOMING, OLD = ".incoming-", ".old-"
SEED_WAIT_S = 60.0  # a publish holds the lock for its renames and links only: seconds
PUBLISH_WAIT_S = 120.0
PUBLISH_LIMIT = 16 << 30  # new bytes per publish: a cache this large is not compiled kernels
STALE_S = 86_400.0  # an .incoming-/.old- folder this old is a publish that was cut short


class Skipped(Exception):
    """Why the cache is not used this time (a phrase for the server's log)."""


def _say(text: str) -> None:
    print(f"hpceval: compile cache: {text}", file=sys.stderr, flush=True)


def open_store(store: str, *, create: bool) -> int:
    """A descriptor of STORE, checked: a directory of yours that nobody else may write."""
    if create:
        try:
            os.makedirs(store, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise Skipped(f"cannot make {store}: {exc.strerror}") from None
    try:
        fd = os.open(store, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Skipped(f"nothing published in {store} yet") from None
    except OSError as exc:
        raise Skipped(f"{store} cannot be opened as a folder: {exc.strerror}") from None
    problem = stat_problem(os.fstat(fd))
    if problem is not None:
        os.close(fd)
        raise Skipped(f"{store} {problem}: not used (a server loads compiled code from it)")
    return fd


@contextmanager
def locked(fd: int, *, exclusive: bool, wait_s: float) -> Iterator[None]:
    """STORE's lock file, shared (readers) or exclusive (a publish's renames)."""
    try:
        lock = os.open(LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                       dir_fd=fd)
    except OSError as exc:
        raise Skipped(f"cannot open its lock file: {exc.strerror}") from None
    try:
        problem = stat_problem(os.fstat(lock), plain=True)
        if problem is not None:
            raise Skipped(f"its lock file {problem}")
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(lock, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise Skipped(f"its lock was held for over {wait_s:.0f} s") from None
                time.sleep(0.5)
            except OSError as exc:  # ENOLCK, EOPNOTSUPP: e.g. Lustre mounted without flock
                raise Skipped(f"its file system does not lock files ({exc.strerror}): a "
                              "shared cache needs flock (mount option 'flock' on Lustre)"
                              ) from None
        yield
    finally:
        os.close(lock)  # releases the lock too


def _files(root: str) -> Iterator[str]:
    """Paths (relative to root) of the files and links below root; folders are implied."""
    for folder, dirs, names in os.walk(root):
        rel = os.path.relpath(folder, root)
        links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]
        for name in sorted(names) + links:
            yield os.path.normpath(os.path.join(rel, name))


def _copy(src: str, dst: str) -> int:
    """One file or link from src to dst (folders made as needed); its size."""
    os.makedirs(os.path.dirname(dst), mode=0o700, exist_ok=True)
    if os.path.islink(src):
        os.symlink(os.readlink(src), dst)
        return 0
    shutil.copy2(src, dst)
    return os.stat(dst).st_size


def seed(store: str, cache: str) -> str:
    """Copy STORE's published tree into CACHE; what was done, in words."""
    started = time.monotonic()
    if not os.path.lexists(store):  # the first job of this model (the check is open_store's)
        return f"nothing published in {store} yet: compiling from cold"
    fd = open_store(store, create=False)
    try:
        with locked(fd, exclusive=False, wait_s=SEED_WAIT_S):
            current = f"/proc/self/fd/{fd}/{CURRENT}"
            if not os.path.isdir(current):
                return f"nothing published in {store} yet: compiling from cold"
            count = size = 0
            for rel in _files(current):
                target = os.path.join(cache, rel)
                if not os.path.lexists(target):
                    size += _copy(os.path.join(current, rel), target)
                    count += 1
    finally:
        os.close(fd)
    return (f"{count} files ({size / 2**20:.1f} MiB) from {store} in "
            f"{time.monotonic() - started:.1f} s")


def publish(store: str, cache: str) -> str:
    """Add what CACHE has and STORE has not to STORE (see the module doc); in words."""
    fd = open_store(store, create=True)
    try:
        return _publish(fd, store, cache)
    finally:
        os.close(fd)


def _publish(fd: int, store: str, cache: str) -> str:
    here = f"/proc/self/fd/{fd}"
    current = f"{here}/{CURRENT}"
    _remove_stale(here)
    new = [rel for rel in _files(cache) if not os.path.lexists(os.path.join(current, rel))]
    if not new:
        return f"nothing new for {store}"
    size = sum(os.lstat(os.path.join(cache, rel)).st_size for rel in new)
    if size > PUBLISH_LIMIT:
        return (f"{size / 2**30:.1f} GiB new, over the {PUBLISH_LIMIT >> 30} GiB a publish "
                f"takes: not kept in {store}")
    incoming = tempfile.mkdtemp(prefix=INCOMING, dir=here)
    old = None
    try:
        for rel in new:
            _copy(os.path.join(cache, rel), os.path.join(incoming, rel))
        with locked(fd, exclusive=True, wait_s=PUBLISH_WAIT_S):
            if os.path.isdir(current):
                for rel in _files(current):  # what others published: kept, by hard links
                    target = os.path.join(incoming, rel)
                    if not os.path.lexists(target):
                        _link(os.path.join(current, rel), target)
                old = tempfile.mkdtemp(prefix=OLD, dir=here)
                os.rename(current, os.path.join(old, CURRENT))
            try:
                os.rename(incoming, current)
            except OSError:
                if old:  # the published tree goes back where it was
                    os.rename(os.path.join(old, CURRENT), current)
                raise
            incoming = ""
    finally:
        for leftover in (incoming, old):
            if leftover:
                shutil.rmtree(leftover, ignore_errors=True)
    return f"{len(new)} new files ({size / 2**20:.1f} MiB) kept in {store}"


def _link(src: str, dst: str) -> None:
    os.makedirs(os.path.dirname(dst), mode=0o700, exist_ok=True)
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        _copy(src, dst)  # a file system without hard links


def _remove_stale(here: str) -> None:
    now = time.time()
    for name in os.listdir(here):
        path = os.path.join(here, name)
        if name.startswith((INCOMING, OLD)) and not os.path.islink(path):
            try:
                if now - os.lstat(path).st_mtime > STALE_S:
                    shutil.rmtree(path, ignore_errors=True)
            except OSError:
                continue


def main(argv: Sequence[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("seed", "publish"):
        print("usage: python -m hpceval.job compile-cache seed|publish STORE CACHE",
              file=sys.stderr)
        return 2
    action, store, cache = argv
    try:
        _say(seed(store, cache) if action == "seed" else publish(store, cache))
    except Skipped as exc:
        _say(f"not used: {exc}")
    except OSError as exc:  # a full disk, a vanished node-local folder: the server runs on
        _say(f"{action} stopped: {exc}")
    return 0
