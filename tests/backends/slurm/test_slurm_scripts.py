"""The cluster and test-runner shell scripts stay shellcheck-clean (CI runs them as root)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = [
    ROOT / "scripts/slurm/start-cluster.sh",
    ROOT / "scripts/slurm/stop-cluster.sh",
    ROOT / "scripts/slurm/verify.sh",
    ROOT / "scripts/slurm/net.sh",
    ROOT / "scripts/slurm/start-node.sh",
    ROOT / "scripts/slurm/node-tmp.sh",
    ROOT / "scripts/run-tests.sh",
    ROOT / "scripts/demo.sh",
    ROOT / "scripts/lib/env.sh",
    ROOT / "scripts/smollm2/install.sh",
    ROOT / ".ci/run",
]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_shellcheck_clean(script: Path) -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed (scripts/run-tests.sh installs it)")
    result = subprocess.run(
        # -x from the repository root: follow `source scripts/lib/env.sh` as the scripts do
        ["shellcheck", "-x", "--shell=bash", str(script.relative_to(ROOT))],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
