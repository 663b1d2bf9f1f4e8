"""The NeMo Evaluator launcher's local-executor examples (tests/data/nel_examples/local_*.yaml):
what each renders to, or why it is refused (support.nel_examples has the machinery)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.nel_examples import (
    DOCKER_NOTE,
    EXPORT,
    NIM,
    OWN_CHAINS,
    Refused,
    Renders,
    chains,
    docker,
    example_outcome,
    params,
)

from hpceval.config import ResolvedConfig


def _local_basic(r: ResolvedConfig, script: str, cwd: Path) -> None:
    assert r.spec.deployment.type == "none" and r.layout.instances == 0
    ep = r.spec.target.api_endpoint
    assert (ep.url, ep.model_id, ep.api_key_name) == (
        "https://integrate.api.nvidia.com/v1/chat/completions", "meta/llama-3.2-3b-instruct",
        "NGC_API_KEY")
    params(r, limit_samples=10, parallelism=1, request_timeout=3600)
    assert r.spec.evaluation.tasks[1].env_vars == {"HF_TOKEN": "host:HF_TOKEN_FOR_GPQA_DIAMOND"}
    assert r.spec.execution.output_dir == str(cwd / "nel-results")  # the quick start as written
    assert str(cwd / "nel-results") in script and "HF_TOKEN_FOR_GPQA_DIAMOND" in script


def _local_tools(r: ResolvedConfig, script: str, cwd: Path) -> None:
    params(r, parallelism=1, request_timeout=3600)
    assert r.spec.evaluation.tasks[0].params.extra == {
        "use_sandbox": True, "args": "++inference.tokens_to_generate=null "
        "++tool_modules=[nemo_skills.mcp.servers.python_tool::PythonTool]"}
    assert "nemo_skills.mcp.servers.python_tool::PythonTool" in script


def _advanced_adapters(r: ResolvedConfig, script: str, cwd: Path) -> None:
    rules = r.spec.evaluation.interceptors
    assert rules.add_params == {"extra_body": {"chat_template_kwargs": {"enable_thinking": False},
                                               "thinking_budget": -1}}
    assert rules.system_prompt is not None and rules.system_prompt.startswith(
        "You are an expert mathematician")
    assert rules.log_requests == 1 and not rules.strip_reasoning
    # The in-job proxy runs in front of the external API and applies them.
    assert "--upstream https://integrate.api.nvidia.com --external-upstream" in script
    assert 'HPCEVAL_ENDPOINT_URL="$ENDPOINT_BASE$1"/v1/chat/completions' in script
    params(r, request_timeout=3600, parallelism=1)


def _extra_params(r: ResolvedConfig, script: str, cwd: Path) -> None:
    math, mbpp = r.spec.evaluation.tasks
    assert math.params.extra["n_samples"] == 3 and math.params.extra["judge"]["model"] == (
        "meta/llama-3.3-70b-instruct")  # config.extra, read as params.extra
    assert math.env_vars == {"JUDGE_API_KEY": "host:NGC_API_KEY"}
    assert mbpp.params.extra == {"n_samples": 5} and mbpp.params.temperature == 0.2
    assert "meta/llama-3.3-70b-instruct" in script


def _safety(r: ResolvedConfig, script: str, cwd: Path) -> None:
    _, aegis, compliance = r.spec.evaluation.tasks
    assert aegis.env_vars["HF_TOKEN"] == "host:HF_TOKEN_FOR_AEGIS_V2"
    # nemo_evaluator_config.env_vars of the task: the task's environment
    assert compliance.env_vars == {"JUDGE_API_KEY": "host:COMPLIANCE_JUDGE_SERVICE_API_KEY"}
    assert "COMPLIANCE_JUDGE_SERVICE_API_KEY" in script


def _logprobs(r: ResolvedConfig, script: str, cwd: Path) -> None:
    docker(r, script)
    assert r.spec.deployment.image == "docker://vllm/vllm-openai:v0.32.0"  # the local profile's
    assert r.spec.deployment.env_vars == {"HF_TOKEN": "host:HF_TOKEN"}
    assert r.spec.evaluation.env_vars == {"HF_TOKEN": "host:HF_TOKEN"}
    assert r.spec.evaluation.tasks[0].params.extra == {
        "tokenizer": "meta-llama/Llama-3.1-8B", "tokenizer_backend": "huggingface"}
    assert r.spec.deployment.extra_args == ["--max-model-len", "32768"]


OUTCOMES: dict[str, Renders | Refused] = {
    "local_nim.yaml": NIM,
    "local_auto_export.yaml": EXPORT,
    "local_advanced_adapters.yaml": Renders(("simple_evals.mgsm",), _advanced_adapters, (
        "adapter_config became evaluation.interceptors: add_params=",)),
    "local_reasoning.yaml": Renders(
        ("simple_evals.mmlu_pro", "lm-evaluation-harness.ifeval"),
        chains({"simple_evals.mmlu_pro": {"system_prompt": '"/think"', "strip_reasoning": True},
                "lm-evaluation-harness.ifeval": {"system_prompt": '"/no_think"',
                                                 "strip_reasoning": False}}),
        (OWN_CHAINS,)),
    "local_extra_params.yaml": Renders(None, _extra_params, (
        "AA_math_test_500.nemo_evaluator_config.config.extra was read as config.params.extra",)),
    "local_safety.yaml": Refused(
        ("evaluation.tasks.aegis_v2.nemo_evaluator_config.config.params.extra.judge.url: "
         "MISSING value", "compliance.nemo_evaluator_config.config.params.extra.judge.model_id: "
         "MISSING value"),
        then=(("evaluation.tasks.aegis_v2.nemo_evaluator_config.config.params.extra.judge.url="
               "http://judge/v1",
               "evaluation.tasks.compliance.nemo_evaluator_config.config.params.extra.judge.url="
               "http://judge/v1",
               "evaluation.tasks.compliance.nemo_evaluator_config.config.params.extra.judge."
               "model_id=judge"),
              Renders(None, _safety, ("compliance.nemo_evaluator_config.env_vars became "
                                      "evaluation.tasks.compliance.env_vars",)))),
    "local_basic.yaml": Renders(("lm-evaluation-harness.ifeval", "simple_evals.gpqa_diamond",
                                 "bigcode-evaluation-harness.mbpp-chat"), _local_basic,
                                ("execution.output_dir 'nel-results' is relative",)),
    "local_tools.yaml": Renders(("nemo_skills.ns_aime2025",), _local_tools),
    "local_vllm_logprobs.yaml": Renders(("lm-evaluation-harness.piqa",), _logprobs,
                                        (DOCKER_NOTE,)),
}


@pytest.mark.parametrize("name", sorted(OUTCOMES))
def test_example_outcome(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    example_outcome(name, OUTCOMES[name], tmp_path, monkeypatch)
