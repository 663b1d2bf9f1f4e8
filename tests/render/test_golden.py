"""Golden job scripts: every shipped profile x deployment shape, byte for byte.

A template change shows up here as a readable diff. Regenerate on purpose with
``UPDATE_GOLDEN=1 pytest tests/render`` and review the diff like code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from render_helpers import RenderFn, bash_syntax, shellcheck

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
PROFILES = {"local-dev": 4, "local": 1, "offline-modules": 4, "qos-reservation": 8, "slurm": 8}
HOST_ONLY = {"local-dev", "local"}  # container_runtime: none

TASKS = [{"name": "boxed_chat"},
         {"name": "judged", "timeout": 7200, "params": {"limit_samples": 50},
          "env_vars": {"EVAL_NOTE": "lit:two words", "JUDGE_URL": "host:JUDGE_URL"}},
         {"name": "completion_probe"}]
MODEL = {"checkpoint_path": "/models/Llama-3.1-8B-Instruct", "served_model_name": "llama-3.1-8b"}
JUDGE = {"type": "vllm", "image": "/images/vllm.sif", "checkpoint_path": "/models/Qwen2.5-7B",
         "served_model_name": "qwen-judge", "max_model_len": 8192}
# NeMo Evaluator's references: in params.extra (nested) and in a task's environment
JUDGED_TASKS = [{"name": "judged", "params": {"extra": {"judge": {
    "url": "auxiliary_deployments.judge.chat_url",
    "model_id": "auxiliary_deployments.judge.model_id"}}},
    "env_vars": {"JUDGE_BASE": "auxiliary_deployments.judge.url",
                 "JUDGE_NOTE": "judge=auxiliary_deployments.judge.model_id at "
                               "auxiliary_deployments.judge.completions_url"}},
    {"name": "boxed_chat"}]


def shape(profile: str, name: str) -> tuple[dict[str, Any], list[str]]:
    gpus = PROFILES[profile]
    host = ["deployment.runtime=host"] if profile in HOST_ONLY else []
    run: dict[str, Any] = {"evaluation": {"tasks": TASKS}}
    if name == "single-tp":
        run["deployment"] = {"type": "vllm", **MODEL, "tensor_parallel_size": gpus}
        return run, host
    if name == "dp":
        run["deployment"] = {"type": "vllm", **MODEL, "tensor_parallel_size": max(1, gpus // 2)}
        return run, [*host, "execution.nodes=2"]
    if name == "multinode":
        run["deployment"] = {"type": "vllm", **MODEL, "tensor_parallel_size": gpus,
                             "pipeline_parallel_size": 2, "max_model_len": 32768}
        return run, [*host, "execution.nodes=2"]
    if name == "external":
        run["deployment"] = {"type": "none"}
        run["target"] = {"api_endpoint": {
            "url": "https://api.example.org/v1/chat/completions", "model_id": "vendor/model-x",
            "api_key_name": "EXAMPLE_API_KEY"}}
        return run, []
    if name == "command":
        run["deployment"] = {"type": "command", "served_model_name": "toy",
                             "command": 'my-server --listen "0.0.0.0:$PORT" --model /models/toy',
                             "gpus_per_instance": gpus, "health_path": "/ping",
                             "runtime": "host"}
        return run, ["execution.nodes=2"]
    raise AssertionError(name)


CASES: list[tuple[str, str, dict[str, Any], list[str], dict[str, Any]]] = [
    (profile, name, *shape(profile, name), {})
    for profile in PROFILES for name in ("single-tp", "dp", "multinode", "external", "command")
]
CASES += [
    ("slurm", "multinode-ray",
     {"evaluation": {"tasks": TASKS}, "deployment": {
         "type": "vllm", **MODEL, "tensor_parallel_size": 8, "pipeline_parallel_size": 2,
         "multi_node_backend": "ray"}}, ["execution.nodes=2"], {}),
    ("slurm", "sglang",
     {"evaluation": {"tasks": TASKS, "max_concurrent_tasks": 2}, "deployment": {
         "type": "sglang", "image": "docker://lmsysorg/sglang:v0.5.2", **MODEL,
         "tensor_parallel_size": 4}}, [], {}),
    # NeMo Evaluator's clusters: pyxis (srun --container-image), a staged .sqsh server image,
    # harness images from the staged folder, NEL-style extra mounts.
    ("slurm", "pyxis",
     {"evaluation": {"tasks": TASKS}, "deployment": {
         "type": "vllm", **MODEL, "image": "/images/vllm-openai_v0.13.0.sqsh",
         "tensor_parallel_size": 4, "env_vars": {"VLLM_LOGGING_LEVEL": "lit:INFO"}}},
     ["execution.container_runtime=pyxis", "execution.image_dir=/images",
      "execution.hf_cache_dir=/shared/hf", "execution.dataset_dir=/shared/datasets",
      "execution.extra_binds=[/lustre/data:/data:ro]"], {}),
    ("slurm", "pyxis-multinode",
     {"evaluation": {"tasks": TASKS}, "deployment": {
         "type": "vllm", **MODEL, "image": "docker://nvcr.io/nvidia/vllm:25.09-py3",
         "tensor_parallel_size": 8, "pipeline_parallel_size": 2}},
     ["execution.container_runtime=pyxis", "execution.nodes=2"], {}),
    # auxiliary deployments (a judge, docs/judge.md): on a node of its own; a slice of the
    # model's node (8 GPUs: judge TP=2, model TP=2 x 3); an external API; the sweep's judge job
    ("slurm", "judge-own-node",
     {"evaluation": {"tasks": JUDGED_TASKS}, "deployment": {
         "type": "vllm", **MODEL, "image": "/images/vllm.sif", "tensor_parallel_size": 8},
      "auxiliary_deployments": {"judge": {**JUDGE, "tensor_parallel_size": 4}}}, [], {}),
    ("slurm", "judge-slice",
     {"evaluation": {"tasks": JUDGED_TASKS}, "deployment": {
         "type": "vllm", **MODEL, "image": "/images/vllm.sif", "tensor_parallel_size": 2},
      "auxiliary_deployments": {"judge": {**JUDGE, "num_nodes": 0, "tensor_parallel_size": 2,
                                          "env_prefix": "GRADER"}}}, [], {}),
    ("slurm", "judge-external",
     {"evaluation": {"tasks": JUDGED_TASKS}, "deployment": {
         "type": "vllm", **MODEL, "image": "/images/vllm.sif", "tensor_parallel_size": 8},
      "auxiliary_deployments": {"judge": {
          "type": "none", "url": "https://judge.example.org/api/v1", "model_id": "vendor/judge",
          "api_key_name": "JUDGE_API_KEY"}}}, [], {}),
    ("local-dev", "judge-sweep",
     {"evaluation": {"tasks": JUDGED_TASKS}, "deployment": {"type": "vllm", **MODEL,
                                                           "runtime": "host"},
      "models": [{"name": "a", "checkpoint_path": "/models/a"},
                 {"name": "b", "checkpoint_path": "/models/b"}],
      "auxiliary_deployments": {"judge": {**JUDGE, "scope": "sweep", "runtime": "host"}}},
     [], {"array": 2}),
    # NeMo Evaluator's form with the CPU vLLM preset (the dev cluster's): a slice of node 0
    ("local-dev", "judge-vllm-cpu",
     {"defaults": ["deployment/vllm-cpu@auxiliary_deployments.judge", "_self_"],
      "evaluation": {"tasks": JUDGED_TASKS},
      "deployment": {"type": "vllm", **MODEL, "runtime": "host"},
      "auxiliary_deployments": {"judge": {"checkpoint_path": "/models/SmolLM2-135M-Instruct",
                                          "served_model_name": "smol-judge", "num_nodes": 0}}},
     [], {}),
    ("local-dev", "array",
     {"evaluation": {"tasks": TASKS}, "deployment": {"type": "vllm", **MODEL,
                                                     "runtime": "host"}}, [], {"array": 3}),
]


def golden_path(profile: str, name: str) -> Path:
    return GOLDEN / f"{profile}__{name}.sbatch"


@pytest.mark.parametrize(("profile", "name", "run", "overrides", "extra"), CASES,
                         ids=[f"{c[0]}__{c[1]}" for c in CASES])
def test_golden(render: RenderFn, profile: str, name: str, run: dict[str, Any],
                overrides: list[str], extra: dict[str, Any]) -> None:
    from hpceval.render import ArraySpec

    ctx = {"array": ArraySpec(extra["array"])} if "array" in extra else {}
    if profile == "local":  # gpus_per_node: auto counts this machine's: pin a 1-GPU workstation
        overrides = ["execution.gpus_per_node=1", *overrides]
    text = render(profile, run, overrides, **ctx)
    path = golden_path(profile, name)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        refuse_update_in_ci()
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {path}; create it with UPDATE_GOLDEN=1"
    assert text == path.read_text(), (
        f"{path.name} differs from the rendered script; if the change is intended, "
        "run UPDATE_GOLDEN=1 pytest tests/render and review the diff")


def refuse_update_in_ci() -> None:
    """A golden test that rewrites its file compares it with itself: in CI that would pass
    whatever the templates render, so UPDATE_GOLDEN there is a failure, not an update."""
    if os.environ.get("CI"):
        pytest.fail("UPDATE_GOLDEN=1 is set in CI (CI is set): golden files are regenerated "
                    "by hand and reviewed, never in CI; unset UPDATE_GOLDEN")


def test_update_golden_is_refused_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="never in CI"):
        refuse_update_in_ci()
    monkeypatch.delenv("CI")
    refuse_update_in_ci()  # by hand: allowed


# Scripts other than a model's job, rendered by their own pure function: name -> render
WATCH_TICK = "slurm__watch-tick"


def test_golden_watch_tick(tmp_path: Path) -> None:
    """A checkpoint watch's tick job (hpceval.render.watch): what docs/watch.md shows."""
    from render_helpers import resolve

    from hpceval.render.watch import render_tick

    resolved = resolve("slurm", {"evaluation": {"tasks": TASKS}, "deployment": {
        "type": "vllm", **MODEL}}, tmp_path, ["execution.account=proj-42",
                                               "execution.qos=normal"])
    text = render_tick(resolved, watch_dir="/scratch/alice/evals/watch-20260101-120000-abcdef",
                       watch_id="watch-20260101-120000-abcdef",
                       python="/shared/hpceval/venv/bin/python",
                       checkpoints="/lustre/alice/train/run-7/checkpoints", interval_s=600)
    path = GOLDEN / f"{WATCH_TICK}.sbatch"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        refuse_update_in_ci()
        path.write_text(text)
    assert path.exists(), f"no golden file {path}; create it with UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{path.name} differs from the rendered script"


def test_goldens_are_valid_bash() -> None:
    paths = sorted(GOLDEN.glob("*.sbatch"))
    assert len(paths) >= len(CASES)
    for path in paths:
        bash_syntax(path)
    shellcheck(paths)


def test_no_stale_goldens() -> None:
    expected = {golden_path(c[0], c[1]).name for c in CASES} | {f"{WATCH_TICK}.sbatch"}
    expected.add("slurm__judge-sweep.sbatch")  # test_judge_sweep_render.py: a sweep's judge job
    assert {p.name for p in GOLDEN.glob("*.sbatch")} == expected
