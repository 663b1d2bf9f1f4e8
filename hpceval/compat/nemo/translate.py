"""Accept NeMo Evaluator launcher files where the meaning carries over; say so where it does not.

Each layer (profile, run file, override) is translated before it is merged, so `config show`
can still say which file a value came from.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from hpceval.compat.nemo import adapters as nemo_adapters
from hpceval.compat.nemo.export import translate_export
from hpceval.compat.nemo.forms import config_alias, execution_mode, max_tokens, nemo_config_extras
from hpceval.engines import ENGINES
from hpceval.errors import ConfigError, ConfigIssue

# Launcher key -> hpceval key (same meaning, other name).
RENAMED = {
    "execution.num_nodes": "execution.nodes",
}

# Launcher features hpceval does not have: refused (exit 2), never run with another meaning.
UNSUPPORTED = {
    "execution.lepton_platform": (
        "Lepton deployments are out of scope for hpceval (it runs on Slurm clusters and "
        "workstations)", "use execution: slurm/default or local"),
    "deployment.lepton_config": (
        "Lepton deployments are out of scope for hpceval (it runs on Slurm clusters and "
        "workstations)", "use execution: slurm/default or local"),
}
# defaults: entries naming launcher configs that hpceval has no counterpart for.
UNSUPPORTED_DEFAULTS = {
    "execution": {"lepton": UNSUPPORTED["execution.lepton_platform"]},
    "deployment": {
        "nim": ("NIM deployments are out of scope for hpceval (NIM containers manage their own "
                "serving)", "serve the model with deployment: vllm or sglang, or start the NIM "
                "yourself and point target.api_endpoint.url at it with deployment: none"),
        "trtllm": ("TensorRT-LLM deployments are not supported",
                   "use deployment: vllm or sglang, or deployment: generic with your command"),
    },
}


def check_defaults_entry(group: str, name: str) -> None:
    """Refuse a launcher config with no counterpart, in words, before any file is searched."""
    for prefix, (what, fix) in UNSUPPORTED_DEFAULTS.get(group, {}).items():
        if name == prefix or name.startswith(prefix + "/"):
            raise ConfigError.at(f"defaults.{group}", f"{name}: {what}", fix)


# Launcher keys with no meaning here, and why: reported, never silently dropped.
DROPPED = {
    "execution.username": "hpceval runs as the user who calls it",
    "execution.ntasks_per_node": "hpceval derives tasks per node from the deployment layout",
    "execution.subproject": "use execution.job_name or execution.sbatch_comment",
    "execution.deployment": "hpceval derives server steps from the deployment layout",
    "execution.proxy": "hpceval balances instances with its own in-job proxy",
    "deployment.endpoints": "hpceval uses the server's OpenAI routes; deployment.health_path "
    "was taken from endpoints.health",
    "deployment.pre_cmd": "put site set-up in execution.pre_commands",
    "deployment.base_command": "hpceval builds the server command from the deployment keys",
    "deployment.n_tasks": "hpceval derives server steps from the deployment layout",
}


def _has(data: dict[str, Any], path: str) -> bool:
    *parents, last = path.split(".")
    node: Any = data
    for part in parents:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return isinstance(node, dict) and last in node


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
    issues = [ConfigIssue(path, f"{what} (in the {source})", fix)
              for path, (what, fix) in UNSUPPORTED.items() if _has(layer, path)]
    if issues:
        raise ConfigError(issues)
    shared_env = layer.pop("env_vars", None)
    if isinstance(shared_env, dict):
        # NeMo Evaluator 0.2.7's top-level env_vars reach the server and every task; the
        # sections' own env_vars win over them.
        for section in ("deployment", "evaluation"):
            mine = layer.setdefault(section, {})
            if isinstance(mine, dict):
                own = mine.get("env_vars")
                mine["env_vars"] = {**shared_env, **(own if isinstance(own, dict) else {})}
    elif shared_env is not None:
        layer["env_vars"] = shared_env  # reported as a type error by the schema
    for old, new in RENAMED.items():
        found, value = _pop(layer, old)
        if found:
            _put(layer, new, value)
    _translate_execution(layer, notes, source)
    _translate_deployment(layer.get("deployment"), "deployment", notes, source)
    aux = layer.get("auxiliary_deployments")
    for name, entry in aux.items() if isinstance(aux, dict) else ():
        where = f"auxiliary_deployments.{name}"
        _translate_deployment(entry, where, notes, source)
        for key in ("endpoints", "pre_cmd", "base_command", "n_tasks"):
            if isinstance(entry, dict) and entry.pop(key, None) is not None:
                why = DROPPED["deployment." + key]
                notes.append(f"{source}: {where}.{key} is ignored: {why}")
        if isinstance(entry, dict) and "port" in entry and not source.startswith("preset"):
            notes.append(f"{source}: {where}.port is not used: a judge's servers take ports of "
                         "the job's own port block, beside the model's (docs/judge.md)")
    issues.clear()
    translate_export(layer, notes, issues, source)
    adapters: dict[str, Any] = {}  # where -> adapter_config, applied together below
    _translate_params(layer.get("evaluation"), "evaluation", notes, source, issues, adapters)
    evaluation = layer.get("evaluation")
    per_task: dict[str, Any] = {}
    if isinstance(evaluation, dict) and isinstance(evaluation.get("tasks"), list):
        for task in evaluation["tasks"]:
            if isinstance(task, dict):
                where = f"evaluation.tasks.{task.get('name')}"
                translate_task(task, where, notes, source, issues, adapters)
                if where in adapters:
                    per_task[str(task.get("name"))] = adapters.pop(where)
    target = layer.get("target")
    shared = adapters.pop("evaluation", None)
    if isinstance(target, dict) and isinstance(target.get("api_endpoint"), dict) \
            and "adapter_config" in target["api_endpoint"]:
        shared = nemo_adapters.merge_settings(target["api_endpoint"].pop("adapter_config"), shared)
    if shared is not None or per_task:
        nemo_adapters.apply(layer.setdefault("evaluation", {}), shared, per_task, source, notes,
                            issues)
    if issues:
        raise ConfigError(issues)
    for path, why in DROPPED.items():
        found, _ = _pop(layer, path)
        if found:
            notes.append(f"{source}: {path} is ignored: {why}")
    found, _ = _pop(layer, "target.api_endpoint.api_key")
    if found:
        notes.append(f"{source}: target.api_endpoint.api_key is ignored: never write a key into a "
                     "config; set target.api_endpoint.api_key_name to the variable's NAME")
    return notes


_HF_HOMES = ("/root/.cache/huggingface",)  # HF_HOME inside the launcher's containers


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
                if str(dst).rstrip("/") in _HF_HOMES and \
                        execution.setdefault("hf_cache_dir", src) == src:
                    # The launcher's way to share the Hugging Face cache; here HF_HOME is
                    # set per task, so a bind alone would be shadowed.
                    continue
                if f"{src}:{dst}" not in binds:  # the same folder for server and tasks
                    binds.append(f"{src}:{dst}")
        if mounts.pop("mount_home", None):
            notes.append(f"{source}: execution.mounts.mount_home is ignored: containers run "
                         "with --cleanenv and explicit binds; add $HOME to extra_binds if needed")
        if not mounts:
            execution.pop("mounts")
    instances = execution.pop("num_instances", None)
    if instances is not None:
        # The launcher runs num_instances servers, each with vLLM's --data-parallel-size
        # replicas inside; here every replica is its own instance behind the in-job proxy.
        # no total: a node-wide server's DP is data_parallel_size_local (NEL's haproxy example)
        deployment = layer.setdefault("deployment", {})
        key = "data_parallel_size_local" if "data_parallel_size" not in deployment \
            and "data_parallel_size_local" in deployment else "data_parallel_size"
        inner = deployment.get(key)
        total = instances * inner if isinstance(inner, int) and isinstance(instances, int) \
            else instances
        deployment["data_parallel_size"] = total
        notes.append(f"{source}: execution.num_instances={instances} x {key}="
                     f"{inner or 1} became deployment.data_parallel_size={total} (instances "
                     "behind the in-job proxy)")


def _translate_deployment(deployment: Any, where: str, notes: list[str], source: str) -> None:
    if not isinstance(deployment, dict):
        return
    kind = deployment.get("type")
    if isinstance(kind, str):
        check_defaults_entry("deployment", kind)
    if kind == "generic":
        deployment["type"] = "command"
    elif kind == "vllm_ray":
        deployment["type"] = "vllm"
        deployment.setdefault("multi_node_backend", "ray")
    backend = deployment.pop("distributed_executor_backend", None)
    if backend == "ray":
        deployment.setdefault("multi_node_backend", "ray")
    image = deployment.get("image")
    if isinstance(image, str) and is_registry_reference(image):
        deployment["image"] = "docker://" + image
    if isinstance(deployment.get("extra_args"), str):
        deployment["extra_args"] = shlex.split(deployment["extra_args"])
    endpoints = deployment.get("endpoints")
    if isinstance(endpoints, dict) and isinstance(endpoints.get("health"), str):
        deployment.setdefault("health_path", endpoints["health"])


def is_registry_reference(image: str) -> bool:
    """``vllm/vllm-openai:v0.13.0`` (the launcher's form) names a registry image, not a file."""
    return ("://" not in image and not image.startswith(("/", ".", "~", "$"))
            and not image.endswith((".sif", ".sqsh", ".img", ".simg")))


# An OmegaConf interpolation (${oc.env:USER}, ${deployment.port}); $VAR and ${VAR} are ours.
_INTERPOLATION = re.compile(r"\$\{(?:oc\.\w+:|select_not_null:|[A-Za-z_]\w*(?:\.\w+)+\})")


def _starts_its_own(kind: object) -> bool:
    """Whether hpceval builds the server command of an engine itself (vLLM, SGLang): NEL's
    launcher ``command`` is then not needed (not ``command``, whose command is the server)."""
    if not isinstance(kind, str) or kind not in ENGINES:
        return False
    engine = ENGINES.get(kind)
    return engine.serves and not engine.needs_command


def translate_merged(data: dict[str, Any]) -> list[str]:
    """What only the merged config can tell (the type may come from a preset, a key from a
    file): launcher commands for servers hpceval starts itself, and interpolations."""
    notes: list[str] = []
    aux = data.get("auxiliary_deployments")
    deployments = [("deployment", data.get("deployment"))] + [
        (f"auxiliary_deployments.{name}", entry)
        for name, entry in (aux.items() if isinstance(aux, dict) else ())]
    for where, deployment in deployments:
        if isinstance(deployment, dict) and _starts_its_own(deployment.get("type")) \
                and deployment.get("command") is not None:
            deployment.pop("command")
            notes.append(f"{where}.command is ignored for a {deployment['type']} deployment: "
                         "hpceval starts the server itself from tensor/pipeline/"
                         "data_parallel_size (one instance per replica, spread over the nodes), "
                         f"extra_args and env_vars; put server flags in {where}.extra_args, or "
                         f"set {where}.type: command to run your own command")
    endpoint = (data.get("target") or {}).get("api_endpoint")
    if isinstance(endpoint, dict) and endpoint.get("api_key_name") == "":
        endpoint.pop("api_key_name")  # the launcher's quick start: "" means no key
    issues = execution_mode(data, notes)
    issues += [ConfigIssue(path, f"{value[:80]!r} is an OmegaConf interpolation, which hpceval "
                          "does not evaluate", "write the value itself (for $USER: $USER in "
                          "path keys, or remove the key)")
              for path, value in _leaf_strings(data, "") if _INTERPOLATION.search(value)]
    if issues:
        raise ConfigError(issues)
    return notes


def _leaf_strings(data: Any, prefix: str) -> list[tuple[str, str]]:
    if isinstance(data, dict):
        return [leaf for k, v in data.items()
                for leaf in _leaf_strings(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(data, list):
        return [leaf for i, v in enumerate(data) for leaf in _leaf_strings(v, f"{prefix}[{i}]")]
    return [(prefix, data)] if isinstance(data, str) else []


def translate_task(task: dict[str, Any], where: str, notes: list[str], source: str,
                    issues: list[ConfigIssue], adapters: dict[str, Any]) -> None:
    _translate_params(task, where, notes, source, issues, adapters)
    container = task.get("container")
    if isinstance(container, str) and is_registry_reference(container):
        task["container"] = "docker://" + container


# EvaluationConfig keys the launcher accepts beside params, which the catalogue decides here.
_CONFIG_KEYS_IGNORED = ("output_dir", "supported_endpoint_types", "required_capabilities", "type")


def _translate_params(node: Any, where: str, notes: list[str], source: str,
                      issues: list[ConfigIssue], adapters: dict[str, Any]) -> None:
    if not isinstance(node, dict):
        return
    config_alias(node, where, notes, source)
    nec = node.get("nemo_evaluator_config")
    if isinstance(nec, dict):
        _translate_nec(node, nec, where, notes, source, issues, adapters)
    max_tokens(node.get("params"), f"{where}.params", notes, source)


def _translate_nec(node: dict[str, Any], nec: dict[str, Any], where: str, notes: list[str],
                   source: str, issues: list[ConfigIssue], adapters: dict[str, Any]) -> None:
    params = (nec.get("config") or {}).get("params")
    if isinstance(params, dict):
        mine = node.setdefault("params", {})
        for k, v in params.items():
            mine.setdefault(k, v)
        del nec["config"]["params"]
    nemo_config_extras(node, nec, where, notes, source)  # after params: params.extra wins
    if nec.get("config") == {}:
        del nec["config"]
    if "target" in nec:
        target = nec.pop("target")
        endpoint = target.get("api_endpoint") if isinstance(target, dict) else None
        if isinstance(endpoint, dict) and "adapter_config" in endpoint:
            adapters[where] = endpoint.pop("adapter_config")
        if endpoint or (isinstance(target, dict) and set(target) - {"api_endpoint"}):
            notes.append(f"{source}: {where}.nemo_evaluator_config.target keys other than "
                         "api_endpoint.adapter_config are ignored (the endpoint is "
                         "target.api_endpoint)")
    config = nec.pop("config", None)
    for key in sorted(config) if isinstance(config, dict) else []:
        if key in _CONFIG_KEYS_IGNORED:
            notes.append(f"{source}: {where}.nemo_evaluator_config.config.{key} is ignored: "
                         "hpceval takes it from its task catalogue")
        else:
            issues.append(ConfigIssue(
                f"{where}.nemo_evaluator_config.config.{key}", "is not a NeMo Evaluator "
                "setting (its evaluation config refuses unknown keys too)",
                "parameters go under nemo_evaluator_config.config.params (params.extra for "
                "harness-specific ones)"))
    for key in sorted(nec):
        issues.append(ConfigIssue(f"{where}.nemo_evaluator_config.{key}", "is not a NeMo "
                                  "Evaluator setting", "use config.params or target"))
    del node["nemo_evaluator_config"]
