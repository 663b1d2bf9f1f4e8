"""The NeMo Evaluator launcher's Nemotron examples (tests/data/nel_examples/nemotron/): what
each renders to, or why it is refused (support.nel_examples has the machinery)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.nel_examples import (
    DOCKER_NOTE,
    OWN_CHAINS,
    Check,
    Refused,
    Renders,
    chains,
    docker,
    example_outcome,
    params,
)

from hpceval.config import ResolvedConfig


def _nano_tools(r: ResolvedConfig, script: str, cwd: Path) -> None:
    assert r.spec.execution.hf_cache_dir == str(cwd / "hf_cache")
    params(r, max_new_tokens=131072, temperature=0.99999, top_p=0.99999, parallelism=1,
           request_timeout=3600, max_retries=10)
    aime, gpqa = r.spec.evaluation.tasks
    assert (aime.params.extra["num_repeats"], gpqa.params.extra["num_repeats"]) == (64, 8)
    assert aime.params.extra["tokenizer_backend"] == "huggingface"  # shared extra, merged
    assert r.spec.evaluation.env_vars == {"HF_TOKEN": "host:HF_TOKEN", "HF_HOME": "host:HF_HOME"}


def _image(expected: str) -> Check:
    def check(r: ResolvedConfig, script: str, cwd: Path) -> None:
        assert r.spec.deployment.image == expected
        assert r.layout.instances == 1
        docker(r, script)  # docker runs the registry image by its name
        assert f"    {expected.removeprefix('docker://')} \\\n    vllm serve" in script
    return check


def _super_base(r: ResolvedConfig, script: str, cwd: Path) -> None:
    docker(r, script)
    dep = r.spec.deployment
    assert (dep.image, dep.tensor_parallel_size, r.layout.instances) == (
        "docker://vllm/vllm-openai:v0.13.0", 8, 1)
    assert dep.env_vars == {"HF_TOKEN": "host:HF_TOKEN", "VLLM_ATTENTION_BACKEND": "lit:FLASH_ATTN"}
    assert "VLLM_ATTENTION_BACKEND=FLASH_ATTN" in script
    ruler_1m = r.spec.evaluation.tasks[-1]
    assert ruler_1m.params.extra["tokenizer_backend"] == "hf"  # the task's own value wins
    assert r.spec.evaluation.tasks[0].params.extra["tokenizer_backend"] == "huggingface"


THINK_OFF = {"add_params": {"chat_template_kwargs": {"enable_thinking": False},
                            "skip_special_tokens": False}, "log_requests": 10}


# every task logs 10 requests (its adapter_config's use_request_logging); the ruler tasks
# also turn thinking off (NEL: one adapter per task, each with its own log)
NANO_CHAINS = chains({"ruler-128k-chat": THINK_OFF, "ruler-64k-chat": THINK_OFF},
                     {"log_requests": 10, "add_params": {}})


JUDGE_URL = ("evaluation.tasks.ns_hle.nemo_evaluator_config.config.params.extra.judge.url="
             "http://judge/v1")


FILL = ("execution.hostname=my-cluster.com", "execution.account=my-account",
        "execution.output_dir=/absolute/path/on/cluster")


OUTCOMES: dict[str, Renders | Refused] = {
    "nemotron/local_nvidia-nemotron-3-nano-30b-a3b-base.yaml": Renders(
        None, _image("docker://vllm/vllm-openai:v0.12.0"), (DOCKER_NOTE,)),
    "nemotron/local_nvidia_nemotron_3_nano_30b_a3_tools.yaml": Renders(
        ("nemo_skills.ns_aime2025", "nemo_skills.ns_gpqa"), _nano_tools,
        ("adapter_config became evaluation.interceptors: log_requests=10",
         "execution.hf_cache_dir './hf_cache' is relative")),
    "nemotron/local_nvidia_nemotron_3_nano_30b_a3b.yaml": Refused(
        ("evaluation.tasks.ns_hle.nemo_evaluator_config.config.params.extra.judge.url: "
         "MISSING value",),
        then=((JUDGE_URL,), Renders(None, NANO_CHAINS, (OWN_CHAINS,)))),
    "nemotron/local_qwen3-30b-a3b-base.yaml": Renders(
        None, _image("docker://vllm/vllm-openai:v0.11.0"), (DOCKER_NOTE,)),
    # TP=8: the local profile's gpus_per_node: auto sizes to it
    "nemotron/nemotron-3-super/local_nemotron-3-super-120b-a12b-base.yaml": Renders(
        None, _super_base, ("auto could not count this machine's GPUs", DOCKER_NOTE)),
    "nemotron/nemotron-3-super/local_nemotron-3-super-120b-a12b.yaml": Refused(
        ("evaluation.tasks.ns_hle.nemo_evaluator_config.config.params.extra.judge.url: "
         "MISSING value", "evaluation.tasks.tau2_bench_telecom.config.config.params.extra.user."
         "url: MISSING value")),
    # its tau2_bench_telecom writes `config:`, NEL's older name of nemo_evaluator_config: read
    # so, every task's adapter_config is the same: one chain for the run
    "nemotron/nemotron-3-super/local_nemotron-3-super-120b-a12b_low_budget.yaml": Renders(
        None, chains({}, None, {"add_params": {"chat_template_kwargs": {
            "enable_thinking": True, "low_effort": True}, "skip_special_tokens": False},
            "log_requests": 10}),
        ("tau2_bench_telecom.config is NeMo Evaluator's older name",
         "adapter_config became evaluation.interceptors")),
    "nemotron/nemotron-3-super/local_nemotron-3-super-120b-a12b_tools.yaml": Refused(
        ("evaluation.tasks.ns_hle.nemo_evaluator_config.config.params.extra.judge.url: "
         "MISSING value",),
        then=(("evaluation.tasks.ns_hle.nemo_evaluator_config.config.params.extra.judge.url="
               "http://judge/v1",),
              Refused(("unknown task 'nemo_skills.ns_aime2026'", "allow_unlisted: true")))),
    "nemotron/slurm_nvidia_nemotron_3_nano_30b_a3b_nvfp4.yaml": Refused(
        ("execution.hostname: MISSING value", "execution.account: MISSING value",
         "execution.output_dir: MISSING value", "extra.judge.url: MISSING value"),
        then=((*FILL, JUDGE_URL), Renders(None, NANO_CHAINS, (OWN_CHAINS,)))),
}


@pytest.mark.parametrize("name", sorted(OUTCOMES))
def test_example_outcome(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    example_outcome(name, OUTCOMES[name], tmp_path, monkeypatch)
