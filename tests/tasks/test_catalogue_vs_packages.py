"""The shipped catalogue against the real framework.yml files of the eval-factory harness
packages installed here (scripts/evalfactory/install.sh): the same task ids, endpoint types the
package supports, and `hpceval tasks discover VENV` reads them all and finds nothing missing.

A harness package upgrade that adds, renames or re-types a task fails here until the catalogue
follows it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpceval.staging.container import read_installed_frameworks
from hpceval.staging.discover import match_harness, parse_framework
from hpceval.tasks import load_catalogue

# the harness packages install.sh pins; each must be found, so a failed install cannot shrink
# what this test compares
EXPECTED = {"bfcl", "ifbench", "lm-evaluation-harness", "simple_evals"}


def _supported(config: dict[str, Any]) -> list[str]:
    value = config.get("supported_endpoint_types") or []
    return [value] if isinstance(value, str) else list(value)


def _package_tasks(text: str) -> tuple[dict[str, list[str]], list[str]]:
    """{eval type: supported endpoint types} and the framework's default endpoint types."""
    fdf = yaml.safe_load(text)
    base = (fdf.get("defaults") or {}).get("config") or {}
    out: dict[str, list[str]] = {}
    for evaluation in fdf["evaluations"]:
        config = ((evaluation.get("defaults") or {}).get("config")) or {}
        out[str(config["type"])] = _supported(config) or _supported(base)
    return out, _supported(base)


@pytest.fixture(autouse=True)
def _own_catalogue_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no user catalogue files
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("HPCEVAL_TASKS_PATH", raising=False)


def test_catalogue_agrees_with_the_installed_framework_files(evalfactory_venv: Path) -> None:
    catalogue = load_catalogue()
    compared: set[str] = set()
    problems: list[str] = []
    for path, text in read_installed_frameworks(evalfactory_venv):
        framework = parse_framework(text, path)
        harness = match_harness(framework, catalogue, "", None, only_framework=False)
        assert harness is not None, f"{path}: harness {framework['name']} not in the catalogue"
        compared.add(harness.name)
        package, defaults = _package_tasks(text)
        ours = {t.task_id: t for t in catalogue.tasks if t.harness == harness.name}
        for missing in sorted(set(package) - set(ours)):
            problems.append(f"{harness.name}: {missing} is in {path}, not in the catalogue")
        for extra in sorted(set(ours) - set(package)):
            problems.append(f"{harness.name}: {extra} is in the catalogue, not in {path}")
        for task_id in sorted(set(ours) & set(package)):
            endpoint = ours[task_id].endpoint_type
            if package[task_id] and endpoint not in package[task_id]:
                problems.append(f"{harness.name}.{ours[task_id].name}: endpoint_type {endpoint}"
                                f", the package supports {package[task_id]}")
        if defaults and harness.default_endpoint_type not in defaults:
            problems.append(f"{harness.name}: default_endpoint_type "
                            f"{harness.default_endpoint_type}, the package's default {defaults}")
        # discover's own reading of the file: every evaluation becomes a task
        assert framework["skipped"] == [], framework["skipped"]
        assert len(framework["tasks"]) == len(package)
    assert compared >= EXPECTED, f"harness packages not found in {evalfactory_venv}"
    assert problems == []


def test_discover_reads_the_venv_and_finds_nothing_missing(evalfactory_venv: Path,
                                                           tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "hpceval.cli.main", "tasks", "discover",
                          str(evalfactory_venv), "--out-dir", str(tmp_path / "found")],
                         capture_output=True, text=True, timeout=300, check=False,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert out.returncode == 0, out.stderr
    for harness in EXPECTED:
        assert f"harness {harness}: 0 task(s) added" in out.stdout, out.stdout
    assert "skipped" not in out.stdout
    assert not (tmp_path / "found").exists()  # nothing to add: nothing written
