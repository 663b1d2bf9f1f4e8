"""Slurm access for hpceval: the only package that runs sbatch, sacct, scancel and squeue."""

from hpceval.slurm.client import CommandSlurmClient, SlurmClient, SlurmError
from hpceval.slurm.records import JobRecord, QueueEntry, SlurmParseError
from hpceval.slurm.states import JobStatus, Phase, classify, combine, resolve_preempted
from hpceval.slurm.watcher import JobWatcher

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
