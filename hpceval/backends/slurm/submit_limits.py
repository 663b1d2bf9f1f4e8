"""How many more jobs Slurm takes from this user: the submit limits a run's jobs count against.

Slurm counts each pending or running job of a user, each array element as one, against the
MaxSubmitJobsPerUser of the job's QOS and of its partition's own QOS, and against the
MaxSubmitJobs of the job's association (or an account above it); ``sbatch`` refuses a job past
any of them (QOSMaxSubmitJobPerUserLimit, AssocMaxSubmitJobLimit). A run is several ``sbatch``
calls (the pull job, a judge, the model jobs or arrays, the aggregation and export jobs), so
the one that crossed the limit failed after the others were queued: a sweep ran without its
aggregation. Checked at submit instead, with the jobs of the user's already in the queue
(one ``squeue``), before anything is written or submitted.

The limits come from partitions.py's cached sacctmgr answers (the same calls as the walltime
limits); no sacctmgr or squeue here: nothing is known and nothing is refused.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from hpceval.backends.slurm.commands import QUEUE, SUBMIT
from hpceval.backends.slurm.partitions import (
    JobPlace,
    ask,
    job_association,
    job_place,
    partition_qos,
    qos_info,
    user_name,
)
from hpceval.backends.views import ExecutionView
from hpceval.errors import ConfigIssue
from hpceval.records import Role


@dataclass(frozen=True)
class QueuedJob:
    """One pending or running job (array element) of the user, as ``squeue -r`` lists it."""

    qos: str
    account: str
    partition: str


@dataclass(frozen=True)
class SubmitLimit:
    jobs: int  # how many jobs of the user may be pending or running at once under it
    what: str  # whose limit it is, for messages
    key: str  # the execution key that chooses it
    fix: str  # what to change besides the run's size
    counts: Callable[[QueuedJob], bool]  # whether a queued job of the user counts against it

    def counted(self, queued: Sequence[QueuedJob]) -> int:
        """How many of the user's ``queued`` jobs count against this limit."""
        return sum(self.counts(job) for job in queued)


def queued_jobs() -> list[QueuedJob] | None:
    """The user's pending and running jobs, each array element apart (one ``squeue``); None
    when the queue cannot be asked."""
    user = user_name()
    out = ask([QUEUE, "-h", "-r", "-u", user, "-o", "%q|%a|%P"]) if user else None
    if out is None:
        return None
    rows = (line.strip().split("|") for line in out.splitlines())
    return [QueuedJob(*row) for row in rows if len(row) == 3]


def submit_limits(place: JobPlace) -> Iterator[SubmitLimit]:
    """Every submit limit a job of ``place`` counts against: its QOS's (named, else its
    association's default, else Slurm's ``normal``), its partition's own QOS's, its
    association's."""
    assoc = job_association(place.partition, place.account)
    qos = place.qos or (assoc.default_qos if assoc is not None else "") or "normal"
    own = qos_info(qos)
    if own is not None and own.max_submit_per_user is not None:
        yield SubmitLimit(own.max_submit_per_user, f"QOS {qos}'s MaxSubmitJobsPerUser",
                          "execution.qos", "name a QOS that allows more jobs",
                          lambda job: job.qos == qos)
    part_qos = partition_qos(place.partition) if place.partition else None
    part = qos_info(part_qos) if part_qos and part_qos != qos else None
    if part is not None and part.max_submit_per_user is not None:
        yield SubmitLimit(part.max_submit_per_user,
                          f"QOS {part_qos}'s MaxSubmitJobsPerUser (partition "
                          f"{place.partition}'s own QOS)", "execution.partition",
                          "use another partition", lambda job: job.partition == place.partition)
    if assoc is not None and assoc.max_submit is not None:
        yield SubmitLimit(assoc.max_submit, f"the MaxSubmitJobs of {assoc.label}",
                          "execution.account", "use another account",
                          lambda job: job.account == assoc.account and (
                              not assoc.partition or job.partition == assoc.partition))


def submit_issues(ex: ExecutionView, jobs: Sequence[Role]) -> list[ConfigIssue]:
    """An issue for each submit limit that a run of ``ex`` submitting ``jobs`` (each job's
    role; a sweep's models one Role.MAIN each) would pass."""
    place = job_place(ex)
    limits = list(submit_limits(place))
    queued = queued_jobs() if limits else None  # the queue is asked only under a limit
    if queued is None:
        return []
    issues = []
    models = sum(role == Role.MAIN for role in jobs)
    for limit in limits:
        counted = limit.counted(queued)
        room = max(limit.jobs - counted, 0)
        if len(jobs) <= room:
            continue
        waiting = (f", and {counted} of your jobs in the queue already count against it"
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


def _kinds(jobs: Sequence[Role]) -> str:
    counts = Counter(jobs)
    names = {Role.MAIN: "model", Role.PULL: "image pull", Role.JUDGE: "judge",
             Role.AGGREGATE: "aggregation", Role.EXPORT: "export"}
    return ", ".join(f"{counts[role]} {names.get(role, str(role))} job"
                     f"{'s' if counts[role] > 1 else ''}" for role in
                     (Role.MAIN, *sorted(set(counts) - {Role.MAIN})) if counts[role])
