"""Task catalogue test fixtures: an isolated cache/config home, and the built-in catalogue."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hpceval.tasks import Catalogue
from hpceval.tasks.loader import build_index, catalogue_files, clear_memory_cache


@pytest.fixture(scope="session")
def builtin() -> Catalogue:
    """The shipped catalogue only (no user files), parsed once for the whole session."""
    return Catalogue.from_index(build_index(catalogue_files([])))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point the cache and config homes at tmp_path and forget any in-process index."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("HPCEVAL_TASKS_PATH", raising=False)
    monkeypatch.delenv("HPCEVAL_CACHE_DIR", raising=False)  # it would win over XDG_CACHE_HOME
    clear_memory_cache()
    yield tmp_path
    clear_memory_cache()
