"""NeMo Evaluator launcher syntax read with the launcher's meaning, or refused in words."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpceval.cli.main import cli
from hpceval.config import ConfigError, load_config
from tests.config.conftest import write

SLURM = """defaults:
  - execution: slurm/default
  - deployment: vllm
  - _self_
execution:
  hostname: ???
  username: ${oc.env:USER}
  account: ???
  output_dir: ???
deployment:
  hf_model_handle: org/model
  served_model_name: org/model
  tensor_parallel_size: 1
  data_parallel_size: 8
evaluation:
  nemo_evaluator_config:
    config:
      params:
        limit_samples: 5
  tasks:
    - name: lm-evaluation-harness.ifeval
    - name: gsm8k
"""
FILLED = ["execution.hostname=localhost", "execution.account=proj1",
          "execution.output_dir=/shared/runs"]

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
    api_key_name: NGC_API_KEY
evaluation:
  tasks:
    - name: lm-evaluation-harness.ifeval
"""


def _load(tmp_path: Path, text: str, *overrides: str) -> object:
    return load_config(write(tmp_path / "run.yaml", text), list(overrides),
                       check_environment=False)


def test_placeholders_are_refused_naming_each_key(tmp_path: Path) -> None:
    run = write(tmp_path / "run.yaml", SLURM)
    result = CliRunner().invoke(cli, ["render", str(run), "-o", "execution.account=proj1"])
    assert result.exit_code == 2, result.output
    errors = [ln for ln in result.output.splitlines() if "config error" in ln]
    assert len(errors) == 2 and all("MISSING value" in ln for ln in errors)
    assert "execution.hostname: MISSING" in errors[0] + errors[1]
    assert "execution.output_dir: MISSING" in errors[0] + errors[1]
    assert "'???'" not in result.output and "#SBATCH" not in result.output


def test_placeholders_inside_tasks_are_refused(tmp_path: Path) -> None:
    text = SLURM.replace("    - name: gsm8k\n", "    - name: gsm8k\n      nemo_evaluator_config:"
                         "\n        config:\n          params:\n            extra:\n"
                         "              judge:\n                url: ???\n")
    with pytest.raises(ConfigError, match=r"evaluation.tasks.gsm8k.nemo_evaluator_config.config"
                       r".params.extra.judge.url: MISSING value"):
        _load(tmp_path, text, *FILLED)
    r = _load(tmp_path, text, *FILLED,
              "evaluation.tasks.gsm8k.nemo_evaluator_config.config.params.extra.judge.url=http://j")
    gsm8k = r.spec.evaluation.tasks[1]  # type: ignore[attr-defined]
    assert gsm8k.params.extra == {"judge": {"url": "http://j"}}


def test_launcher_override_forms(tmp_path: Path) -> None:
    r = _load(tmp_path, SLURM, *FILLED,
              "++evaluation.nemo_evaluator_config.config.params.limit_samples=10",
              "+evaluation.tasks.gsm8k.nemo_evaluator_config.config.params.temperature=0.2")
    ifeval, gsm8k = r.spec.evaluation.tasks  # type: ignore[attr-defined]
    assert (ifeval.params.limit_samples, gsm8k.params.limit_samples) == (10, 10)
    assert (ifeval.params.temperature, gsm8k.params.temperature) == (None, 0.2)
    assert r.spec.execution.hostname == "localhost"  # type: ignore[attr-defined]


def test_top_level_env_vars_reach_server_and_tasks(tmp_path: Path) -> None:
    text = SLURM.replace("execution:\n", "env_vars:\n  HF_HUB_OFFLINE: lit:1\n  A: lit:top\n"
                         "execution:\n").replace(
        "  data_parallel_size: 8\n", "  data_parallel_size: 8\n  env_vars: {A: lit:mine}\n")
    r = _load(tmp_path, text, *FILLED)
    assert r.spec.deployment.env_vars == {"HF_HUB_OFFLINE": "lit:1", "A": "lit:mine"}  # type: ignore[attr-defined]
    assert r.spec.evaluation.env_vars == {"HF_HUB_OFFLINE": "lit:1", "A": "lit:top"}  # type: ignore[attr-defined]


def test_unprefixed_variable_names_are_refused(tmp_path: Path) -> None:
    text = EXTERNAL + "      env_vars: {HF_TOKEN: HF_TOKEN_FOR_GPQA}\n"
    with pytest.raises(ConfigError, match="write host:HF_TOKEN_FOR_GPQA to pass that variable"):
        _load(tmp_path, text)
    r = _load(tmp_path, EXTERNAL + "      env_vars: {N: '1', P: /data, B: throughput}\n")
    assert r.spec.evaluation.tasks[0].env_vars == {"N": "1", "P": "/data", "B": "throughput"}  # type: ignore[attr-defined]


def test_empty_api_key_name_means_no_key(tmp_path: Path) -> None:
    r = _load(tmp_path, EXTERNAL.replace("api_key_name: NGC_API_KEY", 'api_key_name: ""'))
    assert r.spec.target.api_endpoint.api_key_name is None  # type: ignore[attr-defined]


def test_relative_output_dir_is_the_submit_folder(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = _load(tmp_path, EXTERNAL.replace("/shared/runs", "./results"))
    assert r.spec.execution.output_dir == os.path.join(str(tmp_path), "results")  # type: ignore[attr-defined]
    assert any("is relative" in n for n in r.composed.notes)  # type: ignore[attr-defined]


def test_registry_image_without_scheme(tmp_path: Path) -> None:
    text = SLURM.replace("deployment:\n", "deployment:\n  image: vllm/vllm-openai:v0.13.0\n")
    r = _load(tmp_path, text, *FILLED)
    assert r.spec.deployment.image == "docker://vllm/vllm-openai:v0.13.0"  # type: ignore[attr-defined]
    text = SLURM.replace("deployment:\n", "deployment:\n  image: /images/vllm.sif\n")
    assert _load(tmp_path, text, *FILLED).spec.deployment.image == "/images/vllm.sif"  # type: ignore[attr-defined]
    r = _load(tmp_path, SLURM, *FILLED, "deployment.image=vllm/vllm-openai:v0.11.0",
              "evaluation.tasks.gsm8k.container=nvcr.io/nvidia/eval-factory/lm-eval:26.03")
    assert r.spec.deployment.image == "docker://vllm/vllm-openai:v0.11.0"  # type: ignore[attr-defined]
    assert r.spec.evaluation.tasks[1].container == (  # type: ignore[attr-defined]
        "docker://nvcr.io/nvidia/eval-factory/lm-eval:26.03")


def test_sglang_preset_has_its_own_image(tmp_path: Path) -> None:
    r = _load(tmp_path, SLURM.replace("deployment: vllm", "deployment: sglang"), *FILLED)
    assert "sglang" in r.spec.deployment.image and "vllm" not in r.spec.deployment.image  # type: ignore[attr-defined]


def test_vllm_ray_preset(tmp_path: Path) -> None:
    text = SLURM.replace("deployment: vllm", "deployment: vllm_ray").replace(
        "tensor_parallel_size: 1", "tensor_parallel_size: 16").replace(
        "data_parallel_size: 8", "data_parallel_size: 1")
    r = _load(tmp_path, text, *FILLED, "execution.num_nodes=2")
    assert r.spec.deployment.multi_node_backend == "ray"  # type: ignore[attr-defined]
    assert (r.layout.instances, r.layout.nodes_per_instance) == (1, 2)  # type: ignore[attr-defined]


def test_server_command_for_vllm_is_not_dropped_silently(tmp_path: Path) -> None:
    text = SLURM.replace("  data_parallel_size: 8\n",
                         "  data_parallel_size: 8\n  command: vllm serve x --port 1\n")
    r = _load(tmp_path, text, *FILLED)
    assert any("deployment.command is ignored for a vllm deployment" in n
               for n in r.composed.notes)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("change", "words"), [
    (("execution: slurm/default", "execution: lepton/default"), "Lepton deployments are out of "
     "scope"),
    (("deployment: vllm", "deployment: nim"), "NIM deployments are out of scope"),
    (("deployment:\n", "export:\n  datadog: {url: http://m}\ndeployment:\n"),
     "export.datadog: export to 'datadog' is not supported"),
    (("  - _self_\n", "  - deployment/nim@auxiliary_deployments.judge\n  - _self_\n"),
     "NIM deployments are out of scope"),
    (("  tensor_parallel_size: 1\n", "  tensor_parallel_size: ${deployment.port}\n"),
     "OmegaConf interpolation"),
    (("        limit_samples: 5\n", "        limit_samples: 5\n      samples: {n: 1}\n"),
     "evaluation.nemo_evaluator_config.config.samples: is not a NeMo Evaluator setting"),
])
def test_unsupported_launcher_features_are_refused_in_words(tmp_path: Path,
                                                             change: tuple[str, str],
                                                             words: str) -> None:
    run = write(tmp_path / "run.yaml", SLURM.replace(*change))
    args = ["render", str(run)]
    for o in FILLED:
        args += ["-o", o]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output


ADAPTERS = """    target:
      api_endpoint:
        adapter_config:
          interceptors:
            - name: payload_modifier
              config:
                params_to_add: {extra_body: {chat_template_kwargs: {enable_thinking: false}}}
                params_to_remove: [logprobs]
            - name: system_message
              config: {system_message: "-- You are careful.\\n'quoted' $HOME"}
            - name: reasoning
              config: {end_reasoning_token: "</reason>"}
            - {name: request_logging, config: {max_requests: 1}}
            - {name: caching, enabled: true}
            - {name: endpoint}
"""


def test_adapter_config_becomes_the_proxy_interceptors(tmp_path: Path) -> None:
    text = SLURM.replace("        limit_samples: 5\n", "        limit_samples: 5\n" + ADAPTERS)
    r = _load(tmp_path, text, *FILLED)
    rules = r.spec.evaluation.interceptors  # type: ignore[attr-defined]
    assert rules.add_params == {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}
    assert rules.remove_params == ["logprobs"]
    assert rules.system_prompt == "-- You are careful.\n'quoted' $HOME"
    assert (rules.strip_reasoning, rules.reasoning_end, rules.log_requests) == (
        True, "</reason>", 1)
    run = write(tmp_path / "run.yaml", text)
    args = ["render", str(run)]
    for o in FILLED:
        args += ["-o", o]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    out = result.stdout
    line = out[out.index("\n  PROXY_ARGS+=(", out.index("# evaluation.interceptors")) + 3:]
    # The chain is one shell word of JSON; the prompt's quote, newline and $HOME stay literal.
    assert "'--interceptors=[{" in line
    ends = ("\n  # requests still", "\n  PROXY_ARGS+=(--tasks")
    statement = line[: min(i for i in (line.find(m) for m in ends) if i >= 0)]
    words = subprocess.run(["bash", "-c", f"PROXY_ARGS=(); {statement}\n"
                            "printf '%s\\0' \"${PROXY_ARGS[@]}\""], capture_output=True,
                           text=True, check=True).stdout.split("\0")[:-1]
    chains = [w for w in words if w.startswith("--interceptors=")]  # beside --tasks-dir DIR
    assert len(chains) == 1
    assert json.loads(chains[0].removeprefix("--interceptors=")) == [
        {"name": "remove_params", "config": {"remove_params": ["logprobs"]}},
        {"name": "add_params", "config": {"add_params": {
            "extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}}},
        {"name": "system_prompt", "config": {
            "system_prompt": "-- You are careful.\n'quoted' $HOME"}},
        {"name": "strip_reasoning", "config": {"strip_reasoning": True,
                                               "reasoning_start": "<think>",
                                               "reasoning_end": "</reason>"}},
        {"name": "log_requests", "config": {"log_requests": 1}}]


TASK_ADAPTER = ("    - name: gsm8k\n", "    - name: gsm8k\n      nemo_evaluator_config:\n"
                "        target:\n          api_endpoint:\n            adapter_config:\n"
                "              use_reasoning: true\n              use_system_prompt: true\n"
                "              custom_system_prompt: think step by step\n")


def _routes(script: str) -> dict[str, object]:
    """The proxy's --task-interceptors word, as bash reads the rendered PROXY_ARGS line."""
    line = next(ln for ln in script.splitlines() if "--task-interceptors=" in ln)
    words = subprocess.run(["bash", "-c", f"PROXY_ARGS=(); {line}\n"
                            "printf '%s\\0' \"${PROXY_ARGS[@]}\""], capture_output=True,
                           text=True, check=True).stdout.split("\0")[:-1]
    word = next(w for w in words if w.startswith("--task-interceptors="))
    routes: dict[str, object] = json.loads(word.removeprefix("--task-interceptors="))
    return routes


def test_a_tasks_own_adapter_config_becomes_its_own_interceptors(tmp_path: Path) -> None:
    """NEL runs one adapter per task: a task whose adapter_config differs gets its own chain,
    which the proxy applies under the task's route; the other task keeps the run's (none)."""
    r = _load(tmp_path, SLURM.replace(*TASK_ADAPTER), *FILLED)
    ifeval, gsm8k = r.spec.evaluation.tasks  # type: ignore[attr-defined]
    assert r.spec.evaluation.own_chain(ifeval) is None  # type: ignore[attr-defined]
    assert (gsm8k.interceptors.strip_reasoning, gsm8k.interceptors.system_prompt) == (
        True, "think step by step")
    key = r.tasks[1].key  # type: ignore[attr-defined]
    run = write(tmp_path / "run.yaml", SLURM.replace(*TASK_ADAPTER))
    result = CliRunner().invoke(cli, ["render", str(run), *[w for o in FILLED for w in ("-o", o)]])
    assert result.exit_code == 0, result.output
    assert "became their own interceptors" in result.stderr
    script = result.stdout
    assert _routes(script) == {key: [
        {"name": "system_prompt", "config": {"system_prompt": "think step by step"}},
        {"name": "strip_reasoning", "config": {"strip_reasoning": True,
                                               "reasoning_start": "<think>",
                                               "reasoning_end": "</think>"}}]}
    # the task's environment points its harness at its route; the other task's does not
    urls = script[script.index("endpoint_urls() {"):script.index('endpoint_urls ""')]
    steps = script.split("\ntask_environment_")
    assert f"  endpoint_urls /task/{key}  # its own interceptors" in steps[2]
    assert "endpoint_urls /task/" not in steps[1]
    got = subprocess.run(["bash", "-c", f'ENDPOINT_BASE=http://127.0.0.1:9\n{urls}\n'
                          f'endpoint_urls /task/{key}; echo "$HPCEVAL_BASE_URL"'],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert got == f"http://127.0.0.1:9/task/{key}/v1"


def test_a_tasks_own_interceptors_merge_over_the_runs(tmp_path: Path) -> None:
    """Our own form: evaluation.tasks[].interceptors, key by key over evaluation.interceptors;
    a task that turns one off has its own chain too."""
    text = SLURM + "  interceptors: {system_prompt: be brief, strip_reasoning: true}\n"
    r = _load(tmp_path, text, *FILLED, "evaluation.tasks.gsm8k.interceptors.strip_reasoning=false",
              "evaluation.tasks.lm-evaluation-harness.ifeval.interceptors.log_requests=3")
    ifeval, gsm8k = r.spec.evaluation.tasks  # type: ignore[attr-defined]
    assert (ifeval.interceptors.system_prompt, ifeval.interceptors.strip_reasoning,
            ifeval.interceptors.log_requests) == ("be brief", True, 3)
    assert (gsm8k.interceptors.system_prompt, gsm8k.interceptors.strip_reasoning) == (
        "be brief", False)
    same = _load(tmp_path, text, *FILLED,
                 "evaluation.tasks.gsm8k.interceptors.strip_reasoning=true")
    assert all(same.spec.evaluation.own_chain(t) is None  # type: ignore[attr-defined]
               for t in same.spec.evaluation.tasks)  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"evaluation.tasks.gsm8k.interceptors.add_params"):
        _load(tmp_path, text, *FILLED, "evaluation.tasks.gsm8k.interceptors.add_params.a b=1")


def test_interceptors_written_in_our_form(tmp_path: Path) -> None:
    text = SLURM + "  interceptors: {system_prompt: be brief, strip_reasoning: true}\n"
    r = _load(tmp_path, text, *FILLED, "evaluation.interceptors.system_prompt=be very brief")
    rules = r.spec.evaluation.interceptors  # type: ignore[attr-defined]
    assert (rules.system_prompt, rules.strip_reasoning) == ("be very brief", True)


def test_interceptors_put_the_proxy_in_front_of_an_external_endpoint(tmp_path: Path) -> None:
    text = EXTERNAL.replace("api.example.com/v1", "api.example.com/prefix/v1")
    run = write(tmp_path / "run.yaml", text + "  interceptors: {system_prompt: be brief}\n")
    result = CliRunner().invoke(cli, ["render", str(run)])
    assert result.exit_code == 0, result.output
    script = result.stdout
    assert "PROXY_ARGS=(--upstream https://api.example.com --external-upstream)" in script
    assert ("PROXY_ARGS+=('--interceptors=[{\"name\":\"system_prompt\",\"config\":"
            "{\"system_prompt\":\"be brief\"}}]')") in script
    assert 'export HPCEVAL_ENDPOINT_URL="$ENDPOINT_BASE$1"/prefix/v1/chat/completions' in script
    assert 'export HPCEVAL_BASE_URL="$ENDPOINT_BASE$1"/prefix/v1' in script
    path = tmp_path / "job.sh"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)
    # Without interceptors the proxy is there too (cache, progress); proxy: false opts out.
    plain = CliRunner().invoke(cli, ["render", str(write(tmp_path / "plain.yaml", text))])
    assert "--external-upstream" in plain.stdout
    direct = CliRunner().invoke(cli, ["render", str(write(tmp_path / "plain.yaml", text)),
                                      "-o", "target.api_endpoint.proxy=false"])
    assert direct.exit_code == 0, direct.output
    assert "--external-upstream" not in direct.stdout and "PORT_BASE" not in direct.stdout
    refused = CliRunner().invoke(cli, ["render", str(run), "-o", "target.api_endpoint.proxy=false"])
    assert refused.exit_code == 2 and "target.api_endpoint.proxy: is false" in refused.output


def test_logging_only_adapter_settings_are_noted(tmp_path: Path) -> None:
    text = SLURM.replace("        limit_samples: 5\n", "        limit_samples: 5\n    target:\n"
                         "      api_endpoint:\n        adapter_config:\n"
                         "          use_caching: true\n          use_reasoning: false\n")
    r = _load(tmp_path, text, *FILLED)
    assert any("adapter_config only caches, logs or counts requests" in n
               for n in r.composed.notes)  # type: ignore[attr-defined]


def test_placeholders_and_refusals_are_reported_together(tmp_path: Path) -> None:
    run = write(tmp_path / "run.yaml", SLURM.replace("deployment:\n", "export: {a: 1}\n"
                                                     "deployment:\n"))
    result = CliRunner().invoke(cli, ["render", str(run)])
    assert result.exit_code == 2
    assert result.output.count("MISSING value") == 3 and "export.a: export to 'a'" in result.output


def test_launcher_auto_export_becomes_a_dependent_export(tmp_path: Path) -> None:
    """NeMo Evaluator's auto-export (execution.auto_export + top-level export:) is read with its
    meaning: the destinations and their settings become hpceval's export section."""
    text = SLURM.replace("  output_dir: ???\n",
                         "  output_dir: ???\n  auto_export: {destinations: [mlflow]}\n")
    text = text.replace("deployment:\n", "export:\n  mlflow: {tracking_uri: file:///m}\n"
                        "deployment:\n", 1)
    r = _load(tmp_path, text, *FILLED)
    export = r.spec.export  # type: ignore[attr-defined]
    assert export.destinations == ["mlflow"]
    assert export.mlflow.tracking_uri == "file:///m"


EXTERNAL_ON_SLURM = EXTERNAL.replace("  - execution: local\n", "  - execution: slurm/default\n") \
    .replace("  output_dir: /shared/runs\n", "  output_dir: /shared/runs\n  account: proj1\n"
             "  gpus_per_node: null\n")


def test_no_gpus_for_an_endpoint_elsewhere_is_a_cpu_job(tmp_path: Path) -> None:
    """hpc-admin-2 item 14: NeMo Evaluator's examples that evaluate a hosted endpoint write
    `gpus_per_node: null` (no GPU request); hpceval refused it as an empty integer."""
    r = _load(tmp_path, EXTERNAL_ON_SLURM)
    assert r.spec.execution.gpus_per_node == 0  # type: ignore[attr-defined]
    assert any("gpus_per_node: null" in n for n in r.composed.notes)  # type: ignore[attr-defined]
    result = CliRunner().invoke(cli, ["render", str(tmp_path / "run.yaml")],
                                env={"NGC_API_KEY": "x"})
    assert result.exit_code == 0, result.output
    # the flags, not their comments (a CPU job's say "no GPU")
    header = [ln.split(" #")[0] for ln in result.output.splitlines() if ln.startswith("#SBATCH")]
    assert header and not [ln for ln in header if "gpu" in ln.lower()], header


def test_no_gpus_for_a_server_of_the_jobs_own_is_refused(tmp_path: Path) -> None:
    text = SLURM.replace("  output_dir: ???\n", "  output_dir: ???\n  gpus_per_node: null\n")
    with pytest.raises(ConfigError, match=r"execution.gpus_per_node: is null \(no GPUs\), but "
                       r"deployment vllm serves"):
        _load(tmp_path, text, *FILLED)
