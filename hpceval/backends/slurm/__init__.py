"""Slurm access for hpceval: the only package that runs sbatch, sacct, scancel and squeue.

`SacctPoller` (built on submitit) is imported on first use: rendering and validation read
`hpceval.backends.slurm.formats` and must not pay for importing submitit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hpceval.backends.slurm.client import CommandSlurmClient, SlurmClient, SlurmError
from hpceval.backends.slurm.records import JobRecord, QueueEntry, SlurmParseError
from hpceval.backends.slurm.states import JobStatus, Phase, classify, combine, resolve_preempted

if TYPE_CHECKING:
    from hpceval.backends.slurm.poller import SacctPoller

__all__ = [
    "CommandSlurmClient",
    "JobRecord",
    "JobStatus",
    "Phase",
    "QueueEntry",
    "SacctPoller",
    "SlurmClient",
    "SlurmError",
    "SlurmParseError",
    "classify",
    "combine",
    "resolve_preempted",
]


def __getattr__(name: str) -> Any:
    if name == "SacctPoller":
        from hpceval.backends.slurm.poller import SacctPoller

        return SacctPoller
    raise AttributeError(f"module 'hpceval.backends.slurm' has no attribute {name!r}")
