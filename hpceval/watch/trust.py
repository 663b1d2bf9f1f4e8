"""Whose checkpoints a watch evaluates: THE owner rule (docs/watch.md, "Shared folders").

A checkpoints folder that others can write (a 1777 scratch folder, a 2770 project folder) lets
them plant a folder, or a symlink to any weights, that matches the pattern; the watch would
spend the user's allocation on it and put its score on the user's curve. So a checkpoint
counts only when the entry in the folder (lstat: the symlink itself, if it is one) AND what it
resolves to are owned by a trusted uid: the watch's own user (the tick runs as them) or one
named with --trust-owner at start. The marker file is held to the same rule. The owner test
itself (`foreign_owner`) is hpceval.trust's, the one rule every layer uses.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from hpceval.config.errors import ConfigError
from hpceval.trust import folder_problem, stat_problem, writers

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


def writable_by_others(folder: Path, extra: Iterable[int] = ()) -> str | None:
    """A warning for `watch start` when others may put folders into the checkpoints folder:
    it is writable by its group or others, owned by someone not trusted (`extra`: the
    --trust-owner uids; root counts too), or a folder above it others can write (it could be
    swapped whole). hpceval.trust says what counts; the owner rule keeps such folders out."""
    try:
        st = folder.stat()
    except OSError:
        return None
    who = writers(st.st_mode)
    problem: str | None
    if who is not None:
        problem = f"is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    elif (owner := stat_problem(st, trusted_uids(extra), root=True)) is not None:
        problem = f"{owner}, who can put anything there"
    else:
        above = (folder_problem(parent, folder.resolve() / "x")
                 for parent in folder.resolve().parents)
        problem = next((f"is in a folder others can write ({p})" for p in above if p), None)
        if problem is None:
            return None
    return (f"--checkpoints {folder} {problem}: only checkpoints owned by you (or by a "
            f"{OPT_IN}) are evaluated; the others show as ignored in `hpceval status WATCH`")
