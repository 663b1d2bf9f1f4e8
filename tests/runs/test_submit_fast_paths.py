"""The fast paths of a sweep's submit write exactly what the straightforward code wrote.

Submitting a 1,000-model sweep spent most of its time in PyYAML's representer, in
dataclasses.asdict and in character loops (benchmarks/sweep_submit.py measures it). Each
shortcut is checked here against the code it replaced, on inputs where they could differ.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.runs import configs

from hpceval.config.yamlio import dumps
from hpceval.runs.rundir import config_dict, prepare_run, redacted, unique_keys, write_run
from hpceval.tasks.command import substitute_runtime_values

TRICKY = ["", " lead", "trail ", "x\ny", "a\n\n  b\n", "'q'", '"dq"', "a: b", "- item", "#c",
          "1:00:00", "1e-5", "0o17", "yes", "null", "é ü 中", "tab\there", "\\back", "x" * 200,
          "word " * 40, "|", ">", "{a: 1}", "[1]", "*alias", "&anchor", "!tag", "%", "@", "`"]


def nest(value: Any) -> dict[str, Any]:
    return {"a": {"b": {"c": value, "d": [value, {"e": value}]}, "f": {}, "g": []},
            "h": value, "weird key!": {"i": value}, "k": {1: value}}


@pytest.mark.parametrize("value", [*TRICKY, 0, 1.5, True, None, [], {}])
def test_dumps_writes_what_one_dump_writes(value: Any) -> None:
    data = nest(value)
    text = dumps(data)
    assert yaml.safe_load(text) == data
    assert text == yaml.safe_dump(data, sort_keys=False)
    assert dumps(data) == text  # the second time from the memo: the same text


def test_plain_config_is_redacted_asdict(tmp_path: Path) -> None:
    resolved = configs(tmp_path, 2)[0]
    spec = dataclasses.replace(resolved.spec, target=dataclasses.replace(
        resolved.spec.target, api_endpoint=dataclasses.replace(
            resolved.spec.target.api_endpoint, url="https://user:pw@example.com/v1")))
    resolved = dataclasses.replace(resolved, spec=spec)
    assert config_dict(resolved) == redacted(dataclasses.asdict(spec))
    assert "pw@" not in dumps(config_dict(resolved))


def test_sweep_run_yaml_is_one_dump_of_every_model(tmp_path: Path) -> None:
    run = prepare_run(configs(tmp_path, 3))
    write_run(run)
    top = {"sweep": [m.key for m in run.models],
           "models": {m.key: config_dict(m.resolved) for m in run.models}}
    text = (run.run_dir / "run.yaml").read_text()
    assert text == yaml.safe_dump(top, sort_keys=False)
    for m in run.models:
        own = (run.run_dir / "models" / m.key / "run.yaml").read_text()
        assert own == yaml.safe_dump(config_dict(m.resolved), sort_keys=False)


def test_unique_keys_still_number_clashes(tmp_path: Path) -> None:
    one = configs(tmp_path, 2)[0]
    assert unique_keys([one, one, one]) == ["model-00", "model-00-2", "model-00-3"]


@pytest.mark.parametrize("text", ["plain words", "a 'b' \"c\" \\d", "'", "\\", "x" * 500])
def test_no_token_text_is_unchanged(text: str) -> None:
    assert substitute_runtime_values(text) == text


def test_nul_in_a_hand_built_config_is_still_refused(tmp_path: Path) -> None:
    from hpceval.config.errors import ConfigError
    from hpceval.render.job import _reject_nul

    spec = configs(tmp_path)[0].spec
    bad = dataclasses.replace(spec, deployment=dataclasses.replace(
        spec.deployment, served_model_name="a\x00b"))
    with pytest.raises(ConfigError, match=r"deployment\.served_model_name"):
        _reject_nul(bad, "")
    _reject_nul(dataclasses.replace(spec, deployment=dataclasses.replace(
        spec.deployment, served_model_name="a\\x00b")), "")  # backslash-x00 text is no NUL
