"""Serving engines, found by name: ``engine_for(deployment.type)``.

Every module of this package (but ``base``) declares one engine class with ``@register``; the
registry imports them all, so the schema's choices, the checks, the rendered job and staging
all read the same declarations and a new engine is one new module.
"""

from __future__ import annotations

import importlib
import pkgutil

from hpceval.engines.base import Engine, Server, model_source, served_name

__all__ = ["Engine", "Server", "engine_for", "engine_names", "model_source", "register",
           "served_name"]

_ENGINES: dict[str, Engine] = {}


def register(cls: type[Engine]) -> type[Engine]:
    """Class decorator: make an engine known by its ``name``."""
    if cls.name in _ENGINES:
        raise ValueError(f"two serving engines are named {cls.name!r}")
    _ENGINES[cls.name] = cls()
    return cls


def _load() -> None:
    for info in pkgutil.iter_modules(__path__):
        if info.name != "base" and not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


def engine_names() -> tuple[str, ...]:
    """Every engine's name, in their declared order (the schema's choices)."""
    return tuple(sorted(_ENGINES, key=lambda name: _ENGINES[name].order))


def engine_for(name: str) -> Engine:
    try:
        return _ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown serving engine {name!r} (known: "
                         f"{', '.join(engine_names())})") from None


_load()
