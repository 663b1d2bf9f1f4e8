"""Commands whose behaviour later work fills in. They say so and exit non-zero, never pretend."""

from __future__ import annotations

from typing import Any

import click

NOT_BUILT_EXIT = 3

# command name -> the work that will build it; empty while every listed command is built
_PLANNED: dict[str, str] = {}


def _not_built(name: str) -> click.Command:
    @click.command(name=name, context_settings={"ignore_unknown_options": True},
                   help=f"Not built yet: part of {_PLANNED[name]}.")
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def command(args: tuple[str, ...]) -> Any:
        click.echo(f"hpceval {name}: not built yet (part of {_PLANNED[name]}); "
                   "nothing was done", err=True)
        raise SystemExit(NOT_BUILT_EXIT)

    return command

