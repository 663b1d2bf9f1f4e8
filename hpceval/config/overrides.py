"""Command-line overrides: ``-o key.path=value`` (Hydra-style, as NeMo Evaluator users type them).

- values are parsed as YAML, so ``-o 'evaluation.tasks=[{name: ifeval}]'`` sets a whole list;
- ``+key=value`` and ``++key=value`` (Hydra's add / add-or-replace) set a key, ``~key``
  removes one;
- ``evaluation.tasks.<task name>.key=value`` (or ``.<index>.``) addresses one task of the list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpceval.config import yamlio
from hpceval.config.errors import ConfigError


@dataclass(frozen=True)
class Override:
    path: list[str]
    value: Any
    delete: bool
    text: str


def parse_override(text: str) -> Override:
    raw = text.strip()
    delete = raw.startswith("~")
    # Hydra's forms: +key adds a key, ++key adds or replaces it, ~key removes it. Here a key
    # may always be set, so all three set (or remove) the same way.
    raw = raw[2:] if raw.startswith("++") else raw[1:] if raw[:1] in "+~" else raw
    if "=" not in raw and not delete:
        raise ConfigError.at("-o", f"{text!r} has no '='", "write -o key.path=value")
    key, _, value_text = raw.partition("=")
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError.at("-o", f"{text!r} has an empty key", "write -o key.path=value")
    try:
        value = yamlio.loads(value_text) if value_text.strip() else ""
    except yamlio.YamlError as exc:
        reason = exc.problem
        raise ConfigError.at(key, f"value {value_text!r} is not valid YAML ({reason})",
                             "quote the value, e.g. -o 'key=\"text: with colon\"'") from exc
    return Override(key.split("."), value, delete, text)


def find_task(tasks: list[Any], parts: list[str], path: str) -> tuple[int, int]:
    """Index of the task addressed by the leading parts, and how many parts its name used.

    Task names may contain dots (``lm-evaluation-harness.ifeval``), so the longest match wins.
    """
    names = [t.get("name") if isinstance(t, dict) else None for t in tasks]
    for used in range(len(parts), 0, -1):
        candidate = ".".join(parts[:used])
        if candidate in names:
            return names.index(candidate), used
    if parts[0].isdigit() and int(parts[0]) < len(tasks):
        return int(parts[0]), 1
    known = ", ".join(str(n) for n in names) or "none"
    raise ConfigError.at(path, f"no task named {parts[0]!r} in evaluation.tasks (tasks: {known})",
                         "add the task to evaluation.tasks first, or fix the name")


def apply_override(data: dict[str, Any], ov: Override) -> str:
    """Apply in place; return the dotted path it set (task lists addressed by name)."""
    node: Any = data
    shown: list[str] = []
    parts = list(ov.path)
    while len(parts) > 1:
        part = parts.pop(0)
        shown.append(part)
        if isinstance(node, list):
            index, used = find_task(node, [part, *parts], ".".join(shown))
            del parts[: used - 1]
            shown[-1] = str(node[index].get("name", index))
            if not parts:
                raise ConfigError.at(".".join(shown), "cannot replace a whole task this way",
                                     "set evaluation.tasks=[...] or one key of the task")
            node = node[index]
            continue
        if not isinstance(node, dict):
            raise ConfigError.at(".".join(shown), "is not a mapping, so it has no sub-keys",
                                 f"set {'.'.join(shown)} itself")
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        node = child
    last = parts[0]
    shown.append(last)
    if isinstance(node, list):
        raise ConfigError.at(".".join(shown), "addresses a list item", "address tasks by name")
    if not isinstance(node, dict):
        raise ConfigError.at(".".join(shown[:-1]), "is not a mapping", "set it as a whole")
    if ov.delete:
        node.pop(last, None)
    else:
        node[last] = ov.value
    return ".".join(shown)
