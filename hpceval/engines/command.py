"""deployment.type command: the user's own server command, run by bash with $PORT set."""

from __future__ import annotations

from typing import Any, ClassVar

from hpceval.engines import register
from hpceval.engines.base import Engine, Server
from hpceval.errors import ConfigError


@register
class Command(Engine):
    name = "command"
    order = 3
    template = "deployment/command.j2"
    model_source: ClassVar[bool] = False
    needs_command: ClassVar[bool] = True
    parallel: ClassVar[bool] = False  # deployment.gpus_per_instance, not TP x PP
    multi_node: ClassVar[bool] = False  # one process per instance, on its head node
    port_env: ClassVar[bool] = True
    command_word = "bash"

    def argv(self, server: Server, *, nnodes: int, rank: int) -> list[Any]:
        dep = server.dep
        if not dep.command:
            raise ConfigError.at(f"{server.where}.command", "required when its type is command")
        # The user's server command is shell by definition; bash runs it with $PORT in its
        # environment. It is one quoted word here, so nothing in it is run by the job script.
        return ["bash", "-c", dep.command]
