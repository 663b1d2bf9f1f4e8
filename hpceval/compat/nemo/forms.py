"""NeMo Evaluator forms older or looser than 0.2.x's schema, read with the launcher's meaning.

``translate`` translates the launcher's keys layer by layer; the forms here either sit inside
``nemo_evaluator_config`` (``config.extra``, ``env_vars``, 0.1.x ``max_tokens``), or need the
merged config (``execution.mode``) or the environment hpceval runs in (an unprefixed env value
naming a set variable). Each is accepted with a note saying what it became; none is dropped
silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hpceval.errors import ConfigIssue
from hpceval.shell import BARE_NAME


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
