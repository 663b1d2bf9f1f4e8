"""Fixtures for the controller tests: a tiny catalogue, isolated caches, a counting fake Slurm."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from run_helpers import ASK_HARNESS, CATALOGUE, FakeSlurm


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("env")
    (root / "catalogue").mkdir()
    (root / "catalogue" / "ut.yaml").write_text(CATALOGUE)
    monkeypatch.setenv("HPCEVAL_TASKS_PATH", os.pathsep.join([str(root / "catalogue"),
                                                             str(ASK_HARNESS)]))
    monkeypatch.setenv("XDG_CACHE_HOME", str(root / "xdg-cache"))
    monkeypatch.setenv("HPCEVAL_CACHE_DIR", str(root / "hpceval-cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(root / "xdg-config"))
    monkeypatch.delenv("HPCEVAL_PROFILE", raising=False)
    monkeypatch.delenv("HPCEVAL_OUTPUT_DIRS", raising=False)
    yield root


@pytest.fixture
def fake() -> FakeSlurm:
    return FakeSlurm()
