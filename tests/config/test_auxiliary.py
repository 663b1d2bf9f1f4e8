"""Auxiliary deployments (a judge): references, names and the GPU arithmetic of placing it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpceval.config import ConfigError, ResolvedConfig, load_config, load_run
from hpceval.config.layout import Layout
from tests.config.conftest import write

MODEL = {"type": "vllm", "runtime": "host", "checkpoint_path": "/m", "served_model_name": "m"}
JUDGE = {"type": "vllm", "runtime": "host", "checkpoint_path": "/j", "served_model_name": "j"}


def run(tmp_path: Path, *, judge: dict[str, Any] | None = None,
        model: dict[str, Any] | None = None, gpus: int = 8, nodes: int = 1,
        task: dict[str, Any] | None = None, evaluation_env: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None) -> ResolvedConfig:
    data: dict[str, Any] = {
        "execution": {"output_dir": "/runs", "gpus_per_node": gpus, "nodes": nodes,
                      "container_runtime": "none"},
        "deployment": {**MODEL, **(model or {})},
        "evaluation": {"tasks": [task or {"name": "ifeval"}],
                       "env_vars": evaluation_env or {}},
        **(extra or {}),
    }
    if judge is not None:
        data["auxiliary_deployments"] = {"judge": {**JUDGE, **judge}}
    path = write(tmp_path / "run.yaml", yaml.safe_dump(data))
    if "models" in data:
        return load_run(path, check_environment=False)[0]
    return load_config(path, check_environment=False)


def refused(tmp_path: Path, **kwargs: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        run(tmp_path, **kwargs)
    return str(caught.value)


# -- placement: GPU arithmetic ------------------------------------------------------------------

def test_own_node_is_added_to_the_job(tmp_path: Path) -> None:
    r = run(tmp_path, judge={"tensor_parallel_size": 4}, model={"tensor_parallel_size": 8})
    place = r.auxiliary["judge"]
    assert (place.first_node, place.gpu_offset) == (1, 0)
    assert place.layout == Layout(2, 4, 1, 2)  # fills its 8-GPU node: 2 x TP=4
    assert r.layout == Layout(1, 8, 1, 1)  # the model keeps its whole node
    from hpceval.config.aux_layout import job_nodes
    assert job_nodes(r.spec) == 2


def test_a_smaller_instance_count_is_honoured_on_own_nodes(tmp_path: Path) -> None:
    r = run(tmp_path, judge={"tensor_parallel_size": 2, "num_instances": 1})
    assert r.auxiliary["judge"].layout == Layout(1, 2, 1, 1)


def test_slice_of_the_models_node(tmp_path: Path) -> None:
    """The issue's example: 8 GPUs, judge TP=2, model DP=3 x TP=2."""
    r = run(tmp_path, judge={"num_nodes": 0, "tensor_parallel_size": 2},
            model={"tensor_parallel_size": 2})
    assert r.layout == Layout(3, 2, 1, 3)
    place = r.auxiliary["judge"]
    assert (place.first_node, place.gpu_offset, place.pin) == (0, 6, True)
    assert place.layout == Layout(1, 2, 1, 1)
    assert r.placement.pin  # the model pins its GPUs 0-5 now that it shares the node
    from hpceval.config.aux_layout import job_nodes
    assert job_nodes(r.spec) == 1


def test_an_explicit_model_dp_beside_a_slice_keeps_the_whole_node(tmp_path: Path) -> None:
    r = run(tmp_path, judge={"num_nodes": 0, "tensor_parallel_size": 2},
            model={"tensor_parallel_size": 2, "data_parallel_size": 3})
    assert r.spec.execution.gpus_per_node == 8 and r.layout == Layout(3, 2, 1, 3)
    text = refused(tmp_path, judge={"num_nodes": 0, "tensor_parallel_size": 2},
                   model={"tensor_parallel_size": 2, "data_parallel_size": 2})
    assert "deployment.data_parallel_size: is 2, but 1 node(s) x 6 GPUs with TP=2" in text, text
    assert "(the node's other 2 GPU(s) serve auxiliary deployments)" in text, text


@pytest.mark.parametrize(("kwargs", "key", "message"), [
    ({"judge": {"num_nodes": 0, "tensor_parallel_size": 2}, "nodes": 2,
      "model": {"tensor_parallel_size": 8}},
     "auxiliary_deployments.judge.num_nodes", "but the model has execution.nodes=2"),
    ({"judge": {"num_nodes": 0, "tensor_parallel_size": 16}},
     "auxiliary_deployments.judge.num_nodes", "TP=16 x PP=1 = 16 GPUs per instance is more "
     "than a 8-GPU node"),
    ({"judge": {"num_nodes": 0, "tensor_parallel_size": 4, "num_instances": 2},
      "model": {"tensor_parallel_size": 2}},
     "auxiliary_deployments.judge.num_nodes", "the judge takes 8 of the node's 8 GPUs "
     "(2 instance(s) x 4), leaving 0 for the model, which needs 2 per instance"),
    ({"judge": {"num_nodes": 0, "tensor_parallel_size": 4},
      "model": {"tensor_parallel_size": 8}},
     "auxiliary_deployments.judge.num_nodes", "leaving 4 for the model, which needs 8"),
    ({"judge": {"tensor_parallel_size": 4, "num_instances": 3}},
     "auxiliary_deployments.judge.num_instances", "is 3, but 1 node(s) x 8 GPUs with TP=4 x "
     "PP=1 = 4 GPUs per instance hold 2 instance(s) (12 GPUs needed, 8 there)"),
    ({"judge": {"tensor_parallel_size": 3}},
     "auxiliary_deployments.judge.tensor_parallel_size", "leaves 2 GPU(s) idle"),
    ({"judge": {"tensor_parallel_size": 2}, "gpus": 0, "model": {"type": "none"},
      "extra": {"target": {"api_endpoint": {"url": "http://api/v1"}}}},
     "execution.gpus_per_node", "is 0, but auxiliary_deployments.judge is a vllm server"),
])
def test_placement_refusals_carry_the_numbers(tmp_path: Path, kwargs: dict[str, Any], key: str,
                                              message: str) -> None:
    text = refused(tmp_path, **kwargs)
    assert f"{key}: " in text and message in text, text


# -- kinds and names ----------------------------------------------------------------------------

@pytest.mark.parametrize(("judge", "key", "message"), [
    ({"type": "none", "checkpoint_path": None}, "auxiliary_deployments.judge.url",
     "required when its type is none"),
    ({"type": "none", "url": "judge:8000"}, "auxiliary_deployments.judge.url",
     "is not an http(s) URL"),
    ({"type": "none", "url": "https://u:pw@judge/v1"}, "auxiliary_deployments.judge.url",
     "user:password@"),
    ({"url": "http://judge/v1"}, "auxiliary_deployments.judge.url", "but the type is vllm"),
    ({"api_key_name": "K"}, "auxiliary_deployments.judge.api_key_name",
     "a served judge requires the job's own token"),
    ({"checkpoint_path": None}, "auxiliary_deployments.judge.checkpoint_path",
     "exactly one of checkpoint_path and hf_model_handle"),
    ({"served_model_name": None}, "auxiliary_deployments.judge.served_model_name",
     "no model name"),
    ({"env_prefix": "MODEL"}, "auxiliary_deployments.judge.env_prefix", "'MODEL' is reserved"),
    ({"env_prefix": "a-b"}, "auxiliary_deployments.judge.env_prefix", "not a variable name"),
    ({"multi_node_backend": "ray"}, "auxiliary_deployments.judge.multi_node_backend",
     "ray is for the model under test only"),
    ({"runtime": "container"}, "auxiliary_deployments.judge.runtime",
     "execution.container_runtime is none"),
])
def test_judge_refusals(tmp_path: Path, judge: dict[str, Any], key: str, message: str) -> None:
    text = refused(tmp_path, judge=judge)
    assert f"{key}: " in text and message in text, text


def test_names_must_be_identifiers_and_differ_beyond_case(tmp_path: Path) -> None:
    text = refused(tmp_path, extra={"auxiliary_deployments": {
        "my-judge": JUDGE, "guard": JUDGE, "GUARD": {**JUDGE, "env_prefix": "G2"}}})
    assert "auxiliary_deployments.my-judge: is not a name the job can use" in text
    assert "auxiliary_deployments.guard: differs from auxiliary_deployments.GUARD only in case" \
        in text


def test_on_one_machine_a_judge_shares_the_models_node(tmp_path: Path) -> None:
    text = refused(tmp_path, judge={}, extra={"execution": {
        "type": "local", "output_dir": "/runs", "gpus_per_node": 8, "container_runtime": "none"}})
    assert ("auxiliary_deployments.judge.num_nodes: is 1, but execution.type local runs on this "
            "one machine") in text, text
    r = run(tmp_path, judge={"num_nodes": 0, "tensor_parallel_size": 2},
            model={"tensor_parallel_size": 2}, extra={"execution": {
                "type": "local", "output_dir": "/runs", "gpus_per_node": 8,
                "container_runtime": "none"}})
    assert r.auxiliary["judge"].gpu_offset == 6


def test_scope_sweep_on_one_model_is_served_in_its_job(tmp_path: Path) -> None:
    r = run(tmp_path, judge={"scope": "sweep"})
    assert r.spec.auxiliary_deployments["judge"].scope == "job" and "judge" in r.auxiliary
    assert any("the judge is served in its job" in n for n in r.composed.notes)


def test_scope_sweep_in_a_sweep_is_not_served_in_the_elements(tmp_path: Path) -> None:
    r = run(tmp_path, judge={"scope": "sweep"}, extra={"models": ["/a", "/b"]})
    assert r.spec.auxiliary_deployments["judge"].scope == "sweep" and r.auxiliary == {}
    from hpceval.config.aux_layout import job_nodes
    assert job_nodes(r.spec) == 1  # the judge's nodes are its own job's


def test_a_sweeps_judge_has_nodes_of_its_own(tmp_path: Path) -> None:
    text = refused(tmp_path, judge={"scope": "sweep", "num_nodes": 0},
                   extra={"models": ["/a", "/b"]})
    assert ("auxiliary_deployments.judge.num_nodes: is 0 (a slice of the model's node), but "
            "scope sweep runs the judge as a job of its own") in text, text


def test_external_judge_key_must_be_set_by_name(tmp_path: Path) -> None:
    data = {"execution": {"output_dir": "/runs", "container_runtime": "none"},
            "deployment": MODEL, "evaluation": {"tasks": ["ifeval"]},
            "auxiliary_deployments": {"judge": {"type": "none", "url": "https://j/v1",
                                                "model_id": "x", "api_key_name": "JKEY"}}}
    path = write(tmp_path / "run.yaml", yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=re.escape(
            "auxiliary_deployments.judge.api_key_name: $JKEY is not set")):
        load_config(path, environ={})
    assert load_config(path, environ={"JKEY": "k"}).auxiliary == {}  # nothing served


# -- references ---------------------------------------------------------------------------------

def test_references_resolve_in_params_and_env(tmp_path: Path) -> None:
    task = {"name": "simple_evals.AIME_2025", "params": {"extra": {"judge": {
        "url": "auxiliary_deployments.judge.chat_url",
        "model_id": "auxiliary_deployments.judge.model_id",
        "nested": ["x auxiliary_deployments.judge.url y"]}}},
        "env_vars": {"J": "auxiliary_deployments.judge.completions_url"}}
    r = run(tmp_path, judge={"env_prefix": "GRADER"}, task=task,
            extra={"execution": {"output_dir": "/runs", "container_runtime": "none"}})
    command = r.tasks[0].command
    assert "config.params.extra.judge.model_id=j," in command
    assert "config.params.extra.judge.url='\"${HPCEVAL_AUX_JUDGE_CHAT_URL}\"" in command
    assert "\x00" not in command and "auxiliary_deployments" not in command
    # the params kept as written (what the manifest and status read)
    assert r.tasks[0].params["extra"]["judge"]["url"] == "auxiliary_deployments.judge.chat_url"


@pytest.mark.parametrize(("where", "value", "message"), [
    ("param", "auxiliary_deployments.grader.chat_url",
     "refers to auxiliary_deployments.grader.chat_url: no auxiliary deployment 'grader'"),
    ("param", "auxiliary_deployments.judge.health_url",
     "refers to auxiliary_deployments.judge.health_url: 'health_url' is not a field of an "
     "auxiliary deployment (fix: use one of: url, chat_url, completions_url"),
    ("env", "auxiliary_deployments.judge.bogus",
     "refers to auxiliary_deployments.judge.bogus: 'bogus' is not a field"),
])
def test_unknown_references_name_the_key(tmp_path: Path, where: str, value: str,
                                         message: str) -> None:
    task: dict[str, Any] = {"name": "ifeval"}
    env: dict[str, str] = {}
    if where == "param":
        task["params"] = {"extra": {"judge": {"url": value}}}
        key = "evaluation.tasks.ifeval.params.extra.judge.url"
    else:
        env = {"JUDGE": value}
        key = "evaluation.env_vars.JUDGE"
    text = refused(tmp_path, judge={}, task=task, evaluation_env=env)
    assert f"{key}: {message}" in text, text


def test_a_reference_without_auxiliary_deployments(tmp_path: Path) -> None:
    text = refused(tmp_path, task={"name": "ifeval", "env_vars": {
        "JUDGE": "auxiliary_deployments.judge.chat_url"}})
    assert ("evaluation.tasks.ifeval.env_vars.JUDGE: refers to auxiliary_deployments.judge."
            "chat_url, but the run has no auxiliary_deployments") in text
    assert "fix: add auxiliary_deployments.judge" in text
