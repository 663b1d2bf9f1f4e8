"""What the cluster allows, learned from Slurm itself: whether a partition exists, its MaxTime
and its own QOS, the MaxWall and flags of the QOS a profile names, and the MaxWall of the user's
association (user, account, partition: the usual ways sites cap walltime); the QOS an
association grants, and whether the controller enforces that grant
(``AccountingStorageEnforce``); which partition, QOS and account a job has where the profile
leaves them to the submit shell's SBATCH_* variables (job_place).

One ``sinfo`` and one ``scontrol show partition`` call per partition, one ``sacctmgr`` call
per QOS and one per account (the association's, all its partitions at once), one ``scontrol
show config``, per process (cached): a sweep of a thousand models asks once, and ``hpceval
doctor`` reads the same answers. No sinfo or sacctmgr here (render on a laptop; a site without
slurmdbd), an error, or a time-out: None, and nothing is capped or refused on its account.
"""

from __future__ import annotations

import functools
import getpass
import os
import shutil
import subprocess
from dataclasses import dataclass

from hpceval.backends.slurm.formats import input_variable
from hpceval.backends.views import ExecutionView
from hpceval.durations import walltime_minutes

SINFO_TIMEOUT_S = 10


@dataclass(frozen=True)
class Partition:
    name: str | None  # None: the cluster's default partition was asked for and none is marked
    found: bool
    max_minutes: int | None  # None: unlimited (or not found)


def ask(argv: list[str]) -> str | None:
    """What ``argv`` (its tool found on PATH) prints; None when it cannot be run, fails or
    times out."""
    tool = shutil.which(argv[0])
    if tool is None:
        return None
    try:
        proc = subprocess.run([tool, *argv[1:]], capture_output=True, text=True,
                              timeout=SINFO_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def count_limit(text: str) -> int | None:
    """A job-count limit as sacctmgr prints it; None for none ('', or not a number)."""
    return int(text.strip()) if text.strip().isdigit() else None


def _limit_minutes(text: str) -> int | None:
    """Minutes of a MaxWall as sacctmgr prints it; None for none ('', UNLIMITED)."""
    return walltime_minutes(text.strip()) if text.strip() else None


@functools.cache
def partition_info(partition: str | None) -> Partition | None:
    """``partition`` (None: the cluster's default partition) as sinfo reports it; None when
    sinfo cannot be asked (absent, failing, timing out)."""
    out = ask(["sinfo", "-h", "-o", "%P %l", *(["-p", partition] if partition else [])])
    if out is None:
        return None
    for line in out.splitlines():
        name, _, limit = line.strip().partition(" ")
        if (partition is None and name.endswith("*")) or name.rstrip("*") == partition:
            minutes = None if limit.strip() in ("infinite", "UNLIMITED", "") else \
                walltime_minutes(limit.strip())
            return Partition(name.rstrip("*"), True, minutes)
    # sinfo answered, and no line names it: Slurm prints nothing for an unknown partition
    return Partition(partition, False, None)


def partition_seen(partition: str | None) -> bool:
    """Whether sinfo could be asked here and shows ``partition`` (None: a default one)."""
    info = partition_info(partition)
    return info is not None and info.found


def partition_max_minutes(partition: str | None) -> int | None:
    """MaxTime of ``partition`` (None: the cluster's default partition) in minutes; None when
    it is unlimited or cannot be learned."""
    info = partition_info(partition)
    return info.max_minutes if info is not None else None


@dataclass(frozen=True)
class Qos:
    name: str
    max_minutes: int | None  # None: no MaxWall
    flags: frozenset[str]  # PartitionTimeLimit, OverPartQOS, DenyOnLimit, ...
    max_submit_per_user: int | None = None  # MaxSubmitJobsPerUser (None: none)
    max_submit_per_account: int | None = None  # MaxSubmitJobsPerAccount (None: none)
    group_submit: int | None = None  # GrpSubmitJobs: every user's jobs of it together


@functools.cache
def qos_info(qos: str) -> Qos | None:
    """QOS ``qos`` as the accounting database holds it (one sacctmgr call); None when it
    cannot be learned (no sacctmgr, no such QOS, an error)."""
    out = ask(["sacctmgr", "-n", "-P", "show", "qos", qos,
               "format=name,maxwall,flags,maxsubmitpu,maxsubmitpa,grpsubmit"])
    for line in (out or "").splitlines():
        name, limit, flags, per_user, per_account, group = [*line.strip().split("|"),
                                                            *[""] * 6][:6]
        if name == qos:
            return Qos(name, _limit_minutes(limit),
                       frozenset(flag for flag in flags.split(",") if flag),
                       count_limit(per_user), count_limit(per_account), count_limit(group))
    return None


@functools.cache
def qos_max_minutes(qos: str) -> int | None:
    """MaxWall of QOS ``qos`` in minutes; None when it is unlimited or cannot be learned."""
    info = qos_info(qos)
    return info.max_minutes if info is not None else None


def qos_flags(qos: str) -> frozenset[str]:
    info = qos_info(qos)
    return info.flags if info is not None else frozenset()


@functools.cache
def partition_qos(partition: str) -> str | None:
    """The partition's own QOS (slurm.conf ``QOS=``; one ``scontrol show partition``): its
    limits apply to every job there, before the job's own QOS's unless that QOS has the
    OverPartQOS flag. None: it has none, or that cannot be learned."""
    out = ask(["scontrol", "-o", "show", "partition", partition])
    for word in (out or "").split():
        key, _, value = word.partition("=")
        if key == "QoS":
            return value if value and value != "N/A" else None
    return None


@dataclass(frozen=True)
class Association:
    user: str
    cluster: str
    account: str
    partition: str  # "": the user's association for the partitions without one of their own
    max_minutes: int | None  # None: no MaxWall, on it or on an account above it
    default_qos: str = ""  # the QOS of a job that names none ("": none set)
    granted_qos: tuple[str, ...] = ()  # the QOS a job of it may name (): not known
    max_submit: int | None = None  # MaxSubmitJobs, its own or an account's above it (None: none)
    # GrpSubmitJobs set on this association itself (the accounts' above: accounts.py)
    group_submit: int | None = None

    @property
    def label(self) -> str:
        where = f" and partition {self.partition}" if self.partition else ""
        return f"{self.user}'s association with account {self.account}{where}"

    @property
    def what(self) -> str:
        """Whose limit it is, for messages."""
        return f"the MaxWall of {self.label}"


def user_name() -> str | None:
    """The name Slurm knows this user by (None: none)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


ASSOCIATION_FIELDS = "cluster,account,partition,maxwall,defaultqos,qos,maxsubmit,grpsubmit"


@functools.cache
def associations(user: str, account: str | None) -> tuple[Association, ...] | None:
    """The associations of ``user`` with ``account`` (None: the user's default account, as a
    job without --account gets), one per cluster and partition; None when sacctmgr cannot be
    asked (no accounting database here). sacctmgr shows an association's MaxWall with the
    parents' limits filled in (its default; WOPLimits would leave them out), so a row without
    one of its own carries its account's, or that account's parent's."""
    which = f"account={account}" if account else "onlydefaults"
    out = ask(["sacctmgr", "-n", "-P", "show", "associations", f"user={user}", which,
               f"format={ASSOCIATION_FIELDS}"])
    if out is None:
        return None
    rows = [line.strip().split("|") for line in out.splitlines()]
    return tuple(Association(user, cluster, acct, part, _limit_minutes(limit), default,
                             tuple(name for name in granted.split(",") if name),
                             count_limit(submit), count_limit(group))
                 for cluster, acct, part, limit, default, granted, submit, group in
                 ([*row, "", ""][:8] for row in rows if len(row) in (6, 7, 8)))


def job_association(partition: str | None, account: str | None) -> Association | None:
    """The association a job of ``partition`` (None: the cluster's default partition) and
    ``account`` runs under, as Slurm picks it: the user's association for that partition,
    else the one for no partition in particular. None when it cannot be learned: no
    sacctmgr, no such association (sbatch refuses the job then), the user unknown, or
    clusters of one accounting database that disagree (which one is this one is not asked)."""
    user = user_name()
    rows = associations(user, account) if user else None
    if not rows:
        return None
    if partition is None:
        info = partition_info(None)
        partition = info.name if info is not None and info.found else None
    picked = set()
    for cluster in {row.cluster for row in rows}:
        mine = [row for row in rows if row.cluster == cluster]
        own = [row for row in mine if partition and row.partition.lower() == partition.lower()]
        general = [row for row in mine if not row.partition]
        if own or general:
            picked.add((own or general)[0])
    limits = {(row.max_minutes, row.default_qos) for row in picked}
    return min(picked, key=lambda row: row.cluster) if len(limits) == 1 else None


@dataclass(frozen=True)
class TimeLimit:
    minutes: int
    what: str  # whose limit it is, for messages: "the partition's MaxTime", "QOS x's MaxWall"


def time_limit(partition: str | None, qos: str | None,
               account: str | None = None) -> TimeLimit | None:
    """The walltime limit a job of this partition, QOS (None: its association's default QOS)
    and account (None: the user's default account) meets; None if none is known. It is the
    shorter of the partition's MaxTime (unless the job's QOS has PartitionTimeLimit) and the
    MaxWall Slurm takes from the first of these that sets one: the partition's own QOS and the
    job's QOS (_qos_wall's order), then the user's association (which shows its accounts'
    limits where it sets none itself). A QOS's MaxWall longer than the association's is
    what such a QOS is for, so the association's does not count then."""
    limits = []
    flags = qos_flags(qos) if qos else frozenset()
    part = partition_max_minutes(partition)
    if part is not None and "PartitionTimeLimit" not in flags:  # such a QOS may exceed it
        limits.append(TimeLimit(part, "the partition's MaxTime"))
    wall = _qos_wall(partition, qos, flags)
    if wall is not None:
        limits.append(wall)
    else:
        assoc = job_association(partition, account)
        below = association_limit(assoc, named_qos=qos is not None) if assoc else None
        limits += [below] if below is not None else []
    return min(limits, key=lambda limit: limit.minutes, default=None)


def _qos_wall(partition: str | None, qos: str | None,
              flags: frozenset[str]) -> TimeLimit | None:
    """The MaxWall of the first QOS that sets one, in Slurm's order: the partition's own QOS,
    then the job's (the job's first where it has the OverPartQOS flag)."""
    info = partition_info(partition)
    named = info.name if info is not None and info.found else None
    own = partition_qos(named) if named else None
    ordered = [(qos, f"QOS {qos}'s MaxWall"),
               (own, f"QOS {own}'s MaxWall (partition {named}'s own QOS)")]
    if "OverPartQOS" not in flags:
        ordered.reverse()
    for name, what in ordered:
        wall = qos_max_minutes(name) if name else None
        if wall is not None:
            return TimeLimit(wall, what)
    return None


def association_limit(assoc: Association, *, named_qos: bool) -> TimeLimit | None:
    """The MaxWall that counts at ``assoc``'s level when the job's own QOS sets none: that of
    its default QOS if the job names no QOS (``named_qos``) and that QOS sets one, else the
    association's own (None: neither sets one)."""
    wall = qos_max_minutes(assoc.default_qos) if assoc.default_qos and not named_qos else None
    if wall is not None:
        return TimeLimit(wall, f"QOS {assoc.default_qos}'s MaxWall (the default QOS of "
                               f"{assoc.label})")
    return None if assoc.max_minutes is None else TimeLimit(assoc.max_minutes, assoc.what)


def capped_walltime(walltime: str, partition: str | None, qos: str | None = None,
                    account: str | None = None) -> tuple[str, TimeLimit | None]:
    """(``walltime``, or the shortest limit of time_limit in minutes where that is shorter;
    the limit when it capped, else None)."""
    wanted, limit = walltime_minutes(walltime), time_limit(partition, qos, account)
    if wanted is None or limit is None or wanted <= limit.minutes:
        return walltime, None
    return str(limit.minutes), limit


@functools.cache
def cluster_config() -> dict[str, str] | None:
    """``scontrol show config`` as key and value (one call per process); None when it cannot
    be asked."""
    out = ask(["scontrol", "show", "config"])
    if out is None:
        return None
    pairs = (line.partition("=") for line in out.splitlines())
    return {key.strip(): value.strip() for key, sep, value in pairs if sep}


def enforced() -> frozenset[str] | None:
    """What the controller's ``AccountingStorageEnforce`` holds (associations, limits, qos,
    safe, ...); None when ``scontrol show config`` cannot be asked. Without ``qos`` there, a
    job may name a QOS its association does not grant."""
    config = cluster_config()
    if config is None:
        return None
    return frozenset(word.strip() for word in config.get("AccountingStorageEnforce", "")
                     .split(",") if word.strip() and word.strip() != "(null)")


def jobs_hidden() -> bool:
    """Whether the controller hides other users' jobs from this user (``PrivateData=jobs``):
    a count of every user's queued jobs is then a floor."""
    words = (cluster_config() or {}).get("PrivateData", "").split(",")
    return "jobs" in (word.strip() for word in words)


def max_job_count() -> int | None:
    """The cluster's ``MaxJobCount``: how many job records slurmctld holds at once, every
    user's, each array element one (None: not known)."""
    return count_limit((cluster_config() or {}).get("MaxJobCount", ""))


def ungranted_qos(qos: str, partition: str | None, account: str | None) -> Association | None:
    """The association a job of ``partition`` and ``account`` runs under when it does not
    grant QOS ``qos`` and the controller enforces grants (Slurm refuses such a job: "Invalid
    qos specification"); None when it grants it, or that cannot be learned."""
    assoc = job_association(partition, account)
    if assoc is None or not assoc.granted_qos or qos in assoc.granted_qos:
        return None
    rules = enforced()
    return assoc if rules is not None and "qos" in rules else None


@dataclass(frozen=True)
class JobPlace:
    """Where a job runs and under what: the profile's partition, QOS and account, or, where it
    leaves one unset, what sbatch takes from the submit environment (SBATCH_PARTITION ...:
    formats.overridden_inputs leaves out only those the job sets itself)."""

    partition: str | None
    qos: str | None
    account: str | None
    from_environment: tuple[str, ...] = ()  # "SBATCH_PARTITION=short", ...

    @property
    def note(self) -> str:
        """For messages: where an unset key's value came from ("" when from none)."""
        return (f" (from your environment: {', '.join(self.from_environment)})"
                if self.from_environment else "")


def job_place(ex: ExecutionView, *, cpu: bool = False) -> JobPlace:
    """Where a job of ``ex`` runs: a model job, or (``cpu``) a CPU job beside the run, which
    takes execution.cpu_partition where that is set."""
    values, used = {}, []
    partition = ex.cpu_partition if cpu and ex.cpu_partition is not None else ex.partition
    for option, value in (("partition", partition), ("qos", ex.qos),
                          ("account", ex.account)):
        if value is None and (found := os.environ.get(input_variable(option))):
            value = found
            used.append(f"{input_variable(option)}={found}")
        values[option] = value
    return JobPlace(values["partition"], values["qos"], values["account"], tuple(used))
