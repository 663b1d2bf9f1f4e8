"""Options shared by every command that reads a run configuration."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from hpceval.config import ResolvedConfig

F = TypeVar("F", bound=Callable[..., Any])


def config_options(func: F) -> F:
    """CONFIG (or --config FILE, or --config-dir/--config-name), --profile and -o overrides."""
    decorators = [
        click.argument("config_file", required=False, type=click.Path(dir_okay=False)),
        click.option("--config", "config_opt", type=click.Path(dir_okay=False),
                     help="Run file (same as the CONFIG argument)."),
        click.option("--config-dir", type=click.Path(file_okay=False),
                     help="Folder of run files (with --config-name, as in NeMo Evaluator)."),
        click.option("--config-name", help="Run file name inside --config-dir (.yaml optional)."),
        click.option("--profile", help="Site profile; overrides the run file's defaults list."),
        click.option("-o", "--override", "overrides", multiple=True, metavar="KEY=VALUE",
                     help="Override a key: -o execution.nodes=2, +key=v / ++key=v set, "
                          "~key removes, evaluation.tasks.<name>.key=v addresses a task."),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def run_file_from(config_file: str | None, config_opt: str | None, config_dir: str | None,
                  config_name: str | None) -> Path | None:
    if config_dir or config_name:
        if not (config_dir and config_name):
            raise click.UsageError("--config-dir and --config-name go together")
        name = config_name if config_name.endswith((".yaml", ".yml")) else f"{config_name}.yaml"
        return Path(config_dir) / name
    chosen = config_file or config_opt
    if config_file and config_opt and config_file != config_opt:
        raise click.UsageError("give the run file once: as CONFIG or as --config")
    return Path(chosen) if chosen else None


def load_all(config_file: str | None, config_opt: str | None, config_dir: str | None,
             config_name: str | None, profile: str | None, overrides: tuple[str, ...],
             *, check_environment: bool = True) -> list[ResolvedConfig]:
    """Every model's resolved config (one for a plain run); notes go to stderr."""
    from hpceval import api

    run_file = run_file_from(config_file, config_opt, config_dir, config_name)
    configs = api.load(run_file, overrides, profile=profile, check_environment=check_environment)
    for note in configs[0].composed.notes:
        click.echo(f"hpceval: note: {note}", err=True)
    for task in configs[0].tasks:
        if task.task.qualified_name != task.spec.name:
            click.echo(f"hpceval: note: task {task.resolution.note}", err=True)
    return configs
