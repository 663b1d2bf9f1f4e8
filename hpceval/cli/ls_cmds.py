"""``hpceval ls tasks|runs|watches|profiles``."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import click


def _listing(as_json: bool, rows: Sequence[Any], to_json: Callable[[Any], Any], empty: str,
             header: str, lines: Callable[[Any], Iterable[str]]) -> None:
    """A listing: JSON (one object per row), or a header and each row's lines; ``empty``
    (what to do about it) when there is nothing to list."""
    if as_json:
        click.echo(json.dumps([to_json(row) for row in rows], indent=2))
    elif not rows:
        click.echo(empty)
    else:
        click.echo(header)
        for row in rows:
            for line in lines(row):
                click.echo(line)


@click.group()
def ls() -> None:
    """List tasks, runs, checkpoint watches or site profiles."""


@ls.command("profiles")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def profiles(as_json: bool) -> None:
    """Site profiles on the search path, with where each one comes from.

    Search order (first wins): $HPCEVAL_PROFILE_PATH, ~/.config/hpceval/profiles, shipped.
    A run file's own folder is searched too when a run names a profile.
    """
    from hpceval import api

    found = api.profiles()
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
    from hpceval import api
    from hpceval.tasks import format_task_table, tasks_to_json

    listed = api.tasks(harness=harness, endpoint_type=endpoint_type)
    click.echo(tasks_to_json(listed) if as_json else format_task_table(listed))


@ls.command("runs")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--limit", default=20, show_default=True, help="Newest N runs (0: all).")
@click.option("--output-dir", "output_dirs", multiple=True, type=click.Path(file_okay=False),
              help="Also list runs of this output directory.")
def runs(as_json: bool, limit: int, output_dirs: tuple[str, ...]) -> None:
    """Runs in the registries of known output directories, newest first (no Slurm call).

    Known: every output directory you submitted to, $HPCEVAL_OUTPUT_DIRS and --output-dir.
    For their state use `hpceval status`.
    """
    import time

    from hpceval import api

    def lines(r: Any) -> list[str]:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.submitted_at))
        models = ", ".join(r.models[:4]) + (f" (+{len(r.models) - 4})" if len(r.models) > 4
                                            else "")
        return [f"{r.invocation_id:<24}  {when:<16}  {r.user[:10]:<10}  {r.kind:<5}  {models}",
                f"{'':<24}  {r.run_dir}"]

    _listing(as_json, api.runs(limit=limit, output_dirs=output_dirs), lambda r: {
        "invocation_id": r.invocation_id, "run_dir": str(r.run_dir),
        "submitted_at": r.submitted_at, "user": r.user, "kind": r.kind, "sweep": r.sweep,
        "models": list(r.models)},
        "no runs yet (submit one, or pass --output-dir / set $HPCEVAL_OUTPUT_DIRS)",
        f"{'INVOCATION':<24}  {'SUBMITTED':<16}  {'USER':<10}  {'KIND':<5}  MODELS", lines)


@ls.command("watches")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--output-dir", "output_dirs", multiple=True, type=click.Path(file_okay=False),
              help="Also list watches of this output directory.")
def watches(as_json: bool, output_dirs: tuple[str, ...]) -> None:
    """Checkpoint watches (`hpceval watch start`) in the known output directories, newest
    first, with their checkpoint counts as their state files say (no Slurm call). For job
    states use `hpceval status WATCH`."""
    from hpceval import api

    _listing(as_json, api.watches(output_dirs=output_dirs), lambda row: row,
             "no watches yet (hpceval watch start; or pass --output-dir)",
             f"{'WATCH':<30}  {'STATUS':<9}  {'SEEN':>4}  {'SUBMITTED':>9}  CHECKPOINTS",
             lambda row: [f"{row['watch_id']:<30}  {row['status']:<9}  "
                          f"{row.get('seen', '-'):>4}  {row.get('submitted', '-'):>9}  "
                          f"{row.get('checkpoints', row.get('reason'))}"])
