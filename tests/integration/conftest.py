"""Helpers for integration tests that submit real jobs to the local Slurm dev cluster."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from hpceval.slurm.client import CommandSlurmClient


@dataclass
class SlurmJobs:
    """Writes small sbatch scripts into a work dir the jobs can see, and submits them."""

    client: CommandSlurmClient
    workdir: Path

    def script(self, name: str, body: str, directives: tuple[str, ...] = ()) -> Path:
        lines = [
            "#!/bin/bash",
            f"#SBATCH --job-name={name}",
            f"#SBATCH --output={self.workdir}/{name}-%j.out",
            f"#SBATCH --chdir={self.workdir}",
            "#SBATCH --time=5",
            *(f"#SBATCH {d}" for d in directives),
            body,
        ]
        path = self.workdir / f"{name}.sbatch"
        path.write_text("\n".join(lines) + "\n")
        return path

    def submit(self, name: str, body: str, *directives: str) -> str:
        return self.client.submit(self.script(name, body, directives))

    def output(self, name: str, job_id: str) -> str:
        path = self.workdir / f"{name}-{job_id}.out"
        return path.read_text() if path.exists() else f"<no output file {shlex.quote(str(path))}>"


@pytest.fixture(scope="module")
def slurm_jobs(
    slurm_cluster: CommandSlurmClient, tmp_path_factory: pytest.TempPathFactory
) -> SlurmJobs:
    # Jobs run on this same machine (the dev cluster's nodes are local), so a tmp dir is shared.
    return SlurmJobs(slurm_cluster, tmp_path_factory.mktemp("slurm-jobs"))
