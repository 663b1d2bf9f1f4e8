"""NeMo Evaluator forms older or looser than 0.2.x's schema, read with the launcher's meaning.

``nemo_compat`` translates the launcher's keys layer by layer; the forms here either sit
inside ``nemo_evaluator_config`` (``config.extra``, ``env_vars``, 0.1.x ``max_tokens``), or
need the merged config (``execution.mode``) or the environment hpceval runs in (an
unprefixed env value naming a set variable, the local profile's ``gpus_per_node: auto`` and
``container_runtime: auto``).
Each is accepted with a note saying what it became; none is dropped silently.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Mapping
from typing import Any

from hpceval.config.checks import BARE_NAME
from hpceval.config.errors import ConfigIssue
from hpceval.engines import engine_for, engine_names
from hpceval.runtimes import IMAGE, from_image


def nemo_config_extras(node: dict[str, Any], nec: dict[str, Any], where: str,
                       notes: list[str], source: str) -> None:
    """``nemo_evaluator_config.config.extra`` and ``nemo_evaluator_config.env_vars`` of a run
    or a task, moved where hpceval reads them (before the unknown keys are refused)."""
    config = nec.get("config")
    extra = config.pop("extra", None) if isinstance(config, dict) else None
    if isinstance(extra, dict):
        # NEL's examples put harness settings (a judge, n_samples) in config.extra; the
        # harness reads them from params.extra, where the file's params.extra values win.
        params = node.setdefault("params", {})
        if isinstance(params, dict):
            mine = params.get("extra")
            params["extra"] = {**extra, **(mine if isinstance(mine, dict) else {})}
            notes.append(f"{source}: {where}.nemo_evaluator_config.config.extra was read as "
                         "config.params.extra (the harness-specific parameters)")
    elif extra is not None and isinstance(config, dict):
        config["extra"] = extra  # not a mapping: refused with the other unknown keys
    env = nec.pop("env_vars", None)
    if isinstance(env, dict):
        own = node.get("env_vars")
        node["env_vars"] = {**env, **(own if isinstance(own, dict) else {})}
        notes.append(f"{source}: {where}.nemo_evaluator_config.env_vars became {where}.env_vars "
                     "(the task's own env_vars win)")
    elif env is not None:
        nec["env_vars"] = env


def config_alias(node: dict[str, Any], where: str, notes: list[str], source: str) -> None:
    """The launcher reads a run's or task's ``nemo_evaluator_config``, or else ``config``, its
    older name (common/helpers.py, get_eval_factory_config); NEL's own examples use both."""
    if "nemo_evaluator_config" not in node and isinstance(node.get("config"), dict):
        node["nemo_evaluator_config"] = node.pop("config")
        notes.append(f"{source}: {where}.config is NeMo Evaluator's older name of "
                     f"{where}.nemo_evaluator_config: read as it")


def max_tokens(params: Any, where: str, notes: list[str], source: str) -> None:
    """NeMo Evaluator 0.1.x called the generation limit ``max_tokens``."""
    if isinstance(params, dict) and "max_tokens" in params:
        value = params.pop("max_tokens")
        params.setdefault("max_new_tokens", value)
        notes.append(f"{source}: {where}.max_tokens is NeMo Evaluator 0.1.x's name: read as "
                     "max_new_tokens (write max_new_tokens)")


# NEL's local executor runs a model's tasks one after another (sequential) or all at once.
_MODES = ("sequential", "parallel")


def execution_mode(data: dict[str, Any], notes: list[str]) -> list[ConfigIssue]:
    """``execution.mode`` of the merged config as ``evaluation.max_concurrent_tasks``."""
    execution = data.get("execution")
    if not isinstance(execution, dict) or "mode" not in execution:
        return []
    mode = execution.pop("mode")
    if mode not in _MODES:
        return [ConfigIssue("execution.mode", f"is {mode!r}", "use sequential or parallel "
                            "(or evaluation.max_concurrent_tasks)")]
    evaluation = data.setdefault("evaluation", {})
    if not isinstance(evaluation, dict) or "max_concurrent_tasks" in evaluation:
        notes.append("execution.mode is ignored: evaluation.max_concurrent_tasks is set")
        return []
    tasks = evaluation.get("tasks")
    count = len(tasks) if isinstance(tasks, list) and tasks else 1
    evaluation["max_concurrent_tasks"] = 1 if mode == "sequential" else count
    notes.append(f"execution.mode={mode} became evaluation.max_concurrent_tasks="
                 f"{evaluation['max_concurrent_tasks']} (tasks of one model at once, against "
                 "one server)")
    return []


def _env_groups(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    groups: list[tuple[str, dict[str, Any]]] = []
    for section in ("deployment", "evaluation"):
        env = (data.get(section) or {}).get("env_vars") if isinstance(data.get(section),
                                                                       dict) else None
        if isinstance(env, dict):
            groups.append((f"{section}.env_vars", env))
    tasks = (data.get("evaluation") or {}).get("tasks") if isinstance(
        data.get("evaluation"), dict) else None
    for task in tasks if isinstance(tasks, list) else []:
        if isinstance(task, dict) and isinstance(task.get("env_vars"), dict):
            groups.append((f"evaluation.tasks.{task.get('name')}.env_vars", task["env_vars"]))
    return groups


def bare_host_names(data: dict[str, Any], env: Mapping[str, str]) -> list[str]:
    """An unprefixed value that names a variable set here (``HF_TOKEN: HF_TOKEN``, NEL 0.1.x's
    meaning) is passed as that host variable, with a note; anything else unprefixed stays as
    written and is refused by the checks (it may be text, or a name that is not set)."""
    notes: list[str] = []
    for where, group in _env_groups(data):
        for var, value in group.items():
            if isinstance(value, str) and BARE_NAME.match(value) and value in env:
                group[var] = f"host:{value}"
                notes.append(f"{where}.{var}: {value!r} has no prefix: passed as the host "
                             f"variable ${value} (NEL 0.1.x's meaning, deprecated: write "
                             f"host:{value})")
    return notes


AUTO = "auto"


def count_gpus(env: Mapping[str, str],
               which: Callable[[str], str | None] = shutil.which) -> int | None:
    """The GPUs this machine gives a job: CUDA_VISIBLE_DEVICES when set, else ``nvidia-smi
    -L``'s lines; None when neither can tell."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [d for d in visible.split(",") if d.strip() and d.strip() != "-1"]
        return len(ids)
    smi = which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def local_gpus(data: dict[str, Any], env: Mapping[str, str],
               which: Callable[[str], str | None] = shutil.which
               ) -> tuple[list[str], list[ConfigIssue]]:
    """``execution.gpus_per_node: auto`` (the local profile's): the GPUs this machine has.
    Unknown (no nvidia-smi, CUDA_VISIBLE_DEVICES unset): one instance's worth, with a note."""
    execution = data.get("execution")
    if isinstance(execution, dict) and "gpus_per_node" in execution \
            and execution["gpus_per_node"] is None:
        return _no_gpus(data, execution)
    if not isinstance(execution, dict) or execution.get("gpus_per_node") != AUTO:
        return [], []
    if not _runs_here(execution):
        return [], [ConfigIssue("execution.gpus_per_node", "is auto, which counts the GPUs of "
                                "the machine hpceval runs on: only for execution.type local",
                                "write the GPUs per node of the cluster's nodes")]
    found = count_gpus(env, which)
    if found is not None:
        execution["gpus_per_node"] = found
        return [f"execution.gpus_per_node: auto found {found} GPU(s) on this machine"], []
    dep = data.get("deployment") if isinstance(data.get("deployment"), dict) else {}
    assert isinstance(dep, dict)
    need, kind = 1, dep.get("type")
    if kind in engine_names() and engine_for(str(kind)).serves \
            and engine_for(str(kind)).parallel:  # TP x PP GPUs per instance
        tp, pp = dep.get("tensor_parallel_size", 1), dep.get("pipeline_parallel_size", 1)
        need = tp * pp if isinstance(tp, int) and isinstance(pp, int) else 1
    execution["gpus_per_node"] = need
    return [f"execution.gpus_per_node: auto could not count this machine's GPUs (no "
            f"nvidia-smi, CUDA_VISIBLE_DEVICES unset): using {need}, one instance's worth "
            "(set execution.gpus_per_node)"], []


# NEL's local executor runs the server and the harnesses with `docker run`; podman takes the
# same command line (hpceval.runtimes), so a machine with podman and no docker gets podman.
_LOCAL_RUNTIMES = ("docker", "podman")


def _runs_here(execution: dict[str, Any]) -> bool:
    """Whether the run's jobs run on this machine (its backend's ``runs_here``): only then
    can an ``auto`` value be found here (not under the default type, nor an unknown one)."""
    from hpceval.backends import BACKENDS, backend_for

    kind = execution.get("type")
    return isinstance(kind, str) and kind in BACKENDS and backend_for(kind).runs_here


def find_program(name: str) -> str | None:
    """shutil.which, looked up at call time (tests replace it: a machine with or without
    docker)."""
    return shutil.which(name)


def local_runtime(data: dict[str, Any], which: Callable[[str], str | None] | None = None
                  ) -> tuple[list[str], list[ConfigIssue]]:
    """``execution.container_runtime: auto`` (the local profile's): a run that serves its model
    from an image gets a container runtime as NEL's local executor does (docker, or podman
    where docker is absent; neither found: docker, which the job's checks then name); any
    other run keeps host-installed harnesses (none)."""
    execution = data.get("execution")
    if not isinstance(execution, dict) or execution.get("container_runtime") != AUTO:
        return [], []
    if not _runs_here(execution):
        return [], [ConfigIssue("execution.container_runtime", "is auto, which looks for "
                                "docker or podman on the machine hpceval runs on: only for "
                                "execution.type local", "write the site's runtime, e.g. "
                                "apptainer or pyxis")]
    dep = data.get("deployment") if isinstance(data.get("deployment"), dict) else {}
    assert isinstance(dep, dict)
    kind = dep.get("type")
    serves = kind in engine_names() and engine_for(str(kind)).serves
    if not (serves and from_image(str(dep.get("runtime", IMAGE)))):
        execution["container_runtime"] = "none"
        return [], []
    look = which or find_program
    found = next((name for name in _LOCAL_RUNTIMES if look(name)), None)
    chosen = found or _LOCAL_RUNTIMES[0]
    execution["container_runtime"] = chosen
    why = "found on this machine" if found else "neither docker nor podman found here"
    return [f"execution.container_runtime: auto chose {chosen} ({why}): the server and the "
            "harnesses run in containers, as NeMo Evaluator's local executor runs them "
            "(set execution.container_runtime to choose)"], []


def _no_gpus(data: dict[str, Any], execution: dict[str, Any]
             ) -> tuple[list[str], list[ConfigIssue]]:
    """``execution.gpus_per_node: null``: NeMo Evaluator's way to ask for no GPU (its examples
    that evaluate an endpoint elsewhere, ``deployment: none``). A CPU job, when nothing is served
    in it; a server of the job's own needs GPUs to be named."""
    dep = data.get("deployment") if isinstance(data.get("deployment"), dict) else {}
    assert isinstance(dep, dict)
    kind = dep.get("type", "none")
    if kind in engine_names() and engine_for(str(kind)).serves:
        return [], [ConfigIssue("execution.gpus_per_node", f"is null (no GPUs), but deployment "
                                f"{kind} serves the model in the job",
                                "give the GPUs per node, or use deployment: none with "
                                "target.api_endpoint.url")]
    execution["gpus_per_node"] = 0
    return ["execution.gpus_per_node: null (no GPU request, as NeMo Evaluator reads it): the "
            "job asks for no GPU"], []
