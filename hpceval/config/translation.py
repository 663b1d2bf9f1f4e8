"""The one hook through which composition reads another tool's configuration files.

A ``Translation`` sees each layer before it is merged (so `config show` still names the file a
value came from), each ``-o``, the merged config, and the environment the run is resolved in;
it returns notes that say what each foreign form became, and raises ``ConfigError`` for what
has no meaning here. ``TRANSLATION`` is NeMo Evaluator's (``hpceval.compat.nemo``); ``NATIVE``
reads hpceval's own files only, so that compatibility can be dropped without touching the
rest of config (tests/config/test_translation.py composes native files through both).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from hpceval.compat import Translated
from hpceval.compat.nemo import NEMO
from hpceval.errors import ConfigIssue


class Translation(Protocol):
    name: str
    renamed: Mapping[str, str]  # foreign key path -> hpceval's (an -o and a placeholder too)

    def key_path(self, path: str) -> str:
        """One name for a key however it is written: the foreign spelling as hpceval's."""

    def check_defaults_entry(self, group: str, name: str) -> None:
        """Refuse a ``defaults:`` entry that names a config with no counterpart here."""

    def layer(self, layer: dict[str, Any], source: str) -> list[str]:
        """Translate one layer in place (a profile, a preset, the run file): its notes."""

    def override(self, path: list[str], value: Any, source: str) -> Translated | None:
        """An ``-o`` in the foreign terms as a layer to merge; None if it needs nothing."""

    def task_override(self, task_name: str, rest: list[str], value: Any,
                      source: str) -> Translated | None:
        """The same for a key inside one task (``evaluation.tasks.<name>.<rest>``)."""

    def merged(self, data: dict[str, Any]) -> list[str]:
        """What only the merged config shows (a type from a preset, a key from a file)."""

    def environment(self, data: dict[str, Any], env: Mapping[str, str]
                    ) -> tuple[list[str], list[ConfigIssue]]:
        """What needs the environment the run is resolved in: notes and issues."""


class _Native:
    """hpceval's own files only: nothing renamed, translated or refused."""

    name = "hpceval"
    renamed: Mapping[str, str] = {}

    def key_path(self, path: str) -> str:
        return path

    def check_defaults_entry(self, group: str, name: str) -> None:
        return None

    def layer(self, layer: dict[str, Any], source: str) -> list[str]:
        return []

    def override(self, path: list[str], value: Any, source: str) -> Translated | None:
        return None

    def task_override(self, task_name: str, rest: list[str], value: Any,
                      source: str) -> Translated | None:
        return None

    def merged(self, data: dict[str, Any]) -> list[str]:
        return []

    def environment(self, data: dict[str, Any], env: Mapping[str, str]
                    ) -> tuple[list[str], list[ConfigIssue]]:
        return [], []


NATIVE: Translation = _Native()
TRANSLATION: Translation = NEMO
