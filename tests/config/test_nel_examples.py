"""Every NeMo Evaluator launcher example (tests/data/nel_examples, see its README) with the
``-o`` overrides its header tells users to pass: it renders with the launcher's meaning, or is
refused with exit 2 and words that say what hpceval does not support and what to do.

A refused file may also be pinned with the overrides its message asks for ("then"): the fix
the message names must work.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpceval.cli.main import cli
from hpceval.config import ResolvedConfig, load_config, yamlio
from hpceval.tasks import load_catalogue

EXAMPLES = Path(__file__).parents[1] / "data" / "nel_examples"

# What the headers say, word for word (checked below against each file's header).
SLURM_HEADER = ("execution.hostname=my-cluster.com",
                "execution.output_dir=/absolute/path/on/cluster",
                "execution.account=my-account",
                "++evaluation.nemo_evaluator_config.config.params.limit_samples=10")
NIM_HEADER = ("execution.hostname=my-cluster.com", "execution.output_dir=/path/on/cluster",
              "execution.account=my-account",
              "++evaluation.nemo_evaluator_config.config.params.limit_samples=10")
DOCUMENTED: dict[str, tuple[str, ...]] = {
    "lepton_basic.yaml": (), "lepton_nim.yaml": (), "lepton_vllm.yaml": (),
    "local_advanced_adapters.yaml": (), "local_auto_export.yaml": (), "local_basic.yaml": (),
    "local_extra_params.yaml": (), "local_nim.yaml": (), "local_reasoning.yaml": (),
    "local_safety.yaml": (), "local_tools.yaml": (), "local_vllm_logprobs.yaml": (),
    "nemotron/local_nvidia-nemotron-3-nano-30b-a3b-base.yaml": (),
    "nemotron/local_nvidia_nemotron_3_nano_30b_a3_tools.yaml": (),
    "nemotron/local_nvidia_nemotron_3_nano_30b_a3b.yaml": (),
    "nemotron/local_qwen3-30b-a3b-base.yaml": (),
    "nemotron/nemotron-3-super/local_nemotron-3-super-120b-a12b-base.yaml": (),
    "nemotron/nemotron-3-super/local_nemotron-3-super-120b-a12b.yaml": (),
    "nemotron/nemotron-3-super/local_nemotron-3-super-120b-a12b_low_budget.yaml": (),
    "nemotron/nemotron-3-super/local_nemotron-3-super-120b-a12b_tools.yaml": (),
    "nemotron/slurm_nvidia_nemotron_3_nano_30b_a3b_nvfp4.yaml": (),  # its header has none
    "slurm_nemotron_benchmarks.yaml": SLURM_HEADER,
    "slurm_nim.yaml": NIM_HEADER,
    "slurm_sglang_auto_export.yaml": SLURM_HEADER,
    "slurm_vllm_advanced_hf_caching.yaml": SLURM_HEADER,
    "slurm_vllm_auxiliary_judge.yaml": SLURM_HEADER,
    "slurm_vllm_basic.yaml": SLURM_HEADER,
    "slurm_vllm_checkpoint_path.yaml": SLURM_HEADER,
    "slurm_vllm_multinode_dp.yaml": SLURM_HEADER,
    "slurm_vllm_multinode_dp_haproxy.yaml": SLURM_HEADER,
    "slurm_vllm_multinode_multiinstance_ray_tp_pp.yaml": SLURM_HEADER,
    "slurm_vllm_multinode_ray_tp_pp.yaml": SLURM_HEADER,
}

Check = Callable[[ResolvedConfig, str, Path], None]


@dataclass(frozen=True)
class Renders:
    tasks: tuple[str, ...] | None  # as the catalogue resolves them; None: the file's own names
    check: Check | None = None
    notes: tuple[str, ...] = ()  # what the user is told about keys without a counterpart


@dataclass(frozen=True)
class Refused:
    says: tuple[str, ...]
    then: tuple[tuple[str, ...], Renders | Refused] | None = field(default=None)


def _params(r: ResolvedConfig, **expected: object) -> None:
    for task in r.spec.evaluation.tasks:
        got = {k: getattr(task.params, k) for k in expected}
        assert got == expected, (task.name, got)


def _local_basic(r: ResolvedConfig, script: str, cwd: Path) -> None:
    assert r.spec.deployment.type == "none" and r.layout.instances == 0
    ep = r.spec.target.api_endpoint
    assert (ep.url, ep.model_id, ep.api_key_name) == (
        "https://integrate.api.nvidia.com/v1/chat/completions", "meta/llama-3.2-3b-instruct",
        "NGC_API_KEY")
    _params(r, limit_samples=10, parallelism=1, request_timeout=3600)
    assert r.spec.evaluation.tasks[1].env_vars == {"HF_TOKEN": "host:HF_TOKEN_FOR_GPQA_DIAMOND"}
    assert r.spec.execution.output_dir == str(cwd / "nel-results")  # the quick start as written
    assert str(cwd / "nel-results") in script and "HF_TOKEN_FOR_GPQA_DIAMOND" in script


def _local_tools(r: ResolvedConfig, script: str, cwd: Path) -> None:
    _params(r, parallelism=1, request_timeout=3600)
    assert r.spec.evaluation.tasks[0].params.extra == {
        "use_sandbox": True, "args": "++inference.tokens_to_generate=null "
        "++tool_modules=[nemo_skills.mcp.servers.python_tool::PythonTool]"}
    assert "nemo_skills.mcp.servers.python_tool::PythonTool" in script


def _nano_tools(r: ResolvedConfig, script: str, cwd: Path) -> None:
    assert r.spec.execution.hf_cache_dir == str(cwd / "hf_cache")
    _params(r, max_new_tokens=131072, temperature=0.99999, top_p=0.99999, parallelism=1,
            request_timeout=3600, max_retries=10)
    aime, gpqa = r.spec.evaluation.tasks
    assert (aime.params.extra["num_repeats"], gpqa.params.extra["num_repeats"]) == (64, 8)
    assert aime.params.extra["tokenizer_backend"] == "huggingface"  # shared extra, merged
    assert r.spec.evaluation.env_vars == {"HF_TOKEN": "host:HF_TOKEN", "HF_HOME": "host:HF_HOME"}


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
    _params(r, limit_samples=10)


def _vllm_basic(r: ResolvedConfig, script: str, cwd: Path) -> None:
    assert r.layout.instances == 8 and r.layout.gpus_per_instance == 1
    assert r.spec.deployment.hf_model_handle == "microsoft/Phi-4-mini-instruct"
    assert "#SBATCH --account=my-account" in script and "#SBATCH --gpus-per-node=8" in script
    assert r.spec.execution.output_dir == "/absolute/path/on/cluster"
    _params(r, limit_samples=10)


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
    assert 'launch_server 0 head "${NODES[1]}" 0 1' in script
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
    _params(r, parallelism=512, temperature=0.6, top_p=0.95, max_new_tokens=32768,
            request_timeout=3600, limit_samples=10)
    assert "#SBATCH --nodes=2" in script


def _multiinstance_ray(r: ResolvedConfig, script: str, cwd: Path) -> None:
    ex, dep, rules = r.spec.execution, r.spec.deployment, r.spec.evaluation.interceptors
    assert (ex.nodes, dep.data_parallel_size, dep.multi_node_backend) == (4, 2, "ray")
    assert (r.layout.instances, r.layout.nodes_per_instance) == (2, 2)
    assert ex.hf_cache_dir == "/path/to/hf_home" and dep.env_vars == {"HF_TOKEN": "host:HF_TOKEN"}
    assert (rules.strip_reasoning, rules.log_requests, rules.system_prompt) == (True, 10, None)
    assert '{"name":"strip_reasoning"' in script and LOG_10 in script
    _params(r, parallelism=128, temperature=0.6, top_p=0.95, max_new_tokens=32768)


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
    _params(r, request_timeout=3600, parallelism=1)


def _haproxy(r: ResolvedConfig, script: str, cwd: Path) -> None:
    """NEL: 2 node-wide servers with vLLM's DP=8 behind HAProxy; here 16 replicas."""
    assert (r.spec.execution.nodes, r.layout.instances, r.layout.instances_per_node) == (2, 16, 8)
    assert r.spec.deployment.data_parallel_size == 16


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


def _ray(r: ResolvedConfig, script: str, cwd: Path) -> None:
    dep = r.spec.deployment
    assert (dep.multi_node_backend, dep.image) == ("ray", "docker://vllm/vllm-openai:v0.15.1")
    assert (r.layout.instances, r.layout.nodes_per_instance, r.layout.gpus_per_instance) == (
        1, 2, 16)
    assert r.spec.execution.walltime == "02:00:00" and "#SBATCH --time=02:00:00" in script
    assert "docker://vllm/vllm-openai:v0.15.1" in script


def _docker(r: ResolvedConfig, script: str) -> None:
    """In containers as NEL's local executor runs them: the server and the harness."""
    assert r.spec.execution.container_runtime == "docker"
    server = script.split("launch_server 0 head")[1].split("vllm serve")[0]
    assert "docker run" in server and "--network=host" in server
    assert "endpoint, in docker)" in script  # the harness


def _logprobs(r: ResolvedConfig, script: str, cwd: Path) -> None:
    _docker(r, script)
    assert r.spec.deployment.image == "docker://vllm/vllm-openai:v0.32.0"  # the local profile's
    assert r.spec.deployment.env_vars == {"HF_TOKEN": "host:HF_TOKEN"}
    assert r.spec.evaluation.env_vars == {"HF_TOKEN": "host:HF_TOKEN"}
    assert r.spec.evaluation.tasks[0].params.extra == {
        "tokenizer": "meta-llama/Llama-3.1-8B", "tokenizer_backend": "huggingface"}
    assert r.spec.deployment.extra_args == ["--max-model-len", "32768"]


def _image(expected: str) -> Check:
    def check(r: ResolvedConfig, script: str, cwd: Path) -> None:
        assert r.spec.deployment.image == expected
        assert r.layout.instances == 1
        _docker(r, script)  # docker runs the registry image by its name
        assert f"    {expected.removeprefix('docker://')} \\\n    vllm serve" in script
    return check


def _super_base(r: ResolvedConfig, script: str, cwd: Path) -> None:
    _docker(r, script)
    dep = r.spec.deployment
    assert (dep.image, dep.tensor_parallel_size, r.layout.instances) == (
        "docker://vllm/vllm-openai:v0.13.0", 8, 1)
    assert dep.env_vars == {"HF_TOKEN": "host:HF_TOKEN", "VLLM_ATTENTION_BACKEND": "lit:FLASH_ATTN"}
    assert "VLLM_ATTENTION_BACKEND=FLASH_ATTN" in script
    ruler_1m = r.spec.evaluation.tasks[-1]
    assert ruler_1m.params.extra["tokenizer_backend"] == "hf"  # the task's own value wins
    assert r.spec.evaluation.tasks[0].params.extra["tokenizer_backend"] == "huggingface"


def _chains(named: dict[str, dict[str, object]], others: dict[str, object] | None = None,
            shared: dict[str, object] | None = None) -> Check:
    """NEL's one adapter per task: each named task's own interceptors (the keys given), the
    others' ``others`` (None: the run's chain, ``shared``); every task with a chain of its own
    asks the proxy under /task/<its key>/, and the proxy is given those chains."""
    def check(r: ResolvedConfig, script: str, cwd: Path) -> None:
        run = r.spec.evaluation.interceptors
        for key, value in (shared or {}).items():
            assert getattr(run, key) == value, key
        for task, rt in zip(r.spec.evaluation.tasks, r.tasks, strict=True):
            rules = named.get(task.name, others)
            own = r.spec.evaluation.own_chain(task) is not None
            routed = f"  endpoint_urls /task/{rt.key}  # its own interceptors\n" in script
            assert (own, routed) == (rules is not None, rules is not None), task.name
            for key, value in (rules or {}).items():
                assert getattr(task.interceptors, key) == value, (task.name, key)
        assert ("--task-interceptors=" in script) == bool(named or others)
    return check


THINK_OFF = {"add_params": {"chat_template_kwargs": {"enable_thinking": False},
                            "skip_special_tokens": False}, "log_requests": 10}
# every task logs 10 requests (its adapter_config's use_request_logging); the ruler tasks
# also turn thinking off (NEL: one adapter per task, each with its own log)
NANO_CHAINS = _chains({"ruler-128k-chat": THINK_OFF, "ruler-64k-chat": THINK_OFF},
                      {"log_requests": 10, "add_params": {}})
OWN_CHAINS = "adapter_configs became their own interceptors"
JUDGE_URL = ("evaluation.tasks.ns_hle.nemo_evaluator_config.config.params.extra.judge.url="
             "http://judge/v1")
LEPTON = Refused(("Lepton deployments are out of scope for hpceval",
                  "use execution: slurm/default or local"))
NIM = Refused(("NIM deployments are out of scope for hpceval",
               "point target.api_endpoint.url at it with deployment: none"))
def _auto_export(r: ResolvedConfig, script: str, cwd: Path) -> None:
    from hpceval.runs.rundir import prepare_run

    ex = r.spec.export
    assert ex.destinations == ["mlflow"] and ex.mlflow.tracking_uri == MLFLOW_URI
    assert ex.mlflow.experiment_name == "nemo-evaluator-launcher"
    run = prepare_run(r, invocation_id="inv-0123456789abcdef", python="/py")
    after = "--mlflow-tracking-uri=" + MLFLOW_URI
    if r.spec.execution.type == "slurm":  # a dependent job, submitted after the main one
        assert run.export is not None and after in run.export
    else:  # the local runner exports after the last model
        assert run.export is None and after in run.scripts["local.sh"]


MLFLOW_URI = "http://mlflow.example:5000"
EXPORT_NOTES = ("export.mlflow.log_metrics is ignored: every metric of every task is logged",
                "export.mlflow.tags is ignored")
EXPORT = Refused(("export.mlflow.tracking_uri: MISSING value",),
                 then=((f"export.mlflow.tracking_uri={MLFLOW_URI}",),
                       Renders(("simple_evals.gpqa_diamond",), _auto_export, EXPORT_NOTES)))
# NEL's local executor runs the server and harnesses with docker: so does the local profile
# (container_runtime: auto), here on a machine where neither docker nor podman is found
DOCKER_NOTE = "execution.container_runtime: auto chose docker (neither docker nor podman found"
FILL = ("execution.hostname=my-cluster.com", "execution.account=my-account",
        "execution.output_dir=/absolute/path/on/cluster")

OUTCOMES: dict[str, Renders | Refused] = {
    "lepton_basic.yaml": LEPTON, "lepton_nim.yaml": LEPTON, "lepton_vllm.yaml": LEPTON,
    "local_nim.yaml": NIM, "slurm_nim.yaml": NIM,
    "local_auto_export.yaml": EXPORT, "slurm_sglang_auto_export.yaml": EXPORT,
    "local_advanced_adapters.yaml": Renders(("simple_evals.mgsm",), _advanced_adapters, (
        "adapter_config became evaluation.interceptors: add_params=",)),
    "local_reasoning.yaml": Renders(
        ("simple_evals.mmlu_pro", "lm-evaluation-harness.ifeval"),
        _chains({"simple_evals.mmlu_pro": {"system_prompt": '"/think"', "strip_reasoning": True},
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
        None, _chains({}, None, {"add_params": {"chat_template_kwargs": {
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
    "slurm_nemotron_benchmarks.yaml": Renders(
        None, _chains({"lm-evaluation-harness.ifeval": {
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


def _run(name: str, overrides: tuple[str, ...]) -> tuple[int, str, str]:
    args = ["render", str(EXAMPLES / name)]
    for o in overrides:
        args += ["-o", o]
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.stdout, result.stderr


def _check(name: str, overrides: tuple[str, ...], outcome: Renders | Refused,
           cwd: Path) -> None:
    code, script, err = _run(name, overrides)
    assert "Traceback" not in err
    if isinstance(outcome, Refused):
        assert code == 2, (name, err[-2000:])
        assert "#SBATCH" not in script
        for words in outcome.says:
            assert words in err, (name, words, err)
        if outcome.then is not None:
            _check(name, (*overrides, *outcome.then[0]), outcome.then[1], cwd)
        return
    assert code == 0, (name, err)
    for leftover in ("???", "${oc.", "${deployment."):
        assert leftover not in script, (name, leftover)
    r = load_config(EXAMPLES / name, list(overrides), check_environment=False)
    catalogue = load_catalogue()
    resolved = tuple(catalogue.resolve(t.name).task.qualified_name
                     for t in r.spec.evaluation.tasks)
    if outcome.tasks is None:  # long lists: no task of the file is lost or renamed
        written = yamlio.read(EXAMPLES / name)["evaluation"]["tasks"]
        assert [t.name for t in r.spec.evaluation.tasks] == [t["name"] for t in written]
    else:
        assert resolved == outcome.tasks
    for task in resolved:
        assert task in script
    for words in outcome.notes:
        assert words in err, (name, words, err)
    if outcome.check is not None:
        outcome.check(r, script, cwd)


def test_every_example_is_pinned() -> None:
    files = {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.yaml")}
    assert len(files) == 32
    assert set(DOCUMENTED) == files and set(OUTCOMES) == files


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_documented_overrides_are_the_headers(name: str) -> None:
    header = (EXAMPLES / name).read_text().split("\ndefaults:")[0]
    for override in DOCUMENTED[name]:
        assert f"-o {override}" in header, override


@pytest.mark.parametrize("name", sorted(OUTCOMES))
def test_example_outcome(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # relative output_dir / bind sources land here
    # the local profile counts this machine's GPUs: here a machine where none can be counted
    monkeypatch.setattr("hpceval.config.nemo_forms.count_gpus", lambda env, which=None: None)
    monkeypatch.setattr("hpceval.config.nemo_forms.find_program", lambda name: None)
    _check(name, DOCUMENTED[name], OUTCOMES[name], Path(os.getcwd()))


def test_tally() -> None:
    """The counts the issue's closing note reports (as documented, before any 'then')."""
    renders = sorted(n for n, o in OUTCOMES.items() if isinstance(o, Renders))
    assert len(renders) == 19, renders
    assert len(OUTCOMES) - len(renders) == 13
