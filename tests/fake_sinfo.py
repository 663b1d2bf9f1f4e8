"""A strict fake `sinfo` first on PATH, for the tests of what hpceval learns from it. Its script
records its arguments in `calls` beside it; partition_info caches sinfo's answers per process,
so the cache is cleared before and after."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hpceval.backends.slurm.partitions import partition_info


@contextmanager
def fake_sinfo_on_path(bin_dir: Path, script: str,
                       monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """`script` as `bin_dir/sinfo`, first on PATH; yields the path of its `calls` file."""
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "sinfo").write_text(script)
    (bin_dir / "sinfo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    partition_info.cache_clear()
    try:
        yield bin_dir / "calls"
    finally:
        partition_info.cache_clear()
