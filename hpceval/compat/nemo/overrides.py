"""A ``-o`` written in the launcher's terms (``evaluation.nemo_evaluator_config.config.params.x``,
``execution.num_nodes``, a task's ``nemo_evaluator_config``), as a layer to merge in hpceval's,
translated by the same rules as a file's layers (``translate``)."""

from __future__ import annotations

import copy
from typing import Any

from hpceval.compat import Translated
from hpceval.compat.nemo.translate import translate, translate_task
from hpceval.errors import ConfigError, ConfigIssue


def translate_override(path: list[str], value: Any, source: str) -> Translated | None:
    """A ``-o`` in the launcher's terms (``evaluation.nemo_evaluator_config.config.params.x``,
    ``execution.hostname``, ...) as a layer to merge in ours, with its notes; None when the
    key needs no translation. Task keys (``evaluation.tasks.<name>.…``) go through
    ``translate_task_override``."""
    layer: dict[str, Any] = {}
    node = layer
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = copy.deepcopy(value)
    original = copy.deepcopy(layer)
    notes = translate(layer, source)
    if layer == original and not notes:
        return None
    return layer, notes


def translate_task_override(task_name: str, rest: list[str], value: Any,
                            source: str) -> Translated | None:
    """The same for one task: ``rest`` is the key path inside the task."""
    task: dict[str, Any] = {"name": task_name}
    node = task
    for part in rest[:-1]:
        node = node.setdefault(part, {})
    node[rest[-1]] = copy.deepcopy(value)
    original = copy.deepcopy(task)
    notes: list[str] = []
    issues: list[ConfigIssue] = []
    adapters: dict[str, Any] = {}
    translate_task(task, f"evaluation.tasks.{task_name}", notes, source, issues, adapters)
    if adapters:  # merged over the run's adapter_config, which this -o cannot see
        issues.append(ConfigIssue(
            f"evaluation.tasks.{task_name}.nemo_evaluator_config.target", "a task's "
            "adapter_config cannot be set with -o", "set the task's interceptors: "
            f"-o evaluation.tasks.{task_name}.interceptors.<key>=... (see "
            "docs/migrating-from-nemo-evaluator.md)"))
    if issues:
        raise ConfigError(issues)
    if task == original and not notes:
        return None
    task.pop("name")
    return task, notes
