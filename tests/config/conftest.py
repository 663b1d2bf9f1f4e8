from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_sinfo import no_accounting_on_path


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No user profiles, site variables or accounting database (the dev cluster's QOS grants
    and limits) leak in from the machine running the tests."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setenv("SCRATCH", "/scratch/alice")
    monkeypatch.setenv("WORK", "/work/alice")
    monkeypatch.setenv("USER", "alice")
    monkeypatch.delenv("HPCEVAL_PROFILE_PATH", raising=False)
    monkeypatch.delenv("HPCEVAL_PROFILE", raising=False)
    with no_accounting_on_path(tmp_path / "no-accounting-bin", monkeypatch):
        yield


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
