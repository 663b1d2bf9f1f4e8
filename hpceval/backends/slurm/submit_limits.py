"""How many more jobs Slurm takes from this user: the submit limits a run's jobs count against.

Slurm counts each pending or running job of a user, each array element as one, against the
MaxSubmitJobsPerUser of the job's QOS and of its partition's own QOS, and against the
MaxSubmitJobs of the job's association (or an account above it); every user's jobs count
against those QOS's GrpSubmitJobs, the jobs of the job's account against their
MaxSubmitJobsPerAccount, and every user's jobs under an account (or an account below it)
against that account's GrpSubmitJobs, at every level up to the root (accounts.py). ``sbatch``
refuses a job past any of them (QOSMaxSubmitJobPerUserLimit, QOSGrpSubmitJobsLimit,
AssocMaxSubmitJobLimit, AssocGrpSubmitJobsLimit, ...). A run is several ``sbatch`` calls (the
pull job, a judge, the model jobs or arrays, the aggregation and export jobs), so the one that
crossed the limit failed after the others were queued: a sweep ran without its aggregation.
Checked at submit instead, with the jobs of the user's already in the queue (one ``squeue``;
every user's where a limit counts others' jobs: a site that hides them, PrivateData=jobs,
shows fewer, so such a count is a floor), before anything is written or submitted.

The limits come from partitions.py's and accounts.py's cached sacctmgr answers (the same calls
as the walltime limits, and one for the account tree); no sacctmgr or squeue here: nothing is
known and nothing is refused.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from hpceval.backends.slurm.accounts import group_limits
from hpceval.backends.slurm.commands import QUEUE, SUBMIT
from hpceval.backends.slurm.partitions import (
    JobPlace,
    Qos,
    ask,
    job_association,
    job_place,
    max_job_count,
    partition_qos,
    qos_info,
    user_name,
)
from hpceval.backends.views import ExecutionView
from hpceval.errors import ConfigIssue
from hpceval.records import Role


@dataclass(frozen=True)
class QueuedJob:
    """One pending or running job (array element), as ``squeue -r`` lists it."""

    user: str
    qos: str
    account: str
    partition: str


@dataclass(frozen=True)
class SubmitLimit:
    jobs: int  # how many jobs may be pending or running at once under it
    what: str  # whose limit it is, for messages
    key: str  # the execution key that chooses it
    fix: str  # what to change besides the run's size
    counts: Callable[[QueuedJob], bool]  # whether a queued job counts against it
    everyone: bool = False  # other users' jobs count too (GrpSubmitJobs, ...PerAccount)

    def counted(self, queued: Sequence[QueuedJob]) -> int:
        """How many of ``queued`` count against this limit."""
        return sum(self.counts(job) for job in queued)


def queued_jobs(*, everyone: bool = False) -> list[QueuedJob] | None:
    """The user's pending and running jobs (``everyone``: every user's that Slurm shows),
    each array element apart (one ``squeue``); None when the queue cannot be asked."""
    user = user_name()
    if not user:
        return None
    out = ask([QUEUE, "-h", "-r", *([] if everyone else ["-u", user]), "-o", "%u|%q|%a|%P"])
    if out is None:
        return None
    rows = (line.strip().split("|") for line in out.splitlines())
    return [QueuedJob(*row) for row in rows if len(row) == 4]


def submit_limits(place: JobPlace) -> Iterator[SubmitLimit]:
    """Every submit limit a job of ``place`` counts against: its QOS's (named, else its
    association's default, else Slurm's ``normal``), its partition's own QOS's, its
    association's, its account's and those of the accounts above it."""
    user = user_name() or ""
    assoc = job_association(place.partition, place.account)
    qos = place.qos or (assoc.default_qos if assoc is not None else "") or "normal"
    account = place.account or (assoc.account if assoc is not None else None)
    yield from _qos_limits(qos_info(qos), f"QOS {qos}'s", "execution.qos",
                           "name a QOS that allows more jobs", lambda job: job.qos == qos,
                           user, account)
    part_qos = partition_qos(place.partition) if place.partition else None
    if part_qos and part_qos != qos:
        yield from _qos_limits(qos_info(part_qos), f"QOS {part_qos}'s", "execution.partition",
                               "use another partition",
                               lambda job: job.partition == place.partition, user, account,
                               f" (partition {place.partition}'s own QOS)")
    if assoc is None:
        return
    mine = functools.partial(_under_association, user, assoc.account, assoc.partition)
    if assoc.max_submit is not None:
        yield SubmitLimit(assoc.max_submit, f"the MaxSubmitJobs of {assoc.label}",
                          "execution.account", "use another account", mine)
    for group in group_limits(assoc):
        yield SubmitLimit(group.jobs, group.what, "execution.account", "use another account",
                          mine if group.user else
                          functools.partial(_under_accounts, group.accounts),
                          everyone=not group.user)


def _under_association(user: str, account: str, partition: str, job: QueuedJob) -> bool:
    """Whether ``job`` is the user's under that account (and partition, where it names one)."""
    return job.user == user and job.account == account and (
        not partition or job.partition == partition)


def _under_accounts(accounts: frozenset[str], job: QueuedJob) -> bool:
    return job.account in accounts


def _qos_limits(info: Qos | None, whose: str, key: str, fix: str,
                under: Callable[[QueuedJob], bool], user: str, account: str | None,
                note: str = "") -> Iterator[SubmitLimit]:
    """A QOS's submit limits: the user's jobs under it, the account's (when the job's account
    is known), everyone's."""
    if info is None:
        return
    if info.max_submit_per_user is not None:
        yield SubmitLimit(info.max_submit_per_user, f"{whose} MaxSubmitJobsPerUser{note}", key,
                          fix, lambda job: job.user == user and under(job))
    if info.max_submit_per_account is not None and account:
        yield SubmitLimit(info.max_submit_per_account,
                          f"{whose} MaxSubmitJobsPerAccount{note} (account {account})", key,
                          fix, lambda job: job.account == account and under(job), everyone=True)
    if info.group_submit is not None:
        yield SubmitLimit(info.group_submit, f"{whose} GrpSubmitJobs{note} (every user's jobs "
                          "together)", key, fix, under, everyone=True)


def submit_issues(ex: ExecutionView, jobs: Sequence[Role]) -> list[ConfigIssue]:
    """An issue for each submit limit that a run of ``ex`` submitting ``jobs`` (each job's
    role; a sweep's models one Role.MAIN each) would pass."""
    place = job_place(ex)
    issues = _past_max_job_count(jobs)
    limits = list(submit_limits(place))
    # the queue is asked only under a limit, and for every user's jobs only where they count
    queued = queued_jobs(everyone=any(limit.everyone for limit in limits)) if limits else None
    if queued is None:
        return issues
    models = sum(role == Role.MAIN for role in jobs)
    for limit in limits:
        counted = limit.counted(queued)
        room = max(limit.jobs - counted, 0)
        if len(jobs) <= room:
            continue
        whose = ("job" if counted == 1 else "jobs") if limit.everyone else "of your jobs"
        counts = "counts" if counted == 1 else "count"
        waiting = (f", and {counted} {whose} in the queue already {counts} against it"
                   if counted else "")
        fewer = room - (len(jobs) - models)
        issues.append(ConfigIssue(
            limit.key, f"this run submits {len(jobs)} jobs ({_kinds(jobs)}){place.note}; "
            f"{limit.what} is {limit.jobs}{waiting}: {SUBMIT} would refuse one of them "
            "after queueing the others",
            (f"submit at most {fewer} model{'s' if fewer > 1 else ''} at once, "
             if 0 < fewer < models else "")
            + f"wait for your queued jobs to end ({QUEUE} --me), or {limit.fix}"))
    return issues


def _past_max_job_count(jobs: Sequence[Role]) -> list[ConfigIssue]:
    """The cluster's MaxJobCount against the run's own jobs. Every user's job records count
    against it (each array element one, an ended job until MinJobAge has passed), and sbatch
    past it does not refuse: it waits ("Slurm temporarily unable to accept job") until the
    submit gives up, after the run's first arrays were queued. Only a run that could never be
    queued is refused: asking every user's queue on each submit would cost the controller more
    than a count that is a floor anyway (ended jobs do not show) would save."""
    cap = max_job_count()
    if cap is None or len(jobs) <= cap:
        return []
    fewer = cap - (len(jobs) - sum(role == Role.MAIN for role in jobs))
    return [ConfigIssue(
        "models", f"this run submits {len(jobs)} jobs ({_kinds(jobs)}); the cluster's "
        f"MaxJobCount is {cap} (the jobs Slurm holds at once, every user's, each array element "
        f"one): {SUBMIT} cannot queue them all, and waits until the submit gives up",
        (f"submit at most {fewer} models at once (the sweep as several runs), or "
         if fewer > 0 else "") + "ask the site's admins to raise MaxJobCount")]


def _kinds(jobs: Sequence[Role]) -> str:
    counts = Counter(jobs)
    names = {Role.MAIN: "model", Role.PULL: "image pull", Role.JUDGE: "judge",
             Role.AGGREGATE: "aggregation", Role.EXPORT: "export"}
    return ", ".join(f"{counts[role]} {names.get(role, str(role))} job"
                     f"{'s' if counts[role] > 1 else ''}" for role in
                     (Role.MAIN, *sorted(set(counts) - {Role.MAIN})) if counts[role])
