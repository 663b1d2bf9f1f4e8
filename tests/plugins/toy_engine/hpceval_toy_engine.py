"""deployment.type toyserve: an engine from another distribution (tests/engines/test_plugins.py
installs it with pip), found by its ``hpceval.engines`` entry point, not by a file in hpceval."""

from __future__ import annotations

from typing import Any

from hpceval.engines.base import Engine, Server, model_source, served_name
from hpceval.shell import var


class ToyServe(Engine):
    name = "toyserve"
    order = 20
    template = "deployment/sglang.j2"  # reuses a partial: its servers start the same way
    ready_line = "toyserve is up"
    token_env = "TOYSERVE_TOKEN"
    command_word = "toyserve"

    def argv(self, server: Server, *, nnodes: int, rank: int) -> list[Any]:
        return ["toyserve", model_source(server), "--name", served_name(server),
                "--port", var("PORT")]


def parse(output_dir: Any, task: str) -> Any:
    """A results parser of this distribution (``hpceval.parsers`` entry point ``toy``)."""
    raise NotImplementedError("never called: the test only finds it by name")
