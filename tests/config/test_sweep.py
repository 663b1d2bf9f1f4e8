"""A run file's models: list becomes one validated configuration per model."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpceval.config import ConfigError, load_config, load_run

BASE = ["execution.output_dir=/runs", "evaluation.tasks=[ifeval]", "deployment.type=vllm",
        "deployment.runtime=host"]


def test_glob_strings_and_entries(tmp_path: Path) -> None:
    for step in ("step_2", "step_1"):
        (tmp_path / step).mkdir()
    models = (f"+models=[{tmp_path}/step_*, /m/llama-8b, "
              "{name: qwen, hf_model_handle: Qwen/Q, deployment: {tensor_parallel_size: 4}}]")
    runs = load_run(None, [*BASE, models])
    assert [r.spec.deployment.served_model_name for r in runs] == [
        "step_1", "step_2", "llama-8b", "qwen"]
    assert runs[0].spec.deployment.checkpoint_path == str(tmp_path / "step_1")
    assert runs[3].spec.deployment.checkpoint_path is None
    assert runs[3].layout.gpus_per_instance == 4
    assert runs[2].composed.source_of("deployment.checkpoint_path") == "models[1]"


def test_external_endpoints_sweep() -> None:
    runs = load_run(None, ["execution.output_dir=/runs", "evaluation.tasks=[ifeval]",
                           "+models=[{name: a, url: 'http://h1/v1'}, "
                           "{name: b, url: 'http://h2/v1', model_id: big}]"])
    assert [(r.spec.target.api_endpoint.url, r.spec.target.api_endpoint.model_id)
            for r in runs] == [("http://h1/v1", "a"), ("http://h2/v1", "big")]


def test_every_model_is_validated_and_named() -> None:
    with pytest.raises(ConfigError) as info:
        load_run(None, [*BASE, "+models=[/m/a, {name: b, checkpoint_path: /m/b, "
                               "deployment: {tensor_parallel_size: 3}}]"])
    assert [i.path for i in info.value.issues] == ["models[1]: deployment"]


@pytest.mark.parametrize(("models", "path"), [
    ("[]", "models"),
    ("[{nam: x}]", "models[0].nam"),
    ("[/nonexistent/step_*]", "models[0].glob"),
    ("[/m/a, /other/a]", "models"),
])
def test_bad_model_lists(models: str, path: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_run(None, [*BASE, f"+models={models}"])
    assert info.value.issues[0].path == path


def test_load_config_refuses_a_sweep() -> None:
    with pytest.raises(ConfigError, match="sweep of 2 models"):
        load_config(None, [*BASE, "+models=[/m/a, /m/b]"])
