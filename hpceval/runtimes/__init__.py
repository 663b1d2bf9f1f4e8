"""Container runtimes, found by name: ``runtime_for(execution.container_runtime)``.

Every module of this package (but ``base``) declares one runtime class with ``@register``
(another installed package adds its own by a ``hpceval.runtimes`` entry point: see
``hpceval.registry``); the schema's choices, the checks, the rendered job and staging read the
same declarations, so a new runtime is one new module.
"""

from __future__ import annotations

from hpceval.registry import Registry
from hpceval.runtimes.base import Runtime, bind_parts

__all__ = ["HOST", "IMAGE", "PLACES", "RUNTIMES", "Runtime", "bind_parts", "from_image", "register",
           "runtime_for", "runtime_names"]

# Where a server (deployment.runtime) or a harness (the catalogue's harness.runtime) runs: from
# its image, in the run's container runtime, or from tools installed on the host. The words are
# named here and tested only by from_image (tests/engines/test_registries.py enforces it).
IMAGE = "container"
HOST = "host"
PLACES = (IMAGE, HOST)


def from_image(place: str) -> bool:
    """Whether a deployment's or a harness's ``runtime`` says it runs from its image."""
    return place == IMAGE


RUNTIMES: Registry[Runtime] = Registry(
    "container runtime", "hpceval.runtimes", package=__name__,
    make=lambda cls: cls(), order=lambda runtime: runtime.order)

register = RUNTIMES.register  # class decorator: a runtime known by its ``name``
runtime_names = RUNTIMES.names  # in their declared order (the schema's choices)
runtime_for = RUNTIMES.get  # the runtime of execution.container_runtime, or an UnknownName
