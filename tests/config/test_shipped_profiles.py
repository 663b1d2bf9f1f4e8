"""Every shipped profile resolves, and every key in it carries a comment for admins."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from hpceval.cli.main import cli
from hpceval.resources import site_configs_dir

PROFILES = sorted(p.stem for p in site_configs_dir().glob("*.yaml"))


def test_ships_local_dev_and_three_site_shapes() -> None:
    assert {"local-dev", "slurm", "local", "offline-modules", "qos-reservation"} <= set(PROFILES)


@pytest.mark.parametrize("name", PROFILES)
def test_config_show_works(name: str) -> None:
    result = CliRunner().invoke(cli, ["config", "show", "--profile", name, "-o",
                                      "evaluation.tasks=[ifeval]", "-o", "deployment.type=none",
                                      "-o", "target.api_endpoint.url=http://h:1/v1", "-o",
                                      "target.api_endpoint.model_id=m"])
    assert result.exit_code == 0, result.output
    assert f"profile {name}" in result.output


@pytest.mark.parametrize("path", sorted(site_configs_dir().rglob("*.yaml")), ids=str)
def test_every_key_is_commented(path: Path) -> None:
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "-")) or stripped.endswith(":"):
            continue
        if stripped.startswith("description:"):
            continue
        assert "#" in line, f"{path.name}: key without a comment: {line!r}"
