"""The NeMo Evaluator launcher's Slurm-executor examples (tests/data/nel_examples/slurm_*.yaml):
what each renders to, or why it is refused (support.nel_examples has the machinery)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.nel_examples import (
    EXPORT,
    NIM,
    OWN_CHAINS,
    Refused,
    Renders,
    chains,
    example_outcome,
    params,
)

from hpceval.config import ResolvedConfig


def _hf_caching(r: ResolvedConfig, script: str, cwd: Path) -> None:
    ex, dep = r.spec.execution, r.spec.deployment
    assert (ex.walltime, ex.partition, ex.hf_cache_dir) == ("00:30:00", "backfill",
                                                            "/path/to/hf_home")
    offline = {"HF_DATASETS_OFFLINE": "lit:0", "TRANSFORMERS_OFFLINE": "lit:0"}
    assert dep.env_vars == offline and r.spec.evaluation.env_vars == offline
    assert (r.layout.instances, dep.extra_args) == (8, ["--max-model-len", "32768"])
    for line in ("#SBATCH --partition=backfill", "#SBATCH --time=00:30:00",
                 "#SBATCH --account=my-account", "HF_DATASETS_OFFLINE=0",
                 "vllm serve meta-llama/Llama-3.1-8B-Instruct"):
        assert line in script, line
    params(r, limit_samples=10)


def _vllm_basic(r: ResolvedConfig, script: str, cwd: Path) -> None:
    assert r.layout.instances == 8 and r.layout.gpus_per_instance == 1
    assert r.spec.deployment.hf_model_handle == "microsoft/Phi-4-mini-instruct"
    assert "#SBATCH --account=my-account" in script and "#SBATCH --gpus-per-node=8" in script
    assert r.spec.execution.output_dir == "/absolute/path/on/cluster"
    params(r, limit_samples=10)


def _auxiliary_judge(r: ResolvedConfig, script: str, cwd: Path) -> None:
    """NEL's meaning: the judge gets the vllm preset (and the site's image) under its keys, a
    node of its own added to the job, and its references resolve in the tasks' params."""
    judge = r.spec.auxiliary_deployments["judge"]
    assert (judge.type, judge.hf_model_handle, judge.num_nodes, judge.scope) == (
        "vllm", "Qwen/Qwen2.5-72B-Instruct", 1, "job")
    assert judge.image == r.spec.deployment.image and judge.image
    assert judge.env_vars == {"HF_TOKEN": "host:HF_TOKEN"}
    assert "#SBATCH --nodes=2" in script  # the model's node and the judge's
    place = r.auxiliary["judge"]
    assert (place.first_node, place.layout.instances, place.layout.gpus_per_instance) == (
        1, 8, 1)  # the preset's TP=1 fills the judge's own 8-GPU node
    assert 'launch_server 0 head "${NODES[1]}" \'\' 0 1' in script
    assert "config.params.extra.judge.model_id=Qwen/Qwen2.5-72B-Instruct," in script
    assert "config.params.extra.judge.url='\"${HPCEVAL_AUX_JUDGE_CHAT_URL}\"" in script
    assert 'export JUDGE_CHAT_URL="$AUX_BASE"/v1/chat/completions' in script
    assert "auxiliary_deployments.judge." not in script.split("# --- evaluation tasks")[1]


def _checkpoint(r: ResolvedConfig, script: str, cwd: Path) -> None:
    assert r.spec.deployment.checkpoint_path == "/lustre/ckpt" and r.layout.instances == 8


# the rendered chain's log_requests entry (the proxy's --interceptors JSON)
LOG_10 = '{"name":"log_requests","config":{"log_requests":10}}'


def _multinode_dp(r: ResolvedConfig, script: str, cwd: Path) -> None:
    ex, dep = r.spec.execution, r.spec.deployment
    assert (ex.nodes, ex.gpus_per_node, ex.walltime, ex.partition) == (2, 8, "01:00:00", "batch")
    assert (r.layout.instances, r.layout.instances_per_node) == (16, 8)
    assert dep.extra_args == ["--trust-remote-code"] and dep.command is None
    assert r.spec.evaluation.interceptors.log_requests == 10 and LOG_10 in script
    params(r, parallelism=512, temperature=0.6, top_p=0.95, max_new_tokens=32768,
           request_timeout=3600, limit_samples=10)
    assert "#SBATCH --nodes=2" in script


def _multiinstance_ray(r: ResolvedConfig, script: str, cwd: Path) -> None:
    ex, dep, rules = r.spec.execution, r.spec.deployment, r.spec.evaluation.interceptors
    assert (ex.nodes, dep.data_parallel_size, dep.multi_node_backend) == (4, 2, "ray")
    assert (r.layout.instances, r.layout.nodes_per_instance) == (2, 2)
    assert ex.hf_cache_dir == "/path/to/hf_home" and dep.env_vars == {"HF_TOKEN": "host:HF_TOKEN"}
    assert (rules.strip_reasoning, rules.log_requests, rules.system_prompt) == (True, 10, None)
    assert '{"name":"strip_reasoning"' in script and LOG_10 in script
    params(r, parallelism=128, temperature=0.6, top_p=0.95, max_new_tokens=32768)


def _haproxy(r: ResolvedConfig, script: str, cwd: Path) -> None:
    """NEL: 2 node-wide servers with vLLM's DP=8 behind HAProxy; here 16 replicas."""
    assert (r.spec.execution.nodes, r.layout.instances, r.layout.instances_per_node) == (2, 16, 8)
    assert r.spec.deployment.data_parallel_size == 16


def _ray(r: ResolvedConfig, script: str, cwd: Path) -> None:
    dep = r.spec.deployment
    assert (dep.multi_node_backend, dep.image) == ("ray", "docker://vllm/vllm-openai:v0.15.1")
    assert (r.layout.instances, r.layout.nodes_per_instance, r.layout.gpus_per_instance) == (
        1, 2, 16)
    assert r.spec.execution.walltime == "02:00:00" and "#SBATCH --time=02:00:00" in script
    assert "docker://vllm/vllm-openai:v0.15.1" in script


OUTCOMES: dict[str, Renders | Refused] = {
    "slurm_nim.yaml": NIM,
    "slurm_sglang_auto_export.yaml": EXPORT,
    "slurm_nemotron_benchmarks.yaml": Renders(
        None, chains({"lm-evaluation-harness.ifeval": {
            "system_prompt": '"detailed thinking off"', "strip_reasoning": True}},
            {"system_prompt": '"detailed thinking on"', "strip_reasoning": True}),
        (OWN_CHAINS,)),
    "slurm_vllm_advanced_hf_caching.yaml": Renders(
        ("lm-evaluation-harness.ifeval", "lm-evaluation-harness.gsm8k"), _hf_caching),
    "slurm_vllm_auxiliary_judge.yaml": Renders(
        ("simple_evals.AIME_2025", "simple_evals.AIME_2024"), _auxiliary_judge,
        ("auxiliary_deployments.judge.port is not used",)),
    "slurm_vllm_basic.yaml": Renders(
        ("lm-evaluation-harness.ifeval", "lm-evaluation-harness.gsm8k"), _vllm_basic,
        ("execution.username is ignored",)),
    "slurm_vllm_checkpoint_path.yaml": Refused(
        ("deployment.checkpoint_path: MISSING value",),
        then=(("deployment.checkpoint_path=/lustre/ckpt",),
              Renders(("lm-evaluation-harness.ifeval", "lm-evaluation-harness.gsm8k"),
                      _checkpoint))),
    "slurm_vllm_multinode_dp.yaml": Renders(
        ("lm-evaluation-harness.gsm8k_cot_instruct",), _multinode_dp,
        ("deployment.command is ignored for a vllm deployment",
         "adapter_config became evaluation.interceptors: log_requests=10")),
    "slurm_vllm_multinode_dp_haproxy.yaml": Renders(
        ("lm-evaluation-harness.gsm8k_cot_instruct",), _haproxy,
        ("execution.num_instances=2 x data_parallel_size_local=8 became "
         "deployment.data_parallel_size=16",)),
    "slurm_vllm_multinode_multiinstance_ray_tp_pp.yaml": Renders(
        ("lm-evaluation-harness.gsm8k_cot_instruct",), _multiinstance_ray,
        ("execution.num_instances=2 x data_parallel_size=1 became "
         "deployment.data_parallel_size=2",)),
    "slurm_vllm_multinode_ray_tp_pp.yaml": Renders(
        ("lm-evaluation-harness.gsm8k_cot_instruct",), _ray),
}


@pytest.mark.parametrize("name", sorted(OUTCOMES))
def test_example_outcome(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    example_outcome(name, OUTCOMES[name], tmp_path, monkeypatch)
