"""Helpers for the render tests (imported by name: this folder has no __init__.py)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpceval.config import ResolvedConfig, load_config, load_run
from hpceval.render import JobContext

DATA = Path(__file__).parent / "data"
SITE_ENV = {"SCRATCH": "/scratch/alice", "WORK": "/work/alice", "HOME": "/home/alice",
            "USER": "alice"}


def resolve(profile: str, run: dict[str, Any], tmp_path: Path,
            overrides: list[str] | None = None) -> ResolvedConfig:
    run_file = tmp_path / "run.yaml"
    run_file.write_text(yaml.safe_dump(run, sort_keys=False))
    if "models" in run:  # a sweep: its first model's job
        return load_run(run_file, overrides or [], profile=profile, check_environment=False)[0]
    return load_config(run_file, overrides or [], profile=profile, check_environment=False)


def context(resolved: ResolvedConfig, model_key: str = "demo-model") -> JobContext:
    run_dir = f"{resolved.spec.execution.output_dir}/inv-0123456789abcdef"
    return JobContext(run_dir, "inv-0123456789abcdef", model_key,
                      "/shared/hpceval/venv/bin/python", hpceval_version="0.1.0")


RenderFn = Callable[..., str]


def shellcheck(paths: list[Path]) -> None:
    """Fail with shellcheck's findings; skip (with the reason) only if it is not installed."""
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck; "
                    "scripts/run-tests.sh installs it)")
    proc = subprocess.run(["shellcheck", "--shell=bash", *map(str, paths)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def bash_syntax(path: Path) -> None:
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"bash -n {path}: {proc.stderr}"


def backend_env(script: str) -> str:
    """The rendered script's env partial (templates/backends/<kind>/env.j2): the block that
    sets HPCEVAL_JOB_ID and the other neutral names, for a test that runs a piece of the
    script with the scheduler's variables in its environment."""
    start = script.index("\n{\n  export HPCEVAL_JOB_ID=") + 1
    return script[start:script.index("\n}\n", start) + 3]


# A vLLM model served on a cluster, and a run of one task against it (test_site_servers.py,
# test_server_images.py).
SERVER_MODEL = {"type": "vllm", "checkpoint_path": "/models/m", "served_model_name": "m",
                "tensor_parallel_size": 8}
SERVER_RUN: dict[str, Any] = {"deployment": SERVER_MODEL,
                              "evaluation": {"tasks": [{"name": "boxed_chat"}]}}
