"""The backend conformance tests (test_conformance.py) for the Slurm backend on the real dev
cluster: a one-minute sleeper submitted with sbatch, listed by squeue/sacct, cancelled with
scancel and found CANCELLED in sacct. ~4 s on the dev cluster (sacct lags the controller)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_conformance import (  # the same tests, with this module's rig
    Rig,
    test_a_backend_declares_its_name_capabilities_and_words,
    test_a_job_the_backend_never_ran_is_not_listed,
    test_submit_query_cancel_query,
)

from hpceval.backends import JobRequest
from hpceval.backends.slurm.backend import SlurmBackend
from hpceval.backends.slurm.client import CommandSlurmClient

pytestmark = pytest.mark.slurm
__all__ = ["test_a_backend_declares_its_name_capabilities_and_words",
           "test_a_job_the_backend_never_ran_is_not_listed", "test_submit_query_cancel_query"]


@pytest.fixture
def rig(tmp_path: Path, slurm_cluster: CommandSlurmClient) -> Rig:
    (tmp_path / "job.sbatch").write_text(
        "#!/bin/bash\n#SBATCH --job-name=hpceval-conformance\n#SBATCH --time=1\n"
        f"#SBATCH --output={tmp_path}/slurm-%j.log\nsleep 60\n")
    return Rig(SlurmBackend(slurm_cluster), tmp_path, JobRequest("job.sbatch"), wait_s=20.0)
