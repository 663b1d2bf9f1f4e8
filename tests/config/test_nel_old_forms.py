"""NeMo Evaluator forms outside 0.2.x's schema that its users' files carry (config.extra,
nemo_evaluator_config.env_vars, 0.1.x max_tokens, execution.mode, unprefixed env values,
num_instances x data_parallel_size_local, the local profile's GPU count): each read with the
launcher's meaning and a note, or refused in words."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from hpceval.cli.main import cli
from hpceval.config import ConfigError, ResolvedConfig, load_config
from hpceval.config.auto import count_gpus
from tests.config.conftest import write

EXTERNAL = """defaults:
  - execution: local
  - deployment: none
  - _self_
execution:
  output_dir: /shared/runs
target:
  api_endpoint:
    model_id: m
    url: https://api.example.com/v1/chat/completions
evaluation:
  tasks:
    - name: lm-evaluation-harness.ifeval
    - name: lm-evaluation-harness.gsm8k
"""
LOCAL_VLLM = """defaults:
  - execution: local
  - deployment: vllm
  - _self_
execution:
  output_dir: /shared/runs
  container_runtime: apptainer
deployment:
  image: vllm/vllm-openai:v0.13.0
  hf_model_handle: org/model
  served_model_name: m
  tensor_parallel_size: 2
evaluation:
  tasks:
    - name: lm-evaluation-harness.ifeval
"""


def _load(tmp_path: Path, text: str, *overrides: str) -> ResolvedConfig:
    return load_config(write(tmp_path / "run.yaml", text), list(overrides),
                       check_environment=False)


def _task(text: str, block: str) -> str:
    """``block`` (indented for a task's keys) added to the first task."""
    return text.replace("    - name: lm-evaluation-harness.ifeval\n",
                        "    - name: lm-evaluation-harness.ifeval\n" + block, 1)


def test_config_extra_is_params_extra(tmp_path: Path) -> None:
    r = _load(tmp_path, _task(EXTERNAL, "      nemo_evaluator_config:\n        config:\n"
                              "          extra: {n_samples: 3, judge: {url: http://j}}\n"
                              "          params: {extra: {n_samples: 5}}\n"))
    assert r.spec.evaluation.tasks[0].params.extra == {"n_samples": 5,  # params.extra wins
                                                       "judge": {"url": "http://j"}}
    assert r.spec.evaluation.tasks[1].params.extra == {}
    assert any("config.extra was read as config.params.extra" in n for n in r.composed.notes)
    with pytest.raises(ConfigError, match=r"ifeval.nemo_evaluator_config.config.extra: is not"):
        _load(tmp_path, _task(EXTERNAL, "      nemo_evaluator_config:\n        config:\n"
                              "          extra: three\n"))


def test_nemo_evaluator_config_env_vars_are_the_tasks(tmp_path: Path) -> None:
    r = _load(tmp_path, _task(EXTERNAL, "      nemo_evaluator_config:\n        env_vars:\n"
                              "          A: host:FROM_NEC\n          B: lit:nec\n"
                              "      env_vars: {B: lit:own}\n"))
    assert r.spec.evaluation.tasks[0].env_vars == {"A": "host:FROM_NEC", "B": "lit:own"}
    assert r.spec.evaluation.tasks[1].env_vars == {}
    run_wide = EXTERNAL.replace("evaluation:\n", "evaluation:\n  nemo_evaluator_config:\n"
                                "    env_vars: {C: lit:all}\n")
    assert _load(tmp_path, run_wide).spec.evaluation.env_vars == {"C": "lit:all"}


@pytest.mark.parametrize("where", ["file", "nec", "override"])
def test_max_tokens_is_the_0_1_name(tmp_path: Path, where: str) -> None:
    text, overrides = EXTERNAL, []
    if where == "file":
        text = EXTERNAL.replace("evaluation:\n", "evaluation:\n  params: {max_tokens: 77}\n")
    elif where == "nec":
        text = EXTERNAL.replace("evaluation:\n", "evaluation:\n  nemo_evaluator_config:\n"
                                "    config: {params: {max_tokens: 77}}\n")
    else:
        overrides = ["++evaluation.nemo_evaluator_config.config.params.max_tokens=77"]
    r = _load(tmp_path, text, *overrides)
    assert [t.params.max_new_tokens for t in r.spec.evaluation.tasks] == [77, 77]
    assert any("max_tokens is NeMo Evaluator 0.1.x's name" in n for n in r.composed.notes)


def test_max_new_tokens_wins_over_max_tokens(tmp_path: Path) -> None:
    text = _task(EXTERNAL, "      params: {max_tokens: 7, max_new_tokens: 9}\n")
    assert _load(tmp_path, text).spec.evaluation.tasks[0].params.max_new_tokens == 9


@pytest.mark.parametrize(("mode", "concurrent"), [("sequential", 1), ("parallel", 2)])
def test_execution_mode(tmp_path: Path, mode: str, concurrent: int) -> None:
    run = write(tmp_path / "run.yaml", EXTERNAL)
    result = CliRunner().invoke(cli, ["render", str(run), "-o", f"execution.mode={mode}"])
    assert result.exit_code == 0, result.output
    assert f"MAX_CONCURRENT_TASKS={concurrent}\n" in result.stdout
    assert f"execution.mode={mode} became evaluation.max_concurrent_tasks={concurrent}" \
        in result.stderr


def test_execution_mode_refusal_and_explicit_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"execution.mode: is 'fast'.*use sequential or parallel"):
        _load(tmp_path, EXTERNAL, "execution.mode=fast")
    r = _load(tmp_path, EXTERNAL, "execution.mode=parallel", "evaluation.max_concurrent_tasks=1")
    assert r.spec.evaluation.max_concurrent_tasks == 1
    assert any("execution.mode is ignored" in n for n in r.composed.notes)


def test_unprefixed_set_variable_is_passed_with_a_note(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCEVAL_T_TOKEN", "secret-value")
    monkeypatch.delenv("HPCEVAL_T_UNSET", raising=False)
    text = _task(EXTERNAL, "      env_vars: {HF_TOKEN: HPCEVAL_T_TOKEN, N: '1'}\n")
    run = write(tmp_path / "run.yaml", text)
    result = CliRunner().invoke(cli, ["render", str(run)])
    assert result.exit_code == 0, result.output
    assert "'HPCEVAL_T_TOKEN' has no prefix: passed as the host variable $HPCEVAL_T_TOKEN" \
        in result.stderr and "deprecated: write host:HPCEVAL_T_TOKEN" in result.stderr
    assert "HPCEVAL_T_TOKEN" in result.stdout and "secret-value" not in result.stdout
    r = _load(tmp_path, text)
    assert r.spec.evaluation.tasks[0].env_vars == {"HF_TOKEN": "host:HPCEVAL_T_TOKEN", "N": "1"}
    with pytest.raises(ConfigError, match="'HPCEVAL_T_UNSET' has no prefix, so it is unclear"):
        _load(tmp_path, _task(EXTERNAL, "      env_vars: {HF_TOKEN: HPCEVAL_T_UNSET}\n"))


def test_num_instances_times_dp_local(tmp_path: Path) -> None:
    text = """defaults:
  - execution: slurm/default
  - deployment: vllm
  - _self_
execution: {output_dir: /shared/runs, num_nodes: 2, num_instances: 2, gpus_per_node: 4}
deployment:
  {hf_model_handle: org/m, served_model_name: m, tensor_parallel_size: 1,
   data_parallel_size_local: 4}
evaluation:
  tasks: [{name: lm-evaluation-harness.ifeval}]
"""
    r = _load(tmp_path, text)
    assert (r.layout.instances, r.layout.instances_per_node) == (8, 4)
    assert any("num_instances=2 x data_parallel_size_local=4 became deployment."
               "data_parallel_size=8" in n for n in r.composed.notes)


def _fake_smi(tmp_path: Path, lines: int) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    gpus = "".join(f'echo "GPU {i}: NVIDIA H100 (UUID: GPU-{i})"\n' for i in range(lines))
    smi.write_text(f'#!/bin/sh\n[ "$1" = -L ] || exit 9\n{gpus}')
    smi.chmod(0o755)
    return bin_dir


def test_count_gpus(tmp_path: Path) -> None:
    assert count_gpus({"CUDA_VISIBLE_DEVICES": "0,1,3"}) == 3
    assert count_gpus({"CUDA_VISIBLE_DEVICES": ""}) == 0
    assert count_gpus({}, which=lambda _: None) is None
    smi = _fake_smi(tmp_path, 6) / "nvidia-smi"
    assert count_gpus({}, which=lambda _: str(smi)) == 6


def test_local_profile_uses_this_machines_gpus(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    r = _load(tmp_path, LOCAL_VLLM)
    assert (r.spec.execution.gpus_per_node, r.layout.instances) == (4, 2)  # TP=2: 2 instances
    assert any("auto found 4 GPU(s)" in n for n in r.composed.notes)
    assert _load(tmp_path, LOCAL_VLLM, "execution.gpus_per_node=2").layout.instances == 1
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv("PATH", f"{_fake_smi(tmp_path, 8)}:/usr/bin:/bin")
    assert _load(tmp_path, LOCAL_VLLM).layout.instances == 4


def test_local_gpus_unknown_and_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    r = _load(tmp_path, LOCAL_VLLM.replace("tensor_parallel_size: 2", "tensor_parallel_size: 8"))
    assert (r.spec.execution.gpus_per_node, r.layout.instances) == (8, 1)
    assert any("could not count this machine's GPUs" in n for n in r.composed.notes)
    slurm = LOCAL_VLLM.replace("execution: local", "execution: slurm/default")
    with pytest.raises(ConfigError, match=r"execution.gpus_per_node: is auto.*only for execution"):
        _load(tmp_path, slurm, "execution.gpus_per_node=auto")


def test_local_examples_run_in_docker_as_nels_local_executor(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """NEL's local executor runs the server and the harnesses with `docker run`: so does
    container_runtime docker (or podman)."""
    monkeypatch.chdir(tmp_path)
    example = Path(__file__).parents[1] / "data/nel_examples/nemotron/local_qwen3-30b-a3b-base.yaml"
    result = CliRunner().invoke(cli, ["render", str(example),
                                      "-o", "execution.container_runtime=docker"])
    assert result.exit_code == 0, result.output
    server, harness = result.stdout.split("  docker run")[1:3]
    assert "--gpus all" in server and "vllm/vllm-openai:v0.11.0 \\\n    vllm serve" in server
    assert "-e VLLM_API_KEY" in server and "docker://" not in server
    assert "-e HF_TOKEN" in harness and "eval-factory/lm-evaluation-harness:26.03" in harness


def _machine_with(monkeypatch: pytest.MonkeyPatch, *programs: str) -> None:
    monkeypatch.setattr("hpceval.config.auto.find_program",
                        lambda name: f"/usr/bin/{name}" if name in programs else None)


@pytest.mark.parametrize(("programs", "chosen"), [
    (("docker", "podman"), "docker"), (("podman",), "podman"), ((), "docker")])
def test_local_runtime_auto_is_nels_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           programs: tuple[str, ...], chosen: str) -> None:
    """The local profile's container_runtime: auto gives a served model the runtime NEL's local
    executor uses (docker; podman, same command line, where docker is absent), with a note."""
    _machine_with(monkeypatch, *programs)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    run = LOCAL_VLLM.replace("  container_runtime: apptainer\n", "")
    r = _load(tmp_path, run)
    assert r.spec.execution.container_runtime == chosen
    assert any(f"auto chose {chosen}" in n for n in r.composed.notes)
    # what the run file (or -o) says wins
    assert _load(tmp_path, run, "execution.container_runtime=none",
                 "deployment.runtime=host").spec.execution.container_runtime == "none"


def test_local_runtime_auto_without_a_served_image(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """An external endpoint (or a server from the host) keeps host-installed harnesses, as
    before auto; auto on a Slurm profile is refused in words."""
    _machine_with(monkeypatch, "docker")
    r = _load(tmp_path, EXTERNAL)
    assert r.spec.execution.container_runtime == "none"
    assert not any("auto chose" in n for n in r.composed.notes)
    slurm = EXTERNAL.replace("execution: local", "execution: slurm/default")
    with pytest.raises(ConfigError, match=r"container_runtime: is auto.*only for execution.type"):
        _load(tmp_path, slurm, "execution.container_runtime=auto", "execution.account=a")
