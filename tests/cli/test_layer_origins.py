"""`config show` and `submit` say where every layer came from, one short line each (review F2:
a profile found somewhere unexpected must not be used without a word): the site profile with
how it was found ($HPCEVAL_PROFILE_PATH), its `extends:` parent, the preset, the run file and
each -o, in merge order. `config show --json` and submit's standard output are unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from hpceval.cli.main import cli
from hpceval.resources import site_configs_dir

SHIPPED = site_configs_dir()


@pytest.fixture
def run_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    (site / "mysite.yaml").write_text(yaml.safe_dump({"extends": "local-dev"}))
    monkeypatch.setenv("HPCEVAL_PROFILE_PATH", str(site))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("HPCEVAL_PROFILE", raising=False)
    run = tmp_path / "runs" / "run.yaml"
    run.parent.mkdir()
    run.write_text(yaml.safe_dump({
        "defaults": [{"execution": "mysite"}, {"deployment": "none"}],
        "target": {"api_endpoint": {"url": "http://h/v1", "model_id": "m"}},
        "evaluation": {"tasks": ["ifeval"]}}))
    return run


def _expected(tmp_path: Path, run: Path) -> list[str]:
    return [
        f"profile local-dev: {SHIPPED / 'local-dev.yaml'} (shipped with hpceval; extends: "
        "parent of mysite)",
        f"profile mysite: {tmp_path / 'site' / 'mysite.yaml'} (found on $HPCEVAL_PROFILE_PATH; "
        "chosen by the run file's defaults)",
        f"preset none: {SHIPPED / 'deployment' / 'none.yaml'} (shipped with hpceval)",
        f"run file: {run}",
        f"-o: execution.output_dir={tmp_path / 'out'}",
        "-o: evaluation.tasks.ifeval.params.limit_samples=2",
    ]


OVERRIDES = ["-o", "execution.output_dir={out}", "-o",
             "evaluation.tasks.ifeval.params.limit_samples=2"]


def _args(tmp_path: Path) -> list[str]:
    return [a.format(out=tmp_path / "out") for a in OVERRIDES]


def test_config_show_lists_every_layer_with_its_origin(tmp_path: Path, run_file: Path) -> None:
    result = CliRunner().invoke(cli, ["config", "show", str(run_file), *_args(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    start = lines.index("# layers, later wins: default (schema)") + 1
    assert lines[start:start + 6] == [f"#   {line}" for line in _expected(tmp_path, run_file)]
    assert not lines[start + 6].startswith("#   ")
    shown = CliRunner().invoke(cli, ["config", "show", "--json", str(run_file),
                                     *_args(tmp_path)])
    assert set(json.loads(shown.stdout)) == {"config", "sources", "layout"}


def test_submit_prints_the_layers_on_stderr_only(tmp_path: Path, run_file: Path) -> None:
    result = CliRunner().invoke(cli, ["submit", "--dry-run", str(run_file), *_args(tmp_path)])
    assert result.exit_code == 0, result.output
    layers = [line.removeprefix("hpceval: layer: ") for line in result.stderr.splitlines()
              if line.startswith("hpceval: layer: ")]
    assert layers == _expected(tmp_path, run_file)
    assert "hpceval: layer" not in result.stdout


def test_a_profile_chosen_by_the_environment_says_so(tmp_path: Path, run_file: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """$HPCEVAL_PROFILE picks the profile when neither the run file nor --profile does: a
    variable set long ago in a shell profile must not choose silently."""
    run_file.write_text(yaml.safe_dump({"defaults": [{"deployment": "none"}]}))
    monkeypatch.setenv("HPCEVAL_PROFILE", "mysite")
    rest = ["-o", "target.api_endpoint.url=http://h/v1", "-o", "target.api_endpoint.model_id=m",
            "-o", "evaluation.tasks=[ifeval]"]
    result = CliRunner().invoke(cli, ["config", "show", str(run_file), *_args(tmp_path),
                                      *rest])
    assert result.exit_code == 0, result.output
    assert (f"#   profile mysite: {tmp_path / 'site' / 'mysite.yaml'} (found on "
            "$HPCEVAL_PROFILE_PATH; chosen by $HPCEVAL_PROFILE)") in result.stdout.splitlines()
    assert f"#   run file: {run_file}" in result.stdout.splitlines()  # only defaults: listed too
    chosen = CliRunner().invoke(cli, ["config", "show", "--profile", "local-dev", str(run_file),
                                      *_args(tmp_path), *rest])
    assert (f"#   profile local-dev: {SHIPPED / 'local-dev.yaml'} (shipped with hpceval; "
            "chosen by --profile)") in chosen.stdout.splitlines()
