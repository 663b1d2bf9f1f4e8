"""Whose checkpoints a watch evaluates: THE owner rule (docs/watch.md, "Shared folders").

A checkpoints folder that others can write (a 1777 scratch folder, a 2770 project folder) lets
them plant a folder, or a symlink to any weights, that matches the pattern; the watch would
spend the user's allocation on it and put its score on the user's curve. So a checkpoint
counts only when the entry in the folder (lstat: the symlink itself, if it is one) AND what it
resolves to are owned by a trusted uid: the watch's own user (the tick runs as them) or one
named with --trust-owner at start. The marker file is held to the same rule.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from hpceval.config.errors import ConfigError

OPT_IN = "--trust-owner"


def resolve_owners(owners: Iterable[str]) -> tuple[int, ...]:
    """--trust-owner values (user names or numeric uids) as uids, checked at start: a typo
    must not silently trust nobody, or somebody else."""
    import pwd

    uids: list[int] = []
    for owner in owners:
        text = owner.strip()
        if text.isdigit():
            uids.append(int(text))
            continue
        try:
            uids.append(pwd.getpwnam(text).pw_uid)
        except KeyError:
            raise ConfigError.at(OPT_IN, f"no user {owner!r} on this machine",
                                 "give a user name or a numeric uid (id -u NAME)") from None
    return tuple(sorted(set(uids)))


def trusted_uids(extra: Iterable[int]) -> frozenset[int]:
    """The uids whose checkpoints count: this process's (the watch's user) and `extra`."""
    return frozenset((os.geteuid(), *extra))


def foreign_owner(path: Path, trusted: frozenset[int]) -> int | None:
    """The uid that disqualifies `path` (the link's owner first, then its target's), or None
    when both are trusted. A path that cannot be read is not foreign: the caller's own check
    (is it a directory, is the marker there) decides about it."""
    try:
        link = os.lstat(path)
        target = os.stat(path) if stat.S_ISLNK(link.st_mode) else link
    except OSError:
        return None
    for uid in (link.st_uid, target.st_uid):
        if uid not in trusted:
            return uid
    return None


def writable_by_others(folder: Path) -> str | None:
    """A warning for `watch start` when others may write into the checkpoints folder."""
    try:
        mode = folder.stat().st_mode
    except OSError:
        return None
    who = [name for bit, name in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "others"))
           if mode & bit]
    if not who:
        return None
    return (f"--checkpoints {folder} is writable by {' and '.join(who)} (mode "
            f"{stat.S_IMODE(mode):04o}): only checkpoints owned by you (or by a "
            f"{OPT_IN}) are evaluated; the others show as ignored in `hpceval status WATCH`")
