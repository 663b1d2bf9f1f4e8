"""Every malformed config exits 2 with one error line that names the key, and writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from hpceval.cli.main import cli

CASES = yaml.safe_load((Path(__file__).parents[1] / "data" / "bad-configs.yaml").read_text())


def test_there_are_at_least_fifty_cases() -> None:
    assert len(CASES) >= 50
    assert len({c["name"] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_bad_config_exits_2_naming_the_key(case: dict[str, str], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    # The task catalogue's index is a cache, not output: keep it outside the checked folder.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path.parent / f"{tmp_path.name}-cache"))
    run_file = tmp_path / "run.yaml"
    run_file.write_text(case["config"])
    before = sorted(tmp_path.rglob("*"))
    result = CliRunner().invoke(cli, ["submit", "--dry-run", str(run_file)])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("hpceval: config error")]
    assert len(lines) == 1, result.stderr
    assert f" {case['key']}" in lines[0] or f"{case['key']}:" in lines[0], lines[0]
    assert "fix:" in lines[0]
    assert sorted(tmp_path.rglob("*")) == before  # nothing written
