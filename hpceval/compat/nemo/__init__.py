"""NeMo Evaluator's launcher files, read with the launcher's meaning where it carries over and
refused in words where it does not (docs/migrating-from-nemo-evaluator.md).

``NEMO`` is this package's one face to composition (``hpceval.config.translation``):
``translate`` renames and refuses keys layer by layer, ``forms`` reads older and looser forms,
``export`` the launcher's exporters, ``adapters`` its adapter and interceptor settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hpceval.compat import Translated
from hpceval.compat.nemo.forms import bare_host_names
from hpceval.compat.nemo.overrides import translate_override, translate_task_override
from hpceval.compat.nemo.translate import (
    RENAMED,
    check_defaults_entry,
    translate,
    translate_merged,
)
from hpceval.errors import ConfigIssue

__all__ = ["NEMO", "NemoTranslation"]


class NemoTranslation:
    """NeMo Evaluator's launcher keys and forms as hpceval's (the ``Translation`` hook)."""

    name = "NeMo Evaluator"
    renamed: Mapping[str, str] = RENAMED

    def key_path(self, path: str) -> str:
        """NeMo Evaluator's parameter path (``...nemo_evaluator_config.config.params.x``) or a
        renamed key, as hpceval writes it."""
        path = f".{path}".replace(".nemo_evaluator_config.config.params.", ".params.")[1:]
        return self.renamed.get(path, path)

    def check_defaults_entry(self, group: str, name: str) -> None:
        check_defaults_entry(group, name)

    def layer(self, layer: dict[str, Any], source: str) -> list[str]:
        return translate(layer, source)

    def override(self, path: list[str], value: Any, source: str) -> Translated | None:
        return translate_override(path, value, source)

    def task_override(self, task_name: str, rest: list[str], value: Any,
                      source: str) -> Translated | None:
        return translate_task_override(task_name, rest, value, source)

    def merged(self, data: dict[str, Any]) -> list[str]:
        return translate_merged(data)

    def environment(self, data: dict[str, Any], env: Mapping[str, str]
                    ) -> tuple[list[str], list[ConfigIssue]]:
        return bare_host_names(data, env), []


NEMO = NemoTranslation()
