"""``???`` (NeMo Evaluator's "MISSING value") and ``...`` placeholders: every one must be filled.

A placeholder is remembered by key path when its layer is read, before any translation drops
or renames the key (``execution.hostname: ???`` must still be filled), and forgotten when a
later layer or ``-o`` sets that key. What is left is refused, each key named.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hpceval.config.errors import ConfigIssue

PLACEHOLDERS = ("???", "...")


def _walk(data: Any, prefix: str) -> list[tuple[str, Any]]:
    """(key path, value) of every leaf; task list items are named as -o addresses them."""
    if isinstance(data, dict) and data:
        out: list[tuple[str, Any]] = []
        for k, v in data.items():
            out += _walk(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(data, list) and data:
        out = []
        for i, item in enumerate(data):
            name = item.get("name") if isinstance(item, dict) else None
            out += _walk(item, f"{prefix}.{name if isinstance(name, str) and name else i}")
        return out
    return [(prefix, data)]


class Placeholders:
    def __init__(self, canonical: Callable[[str], str] = lambda path: path) -> None:
        """``canonical``: one name for a key however it is written (another tool's path, or
        ours: ``Translation.key_path``)."""
        self.canonical = canonical
        self.open: dict[str, tuple[str, str]] = {}  # canonical path -> (as written, layer)

    def _forget(self, path: str) -> None:
        path = self.canonical(path)
        for key in [k for k in self.open if k == path or k.startswith(path + ".")]:
            del self.open[key]

    def read_layer(self, layer: dict[str, Any], source: str) -> None:
        for path, value in _walk(layer, ""):
            if isinstance(value, str) and value.strip() in PLACEHOLDERS:
                self.open[self.canonical(path)] = (path, source)
            else:
                self._forget(path)

    def set_by_override(self, path: str, value: Any, delete: bool) -> None:
        self._forget(path)
        if not delete:
            self.read_layer(_nest(path, value), f"-o {path}")

    def issues(self) -> list[ConfigIssue]:
        return [ConfigIssue(path, f"MISSING value (a placeholder in the {source})",
                            f"set it in the file or pass -o {path}=...")
                for path, source in self.open.values()]


def _nest(path: str, value: Any) -> dict[str, Any]:
    out: Any = value
    for part in reversed(path.split(".")):
        out = {part: out}
    return dict(out)
