"""Serving engines, found by name: ``engine_for(deployment.type)``.

Every module of this package (but ``base``) declares one engine class with ``@register``; the
registry (``hpceval.registry``) imports them all when first asked, and finds engines of other
installed packages by their ``hpceval.engines`` entry points, so the schema's choices, the
checks, the rendered job and staging all read the same declarations and a new engine is one
new module.
"""

from __future__ import annotations

from hpceval.engines.base import Engine, Server, model_source, served_name
from hpceval.registry import Registry

__all__ = ["ENGINES", "Engine", "Server", "engine_for", "engine_names", "model_source", "register",
           "served_name"]

ENGINES: Registry[Engine] = Registry(
    "serving engine", "hpceval.engines", package=__name__,
    make=lambda cls: cls(), order=lambda engine: engine.order, support=("base", "views"))

register = ENGINES.register  # class decorator: an engine known by its ``name``
engine_names = ENGINES.names  # in their declared order (the schema's choices)
engine_for = ENGINES.get  # the engine of a deployment.type, or an UnknownName
