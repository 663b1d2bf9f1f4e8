"""Slurm access for hpceval: the only package that runs sbatch, sacct, scancel and squeue.

`JobWatcher` (built on submitit) is imported on first use: rendering and validation read
`hpceval.backends.slurm.formats` and must not pay for importing submitit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hpceval.backends.slurm.client import CommandSlurmClient, SlurmClient, SlurmError
from hpceval.backends.slurm.records import JobRecord, QueueEntry, SlurmParseError
from hpceval.backends.slurm.states import JobStatus, Phase, classify, combine, resolve_preempted

if TYPE_CHECKING:
    from hpceval.backends.slurm.watcher import JobWatcher

__all__ = [
    "CommandSlurmClient",
    "JobRecord",
    "JobStatus",
    "JobWatcher",
    "Phase",
    "QueueEntry",
    "SlurmClient",
    "SlurmError",
    "SlurmParseError",
    "classify",
    "combine",
    "resolve_preempted",
]


def __getattr__(name: str) -> Any:
    if name == "JobWatcher":
        from hpceval.backends.slurm.watcher import JobWatcher

        return JobWatcher
    raise AttributeError(f"module 'hpceval.backends.slurm' has no attribute {name!r}")
