"""What ``hpceval results WATCH`` / ``hpceval report WATCH`` print and write for one run per
training step: the command that knows the steps (the watch) hands (step, run_dir) pairs here."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from hpceval.cli.table_output import emit, output_format


def echo_step_results(points: Sequence[tuple[int, Path]], *, fmt: str = "table",
                      as_json: bool = False, output: str | None = None,
                      html_file: str | None = None, metric: str | None = None,
                      long: bool = False, title: str = "hpceval: score vs training step",
                      cost: bool = True) -> None:
    """One row per step, one column per task (its primary metric, or `metric`); `long`: the
    usual metric rows with a step column. --json is --format json, as for `hpceval results`.
    `html_file`: also write the score-vs-step report there, with each run's GPU-hours unless
    `cost` is False (one scheduler call for jobs not seen ended before, as `results --html`)."""
    from hpceval import api
    from hpceval.results.checkpoints import render_steps, step_pivot, step_table

    fmt = output_format(fmt, as_json)
    table = step_table(points)
    if html_file:
        api.write_step_report(table, html_file, title, metric=metric, cost=cost)
        click.echo(f"report: {html_file}", err=True)
    shown = table if long else step_pivot(table, metric)
    emit(fmt, output, len(shown), lambda: shown if long else shown.reset_index(),
         lambda: render_steps(table, fmt, metric=metric, long=long))
