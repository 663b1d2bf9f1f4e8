"""Accept NeMo Evaluator launcher files where the meaning carries over; say so where it does not.

Each layer (profile, run file, override) is translated before it is merged, so `config show`
can still say which file a value came from.
"""

from __future__ import annotations

import shlex
from typing import Any

# Launcher key -> hpceval key (same meaning, other name).
RENAMED = {
    "execution.num_nodes": "execution.nodes",
}

# Launcher keys with no meaning here, and why: reported, never silently dropped.
DROPPED = {
    "execution.hostname": "hpceval runs sbatch on the login node itself (no ssh hop); "
    "run hpceval there",
    "execution.username": "hpceval runs as the user who calls it",
    "execution.ntasks_per_node": "hpceval derives tasks per node from the deployment layout",
    "execution.subproject": "use execution.job_name or execution.sbatch_comment",
    "execution.auto_export": "run `hpceval export` after the run (nothing installs packages "
    "on compute nodes)",
    "execution.deployment": "hpceval derives server steps from the deployment layout",
    "execution.proxy": "hpceval balances instances with its own in-job proxy",
    "deployment.endpoints": "hpceval uses the server's OpenAI routes; deployment.health_path "
    "was taken from endpoints.health",
    "deployment.pre_cmd": "put site set-up in execution.pre_commands",
    "evaluation.nemo_evaluator_config.target": "interceptors are configured per run in hpceval",
    "target.api_endpoint.adapter_config": "interceptors are configured per run in hpceval",
}


def _pop(data: dict[str, Any], path: str) -> tuple[bool, Any]:
    *parents, last = path.split(".")
    node: Any = data
    for part in parents:
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    if isinstance(node, dict) and last in node:
        return True, node.pop(last)
    return False, None


def _put(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
    node.setdefault(last, value)


def translate(layer: dict[str, Any], source: str) -> list[str]:
    """Rewrite launcher keys in place; return notes for the user."""
    notes: list[str] = []
    for old, new in RENAMED.items():
        found, value = _pop(layer, old)
        if found:
            _put(layer, new, value)
    _translate_execution(layer, notes, source)
    _translate_deployment(layer, notes, source)
    _translate_params(layer.get("evaluation"), "evaluation", notes, source)
    evaluation = layer.get("evaluation")
    if isinstance(evaluation, dict) and isinstance(evaluation.get("tasks"), list):
        for task in evaluation["tasks"]:
            if isinstance(task, dict):
                _translate_params(task, f"evaluation.tasks.{task.get('name')}", notes, source)
    for path, why in DROPPED.items():
        found, _ = _pop(layer, path)
        if found:
            notes.append(f"{source}: {path} is ignored: {why}")
    found, _ = _pop(layer, "target.api_endpoint.api_key")
    if found:
        notes.append(f"{source}: target.api_endpoint.api_key is ignored: never write a key into a "
                     "config; set target.api_endpoint.api_key_name to the variable's NAME")
    return notes


def _translate_execution(layer: dict[str, Any], notes: list[str], source: str) -> None:
    execution = layer.get("execution")
    if not isinstance(execution, dict):
        return
    gres = execution.get("gres")
    if isinstance(gres, str) and gres.startswith("gpu"):
        del execution["gres"]
        parts = gres.split(":")
        execution.setdefault("gpu_request", "gres")
        if parts[-1].isdigit():
            execution.setdefault("gpus_per_node", int(parts[-1]))
        if len(parts) == 3:
            execution.setdefault("gpu_type", parts[1])
    env = execution.get("env_vars")
    if isinstance(env, dict) and ({"deployment", "evaluation"} & set(env)):
        execution.pop("env_vars")
        for section in ("deployment", "evaluation"):
            if isinstance(env.get(section), dict):
                layer.setdefault(section, {}).setdefault("env_vars", {}).update(env[section])
    mounts = execution.get("mounts")
    if isinstance(mounts, dict):
        binds = execution.setdefault("extra_binds", [])
        for section in ("deployment", "evaluation"):
            for src, dst in (mounts.pop(section, None) or {}).items():
                binds.append(f"{src}:{dst}")
        if mounts.pop("mount_home", None):
            notes.append(f"{source}: execution.mounts.mount_home is ignored: containers run "
                         "with --cleanenv and explicit binds; add $HOME to extra_binds if needed")
        if not mounts:
            execution.pop("mounts")
    instances = execution.pop("num_instances", None)
    if instances is not None:
        layer.setdefault("deployment", {}).setdefault("data_parallel_size", instances)
        notes.append(f"{source}: execution.num_instances={instances} became "
                     "deployment.data_parallel_size (instances behind the in-job proxy)")


def _translate_deployment(layer: dict[str, Any], notes: list[str], source: str) -> None:
    deployment = layer.get("deployment")
    if not isinstance(deployment, dict):
        return
    kind = deployment.get("type")
    if kind == "generic":
        deployment["type"] = "command"
    elif kind == "vllm_ray":
        deployment["type"] = "vllm"
        deployment.setdefault("multi_node_backend", "ray")
    if isinstance(deployment.get("extra_args"), str):
        deployment["extra_args"] = shlex.split(deployment["extra_args"])
    endpoints = deployment.get("endpoints")
    if isinstance(endpoints, dict) and isinstance(endpoints.get("health"), str):
        deployment.setdefault("health_path", endpoints["health"])


def _translate_params(node: Any, where: str, notes: list[str], source: str) -> None:
    if not isinstance(node, dict):
        return
    nec = node.get("nemo_evaluator_config")
    if not isinstance(nec, dict):
        return
    params = (nec.get("config") or {}).get("params")
    if isinstance(params, dict):
        mine = node.setdefault("params", {})
        for k, v in params.items():
            mine.setdefault(k, v)
        del nec["config"]["params"]
        if not nec["config"]:
            del nec["config"]
    if isinstance(nec.get("target"), dict):
        notes.append(f"{source}: {where}.nemo_evaluator_config.target is ignored: interceptors "
                     "are configured per run in hpceval")
        del nec["target"]
    if nec:
        notes.append(f"{source}: {where}.nemo_evaluator_config keys {sorted(nec)} are ignored")
    del node["nemo_evaluator_config"]
