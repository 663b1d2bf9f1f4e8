"""What the cluster allows, learned from Slurm itself: a partition's MaxTime.

One ``sinfo`` call per partition and process (cached): a sweep of a thousand models asks once.
No sinfo here (render on a laptop), an error, or a time-out: None, and nothing is capped or
refused on its account.
"""

from __future__ import annotations

import functools
import shutil
import subprocess

from hpceval.slurm.formats import walltime_minutes

SINFO_TIMEOUT_S = 10


@functools.cache
def partition_max_minutes(partition: str | None) -> int | None:
    """MaxTime of ``partition`` (None: the cluster's default partition) in minutes; None when
    it is unlimited or cannot be learned."""
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
            return None if limit.strip() in ("infinite", "UNLIMITED", "") else \
                walltime_minutes(limit.strip())
    return None


def capped_walltime(walltime: str, partition: str | None) -> tuple[str, int | None]:
    """(``walltime``, or the partition's MaxTime in minutes where that is shorter; the MaxTime
    when it capped, else None)."""
    wanted, limit = walltime_minutes(walltime), partition_max_minutes(partition)
    if wanted is None or limit is None or wanted <= limit:
        return walltime, None
    return str(limit), limit
