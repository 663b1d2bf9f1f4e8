"""The fake sinfo on PATH, for the doctor's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from doctor_helpers import SINFO
from fake_sinfo import fake_sinfo_on_path


@pytest.fixture
def sinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with fake_sinfo_on_path(tmp_path / "bin", SINFO, monkeypatch) as calls:
        yield calls
