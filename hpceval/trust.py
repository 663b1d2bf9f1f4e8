"""THE trust rule for files and folders another user could have planted or can change.

On a shared cluster a file hpceval reads and then acts on (a profile that runs shell as the
user, a judge's endpoint record and token, a run directory whose jobs.json names jobs to
cancel, a checkpoint a watch evaluates, a task folder lm-eval imports) is trusted the way ssh
trusts its config: it must be owned by the user (some callers: or root, or a uid named on the
command line), not writable by group or other, and, where asked, no folder above it may be
writable by group or other unless it is a root-owned sticky folder such as /tmp (there nobody
can rename what is not theirs). Each caller picks its parameters; the rule and its wording
live here only, so a message always says whose the file is.

This module imports nothing else of hpceval, so every layer (config, watch, job, runs,
staging) can use it without an arrow pointing the wrong way.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Collection
from pathlib import Path

GROUP_OR_OTHER_WRITE = stat.S_IWGRP | stat.S_IWOTH


def owner_name(uid: int) -> str:
    """'name (uid N)' for messages that say whose a file is."""
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def my_uids() -> frozenset[int]:
    """The uids that count as "you": this process's real and effective uid."""
    return frozenset((os.getuid(), os.geteuid()))


def is_mine(st: os.stat_result) -> bool:
    """Whether this process's user owns what `st` describes (only the owner may chmod it)."""
    return st.st_uid in my_uids()


def writers(mode: int) -> str | None:
    """Who besides the owner may write a file of this mode ('its group', 'others', both)."""
    who = [name for bit, name in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "others"))
           if mode & bit]
    return " and ".join(who) or None


def stat_problem(st: os.stat_result, owners: Collection[int] | None = None, *,
                 root: bool = False, private: bool = False, plain: bool = False,
                 group_write: bool = False) -> str | None:
    """Why a file with this stat may not be trusted, as a phrase after its name ("is owned
    by ..."), or None. `owners`: the uids that count (default: you); `root`: root's files
    count too; `private`: nobody else may even read it (a token); `plain`: a regular file;
    `group_write`: its group may write it (a run's own files in a setgid project folder,
    whose content is checked otherwise: by sha256)."""
    if plain and not stat.S_ISREG(st.st_mode):
        return "is not a plain file"
    allowed = my_uids() if owners is None else frozenset(owners)
    if st.st_uid not in allowed and not (root and st.st_uid == 0):
        return (f"is owned by {owner_name(st.st_uid)}, not by you"
                f"{' or root' if root else ''}")
    mode = stat.S_IMODE(st.st_mode)
    if mode & (stat.S_IWOTH if group_write else GROUP_OR_OTHER_WRITE):
        return f"is writable by other users (mode {mode:o}), owned by {owner_name(st.st_uid)}"
    if private and mode & (stat.S_IRWXG | stat.S_IRWXO):
        return f"is readable by other users (mode {mode:o}; a secret is 0600)"
    return None


def folder_problem(folder: Path, below: Path) -> str | None:
    """Why `folder`, one above `below`, makes what is below it untrustworthy, or None."""
    try:
        st = folder.stat()
    except OSError:
        return None
    mode = stat.S_IMODE(st.st_mode)
    if not st.st_mode & GROUP_OR_OTHER_WRITE:
        return None
    if st.st_mode & stat.S_ISVTX and st.st_uid == 0 and folder != below.parent:
        return None  # /tmp and the like, above the file's own folder
    return (f"its folder {folder} is writable by other users (mode {mode:o}), owned by "
            f"{owner_name(st.st_uid)}: anyone there could plant or swap what it holds")


def _folders_problem(path: Path) -> str | None:
    """Why a folder above `path` (as named, links not resolved) is open to other users."""
    for folder in path.parents:
        problem = folder_problem(folder, path)
        if problem is not None:
            return problem
    return None


def untrusted(path: Path, owners: Collection[int] | None = None, *, root: bool = False,
              folders: bool = True, private: bool = False) -> str | None:
    """Why `path` (after resolving links) may not be trusted, as a phrase after its name
    ("it is owned by ...", "its folder F is writable ..."), or None. `folders`: every folder
    above it is checked too (see the module doc), above the name as given as well as above
    what it resolves to: a link planted in a folder others can write is refused wherever it
    points. For a file that is then read, read_trusted: this answer can be stale by then."""
    named = Path(os.path.abspath(path))
    real = path.resolve()
    try:
        st = real.stat()
    except OSError as exc:
        return f"it cannot be read: {exc.strerror}"
    problem = stat_problem(st, owners, root=root, private=private)
    if problem is not None:
        return f"it {problem}"
    if folders:
        return _folders_problem(named) or _folders_problem(real)
    return None


class Untrusted(Exception):
    """read_trusted's refusal. Its text is a phrase after the file's name ("it is owned by
    ..."); `about(name)` says the same with the name as its subject ("NAME is owned by ...");
    `missing`: the file is not there at all (a caller may wait for it)."""

    def __init__(self, problem: str, *, own: bool = True, missing: bool = False) -> None:
        super().__init__(f"it {problem}" if own else problem)
        self.problem, self.own, self.missing = problem, own, missing

    def about(self, name: object) -> str:
        return f"{name} {self.problem}" if self.own else f"{name}: {self.problem}"


def read_trusted(path: Path, owners: Collection[int] | None = None, *, root: bool = False,
                 limit: int, private: bool = False, links: bool = True,
                 folders: bool = True) -> bytes:
    """The bytes of `path` (at most `limit` + 1), read only if trusted, and checked on the
    descriptor they are read from, so nobody can swap the file between the check and the read
    (shared-cluster-4 N2: a link retargeted between them ran another user's profile). The
    folders above the name as given and above what it resolves to are checked as `untrusted`
    does; the resolved file is opened without following a link there (a link put in its place
    meanwhile is refused), and its owner, write bits and kind come from fstat. The folders are
    checked after the file (a message names the file's owner first), before a byte is read.
    `private`: nobody else may even read it (a token); `links` False: the name itself must not
    be a link (it is not resolved: a judge's record is its job's own file, never a link);
    `folders` False: the folders above are not checked (the file alone is what is trusted)."""
    named = Path(os.path.abspath(path))
    real = path.resolve() if links else named
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not links:
            raise Untrusted("is a symbolic link") from exc
        raise Untrusted(f"cannot be read: {exc.strerror}",
                        missing=exc.errno == errno.ENOENT) from exc
    with os.fdopen(fd, "rb") as opened:
        problem = stat_problem(os.fstat(opened.fileno()), owners, root=root, private=private,
                               plain=True)
        if problem is not None:
            raise Untrusted(problem)
        problem = (_folders_problem(named) or _folders_problem(real)) if folders else None
        if problem is not None:
            raise Untrusted(problem, own=False)
        return opened.read(limit + 1)


def foreign_owner(path: Path, owners: Collection[int]) -> int | None:
    """The uid that disqualifies `path` (the link's owner first, then its target's), or None
    when both are in `owners`. A path that cannot be read is not foreign: the caller's own
    check (is it a directory, is the marker there) decides about it."""
    try:
        link = os.lstat(path)
        target = os.stat(path) if stat.S_ISLNK(link.st_mode) else link
    except OSError:
        return None
    for uid in (link.st_uid, target.st_uid):
        if uid not in owners:
            return uid
    return None


def owned_dir(path: Path, uid: int | None = None) -> bool:
    """A real directory (lstat: not a symlink) owned by `uid` (default: this process's)."""
    return dir_problem(path, uid) is None


def dir_problem(path: Path, uid: int | None = None) -> str | None:
    """Why `path` is not a real directory (lstat: not a symlink) owned by `uid` (default:
    this process's), as a phrase after its name ("is owned by ..."), or None."""
    try:
        st = path.lstat()
    except OSError as exc:
        return f"cannot be read: {exc.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != (os.getuid() if uid is None else uid):
        return f"is owned by {owner_name(st.st_uid)}, not by you"
    return None


# Where a site's admin names the accounts that may own profiles for every user: Spack,
# EasyBuild and module trees are owned by a service account, not by root.
SITE_TRUST_FILE = Path("/etc/hpceval/trusted-owners")


def site_trusted_owners(path: Path = SITE_TRUST_FILE) -> tuple[frozenset[int], str | None]:
    """The uids the site trusts to own shared profiles, from ``path`` (one user name or uid
    per line, ``#`` comments), and why the file was ignored (None when it was read or is
    absent). Only a file root owns, that nobody else can write, in folders nobody else can
    write, counts: anyone else could name themselves in it."""
    if not path.exists():
        return frozenset(), None
    problem = untrusted(path, owners=(0,), folders=True)
    if problem is not None:
        return frozenset(), f"{path} is ignored: {problem}"
    uids: set[int] = set()
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return frozenset(), f"{path} is ignored: {exc.strerror}"
    for line in text.splitlines():
        word = line.split("#", 1)[0].strip()
        if word.isdigit():
            uids.add(int(word))
        elif word:
            try:
                import pwd

                uids.add(pwd.getpwnam(word).pw_uid)
            except KeyError:
                continue  # an account this node does not know trusts nothing here
    return frozenset(uids), None


class Unread(Exception):
    """Why a file was not read, as a phrase after its name ("is a symbolic link"); `missing`:
    there is no such file; `too_large`: it is over the caller's limit."""

    def __init__(self, phrase: str, missing: bool = False, too_large: bool = False) -> None:
        super().__init__(phrase)
        self.missing = missing
        self.too_large = too_large


def read_own_file(path: str, limit: int, *, offset: int = 0,
                  truncate: bool = False) -> tuple[bytes, os.stat_result]:
    """A small file a job of the user's wrote, read through one descriptor: not a link, not a
    FIFO that would block, a plain file of the user's that only they (and its group: a run in
    a setgid project folder) may write, at most `limit` bytes (from `offset`; `truncate`: the
    first `limit` bytes of a larger file, else a larger file is refused). Raises Unread."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise Unread("does not exist", missing=True) from None
        if exc.errno == errno.ELOOP:
            raise Unread("is a symbolic link") from None
        raise Unread(f"cannot be read: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        problem = stat_problem(st, plain=True, group_write=True)
        if problem is not None:
            raise Unread(problem)
        if offset:
            os.lseek(fd, offset, os.SEEK_SET)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise Unread(f"cannot be read: {exc.strerror}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if size > limit:
        if truncate:
            return data[:limit], st
        raise Unread(f"is larger than {limit >> 10} KiB: not read", too_large=True)
    return data, st
