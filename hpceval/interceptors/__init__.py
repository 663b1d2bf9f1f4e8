"""Interceptors of the in-job proxy, found by name; declared once, read by schema, render, proxy.

Every module of this package (but ``base``) declares one interceptor class with ``@register``
(another installed package adds one by a ``hpceval.interceptors`` entry point).
``spec_fields()`` gives the schema its keys, ``chain_json`` renders the active ones for the
proxy, ``chain_from_json`` rebuilds them in the proxy; ``routes_json`` / ``routes_from_json``
do the same for the tasks with a chain of their own (by task key: their ``/task/<key>/``
requests), and
``request_chain`` is what of a chain the response cache keys on.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from hpceval.contract import TASK_KEY
from hpceval.interceptors.base import Interceptor
from hpceval.registry import Registry

__all__ = ["INTERCEPTORS", "Interceptor", "chain_from_json", "chain_json", "interceptor_classes",
           "interceptor_for", "register", "request_chain", "routes_from_json", "routes_json",
           "spec_fields"]

INTERCEPTORS: Registry[type[Interceptor]] = Registry(
    "interceptor", "hpceval.interceptors", package=__name__, order=lambda cls: cls.order)


def register(cls: type[Interceptor]) -> type[Interceptor]:
    """Class decorator: make an interceptor known by its ``name``."""
    return INTERCEPTORS.register(cls)


def interceptor_classes() -> tuple[type[Interceptor], ...]:
    """Every interceptor, in the order of their keys."""
    return tuple(INTERCEPTORS.values())


def interceptor_for(name: str) -> type[Interceptor]:
    return INTERCEPTORS.get(name)


def spec_fields() -> list[tuple[str, Any, Any]]:
    """(key, type, dataclasses.field) of every interceptor's keys, for the schema."""
    out: list[tuple[str, Any, Any]] = []
    for cls in interceptor_classes():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            default: Any = (dataclasses.field(default_factory=f.default_factory,
                                              metadata=f.metadata)
                            if f.default_factory is not dataclasses.MISSING
                            else dataclasses.field(default=f.default, metadata=f.metadata))
            out.append((f.name, hints[f.name], default))
    return out


def chain_of(values: Any) -> tuple[Interceptor, ...]:
    """The active interceptors of an object carrying every key (an InterceptorsSpec), in
    chain order, each built from its own keys."""
    built = [cls(**{f.name: getattr(values, f.name) for f in dataclasses.fields(cls)})
             for cls in sorted(interceptor_classes(), key=lambda cls: cls.position)]
    return tuple(i for i in built if i.active())


def chain_json(chain: Sequence[Interceptor]) -> str:
    """The chain as the proxy's ``--interceptors`` value."""
    return json.dumps([{"name": i.name, "config": i.config()} for i in chain],
                      ensure_ascii=False, separators=(",", ":"))


def request_chain(chain: Sequence[Interceptor]) -> str:
    """What of a chain changes what the model is asked, as text ("" when nothing does): the
    response cache keys on it, so two tasks whose chains change requests differently never
    share an answer, even where their bodies come out the same; response and log stages apply
    after the cache (it stores what the server said), so they need no entries of their own."""
    changing = [i for i in chain if i.changes_requests]
    return chain_json(changing) if changing else ""


def routes_json(routes: Mapping[str, Sequence[Interceptor]]) -> str:
    """Per-task chains as the proxy's ``--task-interceptors`` value: {task key: chain}."""
    return json.dumps({key: [{"name": i.name, "config": i.config()} for i in chain]
                       for key, chain in routes.items()},
                      ensure_ascii=False, separators=(",", ":"))


def chain_from_json(text: str) -> tuple[Interceptor, ...]:
    """The proxy's side of chain_json; a ValueError names what is wrong."""
    return _chain(_json(text, "--interceptors"), "--interceptors")


def routes_from_json(text: str) -> dict[str, tuple[Interceptor, ...]]:
    """The proxy's side of routes_json."""
    routes = _json(text, "--task-interceptors")
    if not isinstance(routes, dict):
        raise ValueError("--task-interceptors must be a JSON object {task: [chain]}")
    bad = [k for k in routes if not TASK_KEY.fullmatch(k)]
    if bad:
        raise ValueError(f"--task-interceptors: {bad[0][:80]!r} is not a task key "
                         "(letters, digits, . _ -)")
    return {key: _chain(entries, f"--task-interceptors.{key}") for key, entries in routes.items()}


def _json(text: str, option: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{option} is not JSON: {exc}") from None


def _chain(entries: Any, where: str) -> tuple[Interceptor, ...]:
    if not isinstance(entries, list):
        raise ValueError(f"{where} must be a JSON list of {{name, config}}")
    chain = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("config", {}), dict):
            raise ValueError(f"{where}[{i}] must be {{\"name\": ..., \"config\": {{...}}}}")
        cls = interceptor_for(str(entry.get("name")))
        try:
            chain.append(cls(**entry.get("config", {})))
        except TypeError as exc:
            raise ValueError(f"{where}[{i}] ({cls.name}): {exc}") from None
    problems = [str(issue) for i in chain for issue in i.issues(where)]
    if problems:
        raise ValueError("; ".join(problems))
    return tuple(chain)

