"""Slurm's commands as messages name them: the layers above the backends print these texts and
never spell a Slurm command themselves (tests/backends/test_backends.py checks it)."""

from __future__ import annotations

SUBMIT = "sbatch"  # what a job script is handed to
ACCOUNTING = "sacct"  # where ended jobs and what they held (AllocTRES, Elapsed) are kept
QUEUE = "squeue"  # the live queue
LIMITS = "sacctmgr"  # the accounting database's associations and QOS, with their MaxWall
TEST_ONLY = f"{SUBMIT} --test-only"  # asks whether a job would be accepted, queues nothing
WHY_PENDING = f"{QUEUE} -j ID -o %R"  # why a job still waits
OWN_JOBS = f"{QUEUE} --me"  # the user's own jobs, with their ids
EXPORT_SETTING = "SLURM_EXPORT_ENV"  # in a job: the --export it was submitted with
SUBMIT_EXPORT = "SBATCH_EXPORT"  # the submit shell's (a site's, a user's) default for --export
PARTITION_SHOW = ("scontrol", "show", "partition")  # a partition's settings (PreemptMode=...)
