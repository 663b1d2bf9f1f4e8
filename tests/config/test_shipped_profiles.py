"""Every shipped profile resolves, and every key in it carries a comment for admins."""

from __future__ import annotations

import re
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


def test_shipped_vllm_images_are_the_version_the_flags_are_checked_against() -> None:
    # The parser check (tests/render/test_vllm_args.py) and the dev cluster's real vLLM run the
    # version hpceval.render.VLLM_VERSION names; a profile pinning another image would serve
    # with flags nobody checked.
    from hpceval.render import VLLM_VERSION

    tags = {(path.name, tag) for path in site_configs_dir().rglob("*.yaml")
            for tag in re.findall(r"vllm-openai[:_]v?([0-9][0-9A-Za-z.]*?)(?:\.sif)?(?=\s|$)",
                                  path.read_text())}
    assert tags, "no shipped profile pins a vLLM image"
    assert {tag for _, tag in tags} == {VLLM_VERSION}, sorted(tags)
