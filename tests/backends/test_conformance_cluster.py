"""The backend conformance tests (test_conformance.py) for the Slurm backend on the real dev
cluster: a one-minute sleeper submitted with sbatch, listed by squeue/sacct, cancelled with
scancel and found CANCELLED in sacct. ~4 s on the dev cluster (sacct lags the controller)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_conformance import (  # the same tests, with this module's rig
    Rig,
    test_a_backend_declares_its_name_capabilities_and_words,
    test_a_job_the_backend_never_ran_is_not_listed,
    test_submit_query_cancel_query,
    test_usage_of_an_ended_job_and_of_one_never_run,
)

from hpceval.backends import JobEntry, JobInfo, JobRequest, JobUsage
from hpceval.backends.slurm.backend import SlurmBackend
from hpceval.backends.slurm.client import CommandSlurmClient
from hpceval.phases import UNKNOWN

pytestmark = pytest.mark.slurm
UNSEEN = JobInfo(UNKNOWN)
__all__ = ["test_a_backend_declares_its_name_capabilities_and_words",
           "test_a_job_the_backend_never_ran_is_not_listed", "test_submit_query_cancel_query",
           "test_usage_of_an_ended_job_and_of_one_never_run"]


@pytest.fixture
def rig(tmp_path: Path, slurm_cluster: CommandSlurmClient) -> Rig:
    (tmp_path / "job.sbatch").write_text(
        "#!/bin/bash\n#SBATCH --job-name=hpceval-conformance\n#SBATCH --time=1\n"
        f"#SBATCH --output={tmp_path}/slurm-%j.log\nsleep 60\n")
    (tmp_path / "short.sbatch").write_text(
        "#!/bin/bash\n#SBATCH --job-name=hpceval-conformance\n#SBATCH --time=1\n"
        f"#SBATCH --output={tmp_path}/slurm-%j.log\n#SBATCH --gres=gpu:2\nsleep 2\n")
    backend = SlurmBackend(slurm_cluster, min_interval_s=0.5)

    def short() -> tuple[JobEntry, JobUsage]:
        # a 2-second job on 2 of a node's (fake) GPUs, followed until sacct has its end
        (entry,) = backend.submit(tmp_path, JobRequest("short.sbatch"))
        deadline = time.monotonic() + 60
        while not backend.query([entry.id]).get(entry.id, UNSEEN).status.phase.terminal:
            assert time.monotonic() < deadline, "the short job did not end"
            time.sleep(1)
        return entry, JobUsage(entry.id, 2, 2, 1, True)

    return Rig(backend, tmp_path, JobRequest("job.sbatch"), wait_s=20.0, short=short)
