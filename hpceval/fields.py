"""Config keys with their help text: the one helper every declaration of config keys uses (the
run schema, and the interceptors' own configs). A leaf: it imports nothing of hpceval."""

from __future__ import annotations

from dataclasses import field
from typing import Any


def key(default: Any = None, doc: str = "", *, minimum: float | None = None,
        maximum: float | None = None) -> Any:
    """A config key with its help text; mutable defaults are copied per instance."""
    meta = {"doc": doc, "minimum": minimum, "maximum": maximum}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


REQUIRED: Any = object()  # sentinel default: the key must be given somewhere
