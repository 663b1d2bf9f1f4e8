"""submit stops before anything is written or queued when preflight finds a problem."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from hpceval.cli.main import cli


@pytest.fixture
def sbatch_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake sbatch first on PATH that only records that it was called."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "sbatch-calls"
    fake = bin_dir / "sbatch"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\necho 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return calls


@pytest.mark.parametrize(("overrides", "key", "fix"), [
    (["deployment.type=vllm", "deployment.runtime=host", "deployment.checkpoint_path=/no/ckpt",
      "deployment.served_model_name=m"], "deployment.checkpoint_path", "shared storage"),
    (["execution.container_runtime=apptainer", "execution.image_dir={tmp}/sif",
      "deployment.type=none", "target.api_endpoint.url=http://h/v1",
      "target.api_endpoint.model_id=m"], "image", "hpceval stage"),
])
def test_submit_refuses_before_queueing(overrides: list[str], key: str, fix: str,
                                        tmp_path: Path, sbatch_calls: Path) -> None:
    out = tmp_path / "runs"
    args = ["submit", "--profile", "local-dev", "-o", f"execution.output_dir={out}",
            "-o", "evaluation.tasks=[ifeval]"]
    for ov in overrides:
        args += ["-o", ov.format(tmp=tmp_path)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert key in result.stderr and fix in result.stderr
    assert not sbatch_calls.exists()
    assert not out.exists()


def test_missing_secret_is_named_not_shown(tmp_path: Path, sbatch_calls: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("OTHER_SECRET", "s3cr3t-value")
    out = tmp_path / "runs"
    result = CliRunner().invoke(cli, [
        "submit", "--profile", "local-dev", "-o", f"execution.output_dir={out}",
        "-o", "evaluation.tasks=[{name: ifeval, env_vars: {HF_TOKEN: host:HF_TOKEN}}]",
        "-o", "deployment.type=none", "-o", "target.api_endpoint.url=http://h/v1",
        "-o", "target.api_endpoint.model_id=m"])
    assert result.exit_code == 2
    assert "HF_TOKEN" in result.stderr and "s3cr3t-value" not in result.output
    assert not sbatch_calls.exists() and not out.exists()
