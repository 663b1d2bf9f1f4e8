"""The fake sinfo on PATH, for the doctor's tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from doctor_helpers import SINFO

from hpceval.backends.slurm.partitions import partition_info


@pytest.fixture
def sinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sinfo").write_text(SINFO)
    (bin_dir / "sinfo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    partition_info.cache_clear()
    yield bin_dir / "calls"
    partition_info.cache_clear()
