"""Charliecloud images for the jobs that run them on the dev cluster: scripts/charliecloud/
image.sh builds them (content-hashed, once per machine). Skips where ch-run, squashfuse,
mksquashfs or podman (root) is missing; with HPCEVAL_REQUIRE_CHARLIECLOUD=1 (CI) fails instead,
so a broken install never turns these jobs into silent skips."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("ch-run", "squashfuse", "mksquashfs", "podman")


def unavailable(message: str) -> None:
    if os.environ.get("HPCEVAL_REQUIRE_CHARLIECLOUD") == "1":
        pytest.fail(f"HPCEVAL_REQUIRE_CHARLIECLOUD=1 but {message}")
    pytest.skip(message)


def image(role: str, venv: Path | str, *folders: Path | str) -> Path:
    """The SquashFS file of ``role`` (harness: lm_eval, server: vllm) over ``venv``'s packages,
    with ``folders`` as more mount points (ch-run 0.31 binds only onto folders the image has)."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        unavailable(f"cannot build or run a Charliecloud image here (missing: {missing}, "
                    f"root: {os.geteuid() == 0})")
    proc = subprocess.run(["bash", str(ROOT / "scripts/charliecloud/image.sh"), role,
                           str(venv), *map(str, folders)], capture_output=True, text=True,
                          timeout=1200, check=False)
    if proc.returncode != 0:
        unavailable(f"the {role} image did not build: {proc.stderr[-2000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])
