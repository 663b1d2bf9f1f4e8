"""What a job knows about its own allocation, under hpceval's names, for the in-job Python.

Every backend's ``env.j2`` partial (templates/backends/<kind>/env.j2) exports these variables
from what its scheduler sets (Slurm's job id, node list...; local: empty), so the code that runs
inside a job (collect's manifest, the response cache's lease) reads them here and never a
scheduler's own names. tests/backends/test_template_dialect.py checks that each env.j2 exports
exactly the names below.
This module imports nothing of hpceval, so every layer can use it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

JOB_ID = "HPCEVAL_JOB_ID"  # this job's own id (an array element's own id, too)
NODELIST = "HPCEVAL_NODELIST"  # its nodes, in the scheduler's compact form ("gpu[01-02]")
ARRAY_JOB_ID = "HPCEVAL_ARRAY_JOB_ID"  # an array element: the array's base id
ARRAY_INDEX = "HPCEVAL_ARRAY_INDEX"  # an array element: its index
RESTART_COUNT = "HPCEVAL_RESTART_COUNT"  # how often the scheduler requeued it (0: never)
CLUSTER = "HPCEVAL_CLUSTER"  # the scheduler's cluster name
PARTITION = "HPCEVAL_PARTITION"  # the partition it runs in
NAMES = (JOB_ID, NODELIST, ARRAY_JOB_ID, ARRAY_INDEX, RESTART_COUNT, CLUSTER, PARTITION)


@dataclass(frozen=True)
class JobEnv:
    """The variables as the job sees them; None for one unset or empty (outside a job)."""

    job_id: str | None = None
    node_list: str | None = None
    array_job_id: str | None = None
    array_index: str | None = None
    restart_count: str | None = None
    cluster: str | None = None
    partition: str | None = None

    @classmethod
    def read(cls, environ: Mapping[str, str] | None = None) -> JobEnv:
        env = os.environ if environ is None else environ
        values = [env.get(name) or None for name in NAMES]
        return cls(*values)
