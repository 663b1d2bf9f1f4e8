"""A config error's fix names a value the key accepts (within its minimum and maximum)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from hpceval.cli.main import cli

RUN = """\
defaults:
- execution: local-dev
execution:
  output_dir: {out}
deployment:
  type: command
  command: python -m server --port $PORT
  served_model_name: tiny
evaluation:
  tasks:
  - name: ifeval
"""


def _error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, override: str) -> str:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    run_file = tmp_path / "run.yaml"
    run_file.write_text(RUN.format(out=tmp_path / "out"))
    result = CliRunner().invoke(cli, ["submit", "--dry-run", str(run_file), "-o", override])
    assert result.exit_code == 2, result.output
    (line,) = [ln for ln in result.stderr.splitlines() if "config error" in ln]
    return line


@pytest.mark.parametrize(("override", "fix"), [
    ("deployment.port=8.5", "deployment.port: 1024"),  # 8 would be below the minimum
    ("deployment.port=99999999999999999999", "use 65535 or less"),
    ("deployment.port=70000", "use 65535 or less"),
    ("execution.nodes=0", "use 1 or more"),
    ("execution.nodes=x", "execution.nodes: 8"),
])
def test_fix_names_a_valid_value(override: str, fix: str, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    line = _error(tmp_path, monkeypatch, override)
    assert fix in line.split("fix:", 1)[1], line
