"""A second uid for the shared-cluster tests: commands run as ``nobody``, in a scratch folder
both users can reach (pytest's tmp_path is private to root, 0700)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

NOBODY_UID = 65534
RUNUSER = shutil.which("runuser")


def as_nobody(*argv: str, timeout: float = 60) -> str:
    """Run argv as nobody; its standard output."""
    assert RUNUSER is not None, "shared_scratch() skips the test where runuser is missing"
    return subprocess.run([RUNUSER, "-u", "nobody", "--", *argv], check=True, timeout=timeout,
                          capture_output=True, text=True).stdout


@contextmanager
def shared_scratch(prefix: str) -> Iterator[Path]:
    """A 0755 folder under /tmp that nobody can reach, removed afterwards; skips the test
    unless this is root with runuser (the only way here to act as a second uid)."""
    if os.geteuid() != 0 or RUNUSER is None:
        pytest.skip("needs root and runuser to act as a second uid")
    base = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        base.chmod(0o755)
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)
