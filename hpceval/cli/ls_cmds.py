"""``hpceval ls tasks|runs|profiles``."""

from __future__ import annotations

import json

import click


@click.group()
def ls() -> None:
    """List tasks, runs or site profiles."""


@ls.command("profiles")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def profiles(as_json: bool) -> None:
    """Site profiles on the search path, with where each one comes from.

    Search order (first wins): $HPCEVAL_PROFILE_PATH, ~/.config/hpceval/profiles, shipped.
    A run file's own folder is searched too when a run names a profile.
    """
    from hpceval.config.profiles import list_profiles

    found = list_profiles()
    if as_json:
        click.echo(json.dumps([{"name": p.name, "source": p.source, "path": str(p.path),
                                "description": p.description,
                                "shadows": [str(s) for s in p.shadows]} for p in found],
                              indent=2))
        return
    width = max((len(p.name) for p in found), default=4)
    click.echo(f"{'NAME':<{width}}  {'SOURCE':<20}  DESCRIPTION")
    for p in found:
        click.echo(f"{p.name:<{width}}  {p.source:<20}  {p.description}")
        click.echo(f"{'':<{width}}  {'':<20}  {p.path}")
        for shadowed in p.shadows:
            click.echo(f"{'':<{width}}  {'':<20}  (shadows {shadowed})")


@ls.command("tasks")
@click.option("--harness", help="Only this harness.")
@click.option("--type", "endpoint_type",
              type=click.Choice(["chat", "completions", "vlm", "embedding"]),
              help="Only tasks for this endpoint type.")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON (see docs/tasks.md).")
def tasks(harness: str | None, endpoint_type: str | None, as_json: bool) -> None:
    """Tasks in the catalogue (shipped, plus ~/.config/hpceval/tasks and $HPCEVAL_TASKS_PATH)."""
    from hpceval.tasks import format_task_table, load_catalogue, tasks_to_json

    listed = load_catalogue().list(harness=harness, endpoint_type=endpoint_type)
    click.echo(tasks_to_json(listed) if as_json else format_task_table(listed))


@ls.command("runs")
def runs() -> None:
    """Runs in the registry (not built yet: part of the controller)."""
    click.echo("hpceval ls runs: not built yet (part of the controller's run registry); "
               "nothing was done", err=True)
    raise SystemExit(3)
