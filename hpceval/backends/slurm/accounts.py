"""The account tree above a job's association, for the limits that count every job under an
account: GrpSubmitJobs.

A site gives a group an account, and its teams or projects accounts below it, and caps the
group's queue with GrpSubmitJobs on the group's account: every pending or running job (each
array element one) of any user under that account or any account below it counts, at every
level up to the root, each level against its own. A user's association may have one as well,
which counts that user's jobs under it. sacctmgr shows an association's MaxSubmitJobs and
MaxWall with its parents' filled in (partitions.associations reads those, and the user
association's own GrpSubmitJobs), but not its Grp limits: those are each account's own, so the
accounts' associations are read (one ``sacctmgr show associations user=``: the accounts alone,
not every user's rows, which a large site has by the ten thousand; cached per process) and
walked from the job's account to the root.

Where PrivateData hides other accounts' associations the tree stops where the user's view does:
the limits above it are not known, and nothing is refused on their account.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

from hpceval.backends.slurm.partitions import Association, ask, count_limit

TREE_FIELDS = "cluster,account,parentname,user,grpsubmit"


@dataclass(frozen=True)
class AccountRow:
    """An account's own association as ``sacctmgr show associations`` lists it."""

    cluster: str
    account: str
    parent: str  # the account above it ("" for the root)
    group_submit: int | None  # GrpSubmitJobs set on this account itself (None: none)


@dataclass(frozen=True)
class GroupLimit:
    """A GrpSubmitJobs that a job of one association counts against."""

    jobs: int
    account: str  # the account it is set on
    accounts: frozenset[str]  # whose jobs count: that account's and every account's below it
    user: str = ""  # set on the user's association itself: only that user's jobs count
    partition: str = ""  # ... and, where the association is a partition's, only there

    @property
    def what(self) -> str:
        """Whose limit it is, for messages."""
        if self.user:
            where = f" and partition {self.partition}" if self.partition else ""
            return (f"the GrpSubmitJobs of {self.user}'s association with account "
                    f"{self.account}{where}")
        below = sorted(self.accounts - {self.account})
        shown = ", ".join(below[:5]) + (f" and {len(below) - 5} more" if len(below) > 5 else "")
        under = f" and the accounts below it ({shown})" if below else ""
        return (f"account {self.account}'s GrpSubmitJobs (every user's jobs under account "
                f"{self.account}{under} together)")


@functools.cache
def account_rows() -> tuple[AccountRow, ...] | None:
    """Every account's own association the accounting database shows this user (one sacctmgr
    call; a user's rows, should ``user=`` not leave them out, are skipped); None when sacctmgr
    cannot be asked."""
    out = ask(["sacctmgr", "-n", "-P", "show", "associations", "user=",
               f"format={TREE_FIELDS}"])
    if out is None:
        return None
    rows = (line.strip().split("|") for line in out.splitlines())
    return tuple(AccountRow(cluster, account, parent, count_limit(group))
                 for cluster, account, parent, user, group in
                 (row for row in rows if len(row) == 5) if not user)


def group_limits(assoc: Association) -> Iterator[GroupLimit]:
    """Every GrpSubmitJobs a job of ``assoc`` counts against: its own association's, then its
    account's and each account's above it, up to the root."""
    if assoc.group_submit is not None:
        yield GroupLimit(assoc.group_submit, assoc.account, frozenset({assoc.account}),
                         assoc.user, assoc.partition)
    accounts = {row.account: row for row in account_rows() or ()
                if row.cluster == assoc.cluster}
    below: dict[str, set[str]] = {}
    for row in accounts.values():
        below.setdefault(row.parent, set()).add(row.account)
    name, seen = assoc.account, set()
    while name in accounts and name not in seen:  # a loop in the tree: each account once
        seen.add(name)
        if (jobs := accounts[name].group_submit) is not None:
            yield GroupLimit(jobs, name, _subtree(name, below))
        name = accounts[name].parent


def _subtree(account: str, below: dict[str, set[str]]) -> frozenset[str]:
    """``account`` and every account below it."""
    found, todo = {account}, [account]
    while todo:
        for child in below.get(todo.pop(), set()) - found:
            found.add(child)
            todo.append(child)
    return frozenset(found)
