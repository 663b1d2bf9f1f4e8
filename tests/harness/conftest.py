"""Fixtures for the harness tests: an isolated catalogue home, and the lm-eval prerequisites."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.lm_eval_env import require_lm_eval

from hpceval.tasks.loader import clear_memory_cache

# Facts collect reads from the job environment; a developer shell inside an allocation must not
# leak its own into the tests.
JOB_ENV_PREFIXES = ("SLURM_", "HPCEVAL_")


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Catalogue cache/config homes in tmp_path, no user catalogues, no job environment."""
    for name in list(os.environ):
        if name.startswith(JOB_ENV_PREFIXES):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / "config"))
    clear_memory_cache()
    yield tmp_path
    clear_memory_cache()


@pytest.fixture(scope="session")
def lm_eval_ready() -> None:
    require_lm_eval()
