"""Turn a composed config dictionary into a frozen RunSpec, with every issue and its key path.

The checks follow the dataclass field types in ``schema``: unknown keys get a "did you mean",
wrong types name the expected type, and a missing required key names where to set it.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from hpceval.config.errors import ConfigError, ConfigIssue
from hpceval.config.schema import REQUIRED, RunSpec

T = TypeVar("T")

# Evaluating a dataclass's annotations is the slowest step of a build; they never change, and
# a 10,000-model sweep builds every schema class 10,000 times.
_hints = functools.cache(get_type_hints)


@functools.cache
def _fields(cls: Any) -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(cls)}


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def _choice(value: Any) -> str:
    """A Literal's choice as the user writes it in YAML."""
    return str(value).lower() if isinstance(value, bool) else repr(value)


def describe_type(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(_choice(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(describe_type(a) for a in get_args(tp) if a is not type(None))
    if origin is list:
        return "a list"
    if origin is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return _TYPE_NAMES.get(tp, str(tp))


class _Builder:
    def __init__(self) -> None:
        self.issues: list[ConfigIssue] = []

    def fail(self, path: str, message: str, fix: str = "") -> None:
        self.issues.append(ConfigIssue(path, message, fix))

    def build(self, cls: type[T], data: Any, path: str) -> T | None:
        if not isinstance(data, dict):
            self.fail(path, f"expected a mapping, got {_kind(data)}", "write key: value pairs")
            return None
        kind: Any = cls  # a class is hashable; mypy's Hashable check does not see type[T] as one
        hints = _hints(kind)
        fields = _fields(kind)
        for name in data:
            if name not in fields:
                close = difflib.get_close_matches(str(name), fields, n=1, cutoff=0.6)
                hint = f"did you mean {_join(path, close[0])}?" if close else (
                    "valid keys: " + ", ".join(sorted(fields))
                )
                self.fail(_join(path, str(name)), "unknown key", hint)
        values: dict[str, Any] = {}
        for name, f in fields.items():
            sub = _join(path, name)
            if name in data:
                values[name] = self.convert(hints[name], data[name], sub, f.metadata)
            elif f.default is REQUIRED:
                self.fail(sub, "required but not set", f"set it in the run file or -o {sub}=...")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                values[name] = self.build(hints[name], {}, sub)
        if any(i.path.startswith(path) for i in self.issues):
            return None
        return cls(**values)

    def convert(self, tp: Any, value: Any, path: str, meta: Any = None) -> Any:
        if tp is Any:  # free-form values (sbatch_extra_flags, params.extra): null is meaningful
            self.no_nul(value, path)
            return value
        origin = get_origin(tp)
        if origin in (Union, types.UnionType):
            args = [a for a in get_args(tp) if a is not type(None)]
            if value is None:
                return None
            return self.convert(args[0], value, path, meta)
        if value is None:
            self.fail(path, f"must not be empty; expected {describe_type(tp)}", "give it a value")
            return None
        if origin is Literal:
            choices = get_args(tp)
            # by type too: YAML's 1 is not the choice true, nor "true" the boolean
            if not any(value == c and type(value) is type(c) for c in choices):
                names = {_choice(c).strip("'"): _choice(c) for c in choices}
                close = difflib.get_close_matches(str(value), list(names), n=1)
                hint = f"did you mean {names[close[0]]}?" if close else f"use {describe_type(tp)}"
                self.fail(path, f"{value!r} is not allowed", hint)
            return value
        if dataclasses.is_dataclass(tp):
            return self.build(tp, value, path)  # type: ignore[arg-type]
        if origin is list:
            (item_tp,) = get_args(tp)
            if isinstance(value, (str, dict)) or not isinstance(value, (list, tuple)):
                self.fail(path, f"expected a list, got {_kind(value)}", "write [a, b] or - items")
                return []
            return [self.convert(item_tp, v, _item_path(path, i, v)) for i, v in enumerate(value)]
        if origin is dict:
            _, val_tp = get_args(tp)
            if not isinstance(value, dict):
                self.fail(path, f"expected a mapping, got {_kind(value)}", "write {key: value}")
                return {}
            for k in value:
                self.no_nul(str(k), f"{path}.{k}")
            return {str(k): self.convert(val_tp, v, f"{path}.{k}") for k, v in value.items()}
        if isinstance(value, str):
            self.no_nul(value, path)
        return self.scalar(tp, value, path, meta)

    def no_nul(self, value: Any, path: str) -> None:
        """bash cannot hold NUL (it would cut the value short): refused where it is written."""
        if isinstance(value, str) and "\x00" in value:
            self.fail(path, "contains a NUL character", "remove it")
        elif isinstance(value, dict):
            for k, v in value.items():
                self.no_nul(str(k), f"{path}.{k}")
                self.no_nul(v, f"{path}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                self.no_nul(v, f"{path}[{i}]")

    def scalar(self, tp: Any, value: Any, path: str, meta: Any) -> Any:
        if tp is Any:
            return value
        ok = isinstance(value, tp) and not (tp is not bool and isinstance(value, bool))
        if tp is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if tp is str and isinstance(value, (int, float)) and not isinstance(value, bool):
            value, ok = str(value), True  # YAML reads 0 or 480 as numbers; strings are meant
        minimum, maximum = (meta or {}).get("minimum"), (meta or {}).get("maximum")
        if not ok:
            example = {int: 8, float: 0.5}.get(tp)
            if example is not None:  # the example itself must pass the range check below
                example = max(example, minimum) if minimum is not None else example
                example = min(example, maximum) if maximum is not None else example
                hint = str(tp(example))
            else:
                hint = {bool: "true", str: "'text'"}.get(tp, "...")
            self.fail(path, f"expected {describe_type(tp)}, got {_kind(value)}",
                      f"write {path}: {hint}")
            return value
        if minimum is not None and value < minimum:
            self.fail(path, f"{value} is below the minimum {minimum}", f"use {minimum} or more")
        elif maximum is not None and value > maximum:
            self.fail(path, f"{value} is above the maximum {maximum}", f"use {maximum} or less")
        return value


def _item_path(path: str, index: int, item: Any) -> str:
    # Tasks are addressed by name, as in -o evaluation.tasks.<name>.key=value.
    if isinstance(item, dict) and isinstance(item.get("name"), str) and item["name"]:
        return f"{path}.{item['name']}"
    return f"{path}[{index}]"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return f"boolean {value}"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"{type(value).__name__} {value!r}"


def build_run_spec(data: dict[str, Any]) -> RunSpec:
    """Validate types and keys; raise ConfigError listing every problem."""
    builder = _Builder()
    spec = builder.build(RunSpec, {k: v for k, v in data.items() if k != "defaults"}, "")
    if builder.issues or spec is None:
        raise ConfigError(builder.issues)
    return _with_task_params(spec, data["evaluation"]["tasks"])


def _with_task_params(spec: RunSpec, raw_tasks: list[dict[str, Any]]) -> RunSpec:
    """Each task's params start from evaluation.params, its interceptors from
    evaluation.interceptors; the keys the task sets itself win."""
    shared, rules = spec.evaluation.params, spec.evaluation.interceptors
    tasks = []
    for task, raw in zip(spec.evaluation.tasks, raw_tasks, strict=True):
        own = raw.get("params") or {}
        values = {k: getattr(task.params, k) for k in own if k != "extra"}
        extra = {**shared.extra, **task.params.extra}
        mine = {k: getattr(task.interceptors, k) for k in raw.get("interceptors") or {}}
        # InterceptorsSpec is made with make_dataclass at import time: mypy sees its base only
        tasks.append(dataclasses.replace(
            task, params=dataclasses.replace(shared, **values, extra=extra),
            interceptors=dataclasses.replace(rules, **mine)))  # type: ignore[type-var]
    evaluation = dataclasses.replace(spec.evaluation, tasks=tasks)
    return dataclasses.replace(spec, evaluation=evaluation)


def field_docs(cls: type, prefix: str = "") -> typing.Iterator[tuple[str, str, Any]]:
    """(key path, help text, default) for every leaf key, for `config show` and the docs."""
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        path = _join(prefix, f.name)
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from field_docs(tp, path)  # type: ignore[arg-type]
        else:
            yield path, f.metadata.get("doc", ""), f.default
