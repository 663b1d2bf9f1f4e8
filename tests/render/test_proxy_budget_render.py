"""evaluation.proxy_budget reaches the in-job proxy as one --budget word the proxy accepts."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from render_helpers import bash_syntax, context, resolve

from hpceval.config.errors import ConfigError
from hpceval.contract import is_proxy_budget
from hpceval.job.proxy.cli import build_parser, config_from_args
from hpceval.job.proxy.config import ProxyConfig
from hpceval.render import render_job

MODEL = {"type": "vllm", "checkpoint_path": "/models/m", "served_model_name": "m",
         "runtime": "host"}


def rendered(tmp_path: Path, budget: str | None) -> str:
    evaluation: dict[str, object] = {"tasks": [{"name": "ifeval"}]}
    if budget is not None:
        evaluation["proxy_budget"] = budget
    resolved = resolve("slurm", {"evaluation": evaluation, "deployment": MODEL}, tmp_path)
    return render_job(resolved, context(resolved))


@pytest.mark.parametrize("budget", ["adaptive", "12"])
def test_budget_is_passed_and_parsed_by_the_proxy(tmp_path: Path, budget: str) -> None:
    text = rendered(tmp_path, budget)
    [line] = [ln.strip() for ln in text.splitlines()
              if ln.strip().startswith("PROXY_ARGS+=(--budget")]
    words = shlex.split(re.fullmatch(r"PROXY_ARGS\+=\((.*)\)", line).group(1))  # type: ignore[union-attr]
    args = build_parser().parse_args(["--port", "1", "--upstream", "http://127.0.0.1:9",
                                      "--cache-dir", "c", "--progress-file", "p", *words])
    assert config_from_args(args).budget == budget
    path = tmp_path / "job.sh"
    path.write_text(text)
    bash_syntax(path)


def test_default_passes_no_budget(tmp_path: Path) -> None:
    assert "--budget" not in rendered(tmp_path, None)


@pytest.mark.parametrize("budget", ["0", "lots", "-3", "8; rm -rf /"])
def test_a_bad_budget_names_the_key(tmp_path: Path, budget: str) -> None:
    with pytest.raises(ConfigError, match=r"evaluation\.proxy_budget"):
        rendered(tmp_path, budget)


@pytest.mark.parametrize("budget", ["off", "adaptive", "1", "12", "0", "-3", "lots", "", " 4"])
def test_the_config_and_the_proxy_take_the_same_budgets(tmp_path: Path, budget: str) -> None:
    """One rule (contract.is_proxy_budget) on both sides: what loads, the proxy starts with."""
    try:
        rendered(tmp_path, budget)
        loads = True
    except ConfigError:
        loads = False
    try:
        ProxyConfig(upstreams=("http://127.0.0.1:9",), budget=budget)
        starts = True
    except ValueError:
        starts = False
    assert loads == starts == is_proxy_budget(budget)
