"""Backend.job_runs, as a cache compaction inside a job asks it (no client: squeue itself):
a running job may hold a lease, an ended or unknown one does not, and a scheduler that cannot
answer leaves the lease to age out."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hpceval.backends import backend_for

SQUEUE = """#!/bin/sh
case "$*" in
  *--jobs\\ 11*) echo RUNNING ;;
  *--jobs\\ 12*) echo CONFIGURING ;;
  *--jobs\\ 13*) echo PENDING ;;
  *--jobs\\ 14*) echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1 ;;
  *) echo "slurm_load_jobs error: Unable to contact slurm controller" >&2; exit 1 ;;
esac
"""


def test_slurm_answers_from_its_queue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "squeue"
    fake.write_text(SQUEUE)
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    slurm = backend_for("slurm")
    assert slurm.job_runs("11") is True and slurm.job_runs("12") is True
    assert slurm.job_runs("13") is False  # queued: no process yet
    assert slurm.job_runs("14") is False  # ended long ago: Slurm no longer knows it
    assert slurm.job_runs("15") is None  # the controller is down: cannot tell


def test_local_leaves_it_to_the_host_check() -> None:
    assert backend_for("local").job_runs("local-123") is None
