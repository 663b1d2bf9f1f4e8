"""Container runtimes, found by name: ``runtime_for(execution.container_runtime)``.

Every module of this package (but ``base``) declares one runtime class with ``@register``; the
schema's choices, the checks, the rendered job and staging read the same declarations, so a
new runtime is one new module.
"""

from __future__ import annotations

import importlib
import pkgutil

from hpceval.runtimes.base import Runtime

__all__ = ["HOST", "IMAGE", "PLACES", "Runtime", "from_image", "register", "runtime_for",
           "runtime_names"]

# Where a server (deployment.runtime) or a harness (the catalogue's harness.runtime) runs: from
# its image, in the run's container runtime, or from tools installed on the host. The words are
# named here and tested only by from_image (tests/engines/test_registries.py enforces it).
IMAGE = "container"
HOST = "host"
PLACES = (IMAGE, HOST)


def from_image(place: str) -> bool:
    """Whether a deployment's or a harness's ``runtime`` says it runs from its image."""
    return place == IMAGE


_RUNTIMES: dict[str, Runtime] = {}


def register(cls: type[Runtime]) -> type[Runtime]:
    """Class decorator: make a runtime known by its ``name``."""
    if cls.name in _RUNTIMES:
        raise ValueError(f"two container runtimes are named {cls.name!r}")
    _RUNTIMES[cls.name] = cls()
    return cls


def _load() -> None:
    for info in pkgutil.iter_modules(__path__):
        if info.name != "base" and not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


def runtime_names() -> tuple[str, ...]:
    """Every runtime's name, in their declared order (the schema's choices)."""
    return tuple(sorted(_RUNTIMES, key=lambda name: _RUNTIMES[name].order))


def runtime_for(name: str) -> Runtime:
    try:
        return _RUNTIMES[name]
    except KeyError:
        raise ValueError(f"unknown container runtime {name!r} (known: "
                         f"{', '.join(runtime_names())})") from None


_load()
