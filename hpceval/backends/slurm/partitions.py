"""What the cluster allows, learned from Slurm itself: whether a partition exists, its MaxTime,
and the MaxWall of the QOS a profile names (the usual way sites cap walltime).

One ``sinfo`` call per partition and one ``sacctmgr`` call per QOS and process (cached): a sweep
of a thousand models asks once, and ``hpceval doctor`` reads the same answers. No sinfo or
sacctmgr here (render on a laptop), an error, or a time-out: None, and nothing is capped or
refused on its account.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import dataclass

from hpceval.backends.slurm.formats import walltime_minutes

SINFO_TIMEOUT_S = 10


@dataclass(frozen=True)
class Partition:
    name: str | None  # None: the cluster's default partition was asked for and none is marked
    found: bool
    max_minutes: int | None  # None: unlimited (or not found)


@functools.cache
def partition_info(partition: str | None) -> Partition | None:
    """``partition`` (None: the cluster's default partition) as sinfo reports it; None when
    sinfo cannot be asked (absent, failing, timing out)."""
    sinfo = shutil.which("sinfo")
    if sinfo is None:
        return None
    argv = [sinfo, "-h", "-o", "%P %l", *(["-p", partition] if partition else [])]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=SINFO_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    for line in proc.stdout.splitlines():
        name, _, limit = line.strip().partition(" ")
        if (partition is None and name.endswith("*")) or name.rstrip("*") == partition:
            minutes = None if limit.strip() in ("infinite", "UNLIMITED", "") else \
                walltime_minutes(limit.strip())
            return Partition(name.rstrip("*"), True, minutes)
    # sinfo answered, and no line names it: Slurm prints nothing for an unknown partition
    return Partition(partition, False, None)


def partition_max_minutes(partition: str | None) -> int | None:
    """MaxTime of ``partition`` (None: the cluster's default partition) in minutes; None when
    it is unlimited or cannot be learned."""
    info = partition_info(partition)
    return info.max_minutes if info is not None else None


@functools.cache
def qos_max_minutes(qos: str) -> int | None:
    """MaxWall of QOS ``qos`` in minutes, as the accounting database holds it; None when it is
    unlimited or cannot be learned (no sacctmgr, no such QOS, an error)."""
    sacctmgr = shutil.which("sacctmgr")
    if sacctmgr is None:
        return None
    argv = [sacctmgr, "-n", "-P", "show", "qos", qos, "format=name,maxwall"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=SINFO_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
        name, _, limit = line.strip().partition("|")
        if name == qos and limit.strip():
            return walltime_minutes(limit.strip())
    return None


@dataclass(frozen=True)
class TimeLimit:
    minutes: int
    what: str  # whose limit it is, for messages: "the partition's MaxTime", "QOS x's MaxWall"


def time_limit(partition: str | None, qos: str | None) -> TimeLimit | None:
    """The shortest walltime limit a job of this partition and QOS meets; None if none."""
    limits = []
    part = partition_max_minutes(partition)
    if part is not None:
        limits.append(TimeLimit(part, "the partition's MaxTime"))
    wall = qos_max_minutes(qos) if qos else None
    if wall is not None:
        limits.append(TimeLimit(wall, f"QOS {qos}'s MaxWall"))
    return min(limits, key=lambda limit: limit.minutes, default=None)


def capped_walltime(walltime: str, partition: str | None,
                    qos: str | None = None) -> tuple[str, TimeLimit | None]:
    """(``walltime``, or the partition's MaxTime or the QOS's MaxWall in minutes where that is
    shorter; the limit when it capped, else None)."""
    wanted, limit = walltime_minutes(walltime), time_limit(partition, qos)
    if wanted is None or limit is None or wanted <= limit.minutes:
        return walltime, None
    return str(limit.minutes), limit
