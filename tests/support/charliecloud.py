"""Charliecloud images for the jobs that run them on the dev cluster: scripts/charliecloud/
image.sh builds them (content-hashed, once per machine). Skips where ch-run, squashfuse,
mksquashfs or podman (root) is missing; with HPCEVAL_REQUIRE_CHARLIECLOUD=1 (CI) fails instead,
so a broken install never turns these jobs into silent skips."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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


def python_only_bin(work: Path) -> Path:
    """A PATH folder (``work``/bin) with this venv's Python (what the job and a host-side
    oracle run) and nothing else: no lm_eval, no vllm, so a job whose PATH starts with it
    and ends with the system's folders can only have run them from an image. A wrapper, not a
    link: a link outside the venv loses the venv."""
    folder = work / "bin"
    folder.mkdir()
    for name in ("python", "python3"):
        wrapper = folder / name
        wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
        wrapper.chmod(0o755)
    return folder
