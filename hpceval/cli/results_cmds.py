"""``hpceval results`` and ``hpceval export``: finished tasks across runs, as tables or files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from hpceval.cli.table_output import emit, output_format
from hpceval.cli.track_cmds import output_dir_option


def _run_dirs(runs: tuple[str, ...], output_dirs: tuple[str, ...], limit: int) -> list[Path]:
    from hpceval import api

    return api.run_dirs(runs, limit=limit, output_dirs=output_dirs)


def _frame(runs: tuple[str, ...], models: tuple[str, ...], tasks: tuple[str, ...],
           output_dirs: tuple[str, ...], limit: int, runtime: bool = False) -> Any:
    from hpceval import api

    return api.results(runs, models=models, tasks=tasks, limit=limit, output_dirs=output_dirs,
                       runtime=runtime)


def _cost_frame(runs: tuple[str, ...], models: tuple[str, ...], tasks: tuple[str, ...],
                output_dirs: tuple[str, ...], limit: int) -> Any:
    from hpceval import api

    return api.cost(runs, models=models, tasks=tasks, limit=limit, output_dirs=output_dirs)


def selection_options(func: Any) -> Any:
    """[RUN]... or --run RUN (both repeatable, merged), --model, --task, --limit, --output-dir."""
    for decorator in reversed([
        click.argument("run_args", nargs=-1, metavar="[RUN]..."),
        click.option("--run", "run_opts", multiple=True,
                     help="Only this run (repeatable; same as the RUN argument)."),
        click.option("--model", "models", multiple=True, help="Only this model (repeatable)."),
        click.option("--task", "tasks", multiple=True,
                     help="Only this task: harness.task or short name (repeatable)."),
        click.option("--limit", default=0, help="Without RUN: only the newest N runs."),
        output_dir_option,
    ]):
        func = decorator(func)
    return func


@click.command()
@selection_options
@click.option("--format", "fmt", default="table", show_default=True,
              type=click.Choice(["table", "csv", "json", "markdown", "parquet"]))
@click.option("--output", "-O", "output", type=click.Path(dir_okay=False),
              help="Write to this file (required for parquet).")
@click.option("--leaderboard", "board", is_flag=True,
              help="One row per model, one column per task's primary metric, their mean, "
                   "and the run behind them.")
@click.option("--metric", help="With --leaderboard: this metric instead of the primary one.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False),
              help="Also write a static HTML report to this file: what was run, comparison "
                   "with 95% intervals, GPU-hours, what the server did, per-sample answers.")
@click.option("--samples", "n_samples", default=20, show_default=True, type=click.IntRange(0),
              help="With --html: per task, the first N samples (and the first N wrong ones).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (--format json).")
@click.option("--cost", is_flag=True,
              help="GPU-hours and node-hours per model (all its jobs) and per task, instead of "
                   "metrics (one scheduler call for jobs not seen ended before).")
@click.option("--long", "long_rows", is_flag=True,
              help="With a WATCH: the usual metric rows with a step column, instead of one "
                   "row per step.")
def results(run_args: tuple[str, ...], run_opts: tuple[str, ...], models: tuple[str, ...],
            tasks: tuple[str, ...], limit: int, output_dirs: tuple[str, ...], fmt: str,
            output: str | None, board: bool, metric: str | None, html_file: str | None,
            as_json: bool, cost: bool, n_samples: int, long_rows: bool) -> None:
    """Results of finished tasks across runs: models x tasks x metrics.

    RUN (or --run RUN) is an invocation id, a unique prefix of one, or a run directory. Only
    tasks with a `done` marker count. Without RUN, every run of the known output directories
    is read (see `hpceval ls runs`). A checkpoint watch (watch-...) instead gives one row per
    training step, one column per task (--html: the score-vs-step report).

    Each metric row carries its task's flags; with json or parquet also its `runtime`: what the
    in-job proxy counted for the task (runtime.json: requests, latency, tokens), and its
    `server_load`: how loaded the model's servers were (server-load.json: peak and mean queue,
    KV cache, tokens/s; the last sample), and its `ledger`: where each of the model's jobs
    spent its allocation (setup, load, tasks, teardown; GPU-seconds and their sums); null
    without the file, {"unknown": why} for a file that is not read (not yours, over 1 MiB,
    malformed).
    """
    from hpceval.api import is_watch as is_watch_ref
    from hpceval.results.table import leaderboard, render

    runs = run_args + run_opts
    if any(is_watch_ref(r) for r in runs):
        if len(runs) > 1 or board or cost or models or tasks:
            raise click.UsageError("a WATCH is shown alone: no other RUN, --leaderboard, "
                                   "--cost, --model or --task")
        from hpceval.cli.checkpoint_output import echo_step_results

        watch_dir = _watch_dir(runs[0], output_dirs)
        echo_step_results(_watch_points(watch_dir), fmt=fmt, as_json=as_json, output=output,
                          html_file=html_file, metric=metric, long=long_rows,
                          title=f"hpceval: {watch_dir.name}: score vs training step")
        return
    if long_rows:
        raise click.UsageError("--long goes with a WATCH")
    fmt = output_format(fmt, as_json)
    if cost:
        if board or html_file:
            raise click.UsageError("--cost is a table of its own: leave out --leaderboard/--html")
        shown = _cost_frame(runs, models, tasks, output_dirs, limit)
        frame = shown
    else:
        # json and parquet: each row also carries what the server did for its task (the
        # table, csv and markdown stay one line per metric: `hpceval info` shows it there)
        machine = fmt in ("json", "parquet")
        frame = _frame(runs, models, tasks, output_dirs, limit, runtime=machine and not board)
        if board:
            shown = leaderboard(frame, metric)
        else:  # each task's flags (results.flags: scores wrong without an error) on its rows
            from hpceval.results.flags import with_flags

            shown = with_flags(frame, texts=machine)
            if fmt == "parquet":  # JSON text: one column type whatever each file holds
                for column in ("runtime", "server_load", "ledger"):
                    shown[column] = [json.dumps(v) for v in shown[column].tolist()]
    if html_file:
        from hpceval import api

        api.write_report(frame, html_file, samples=n_samples)
        click.echo(f"report: {html_file}", err=True)
    emit(fmt, output, len(shown), lambda: shown.reset_index() if board else shown,
         lambda: render(shown, fmt, index=board))


def _watch_dir(ref: str, output_dirs: tuple[str, ...]) -> Path:
    from hpceval import api

    return api.find_watch(ref, output_dirs)


def _watch_points(watch_dir: Path) -> list[tuple[int, Path]]:
    """(step, run_dir) of each checkpoint the watch submitted (hpceval.watch)."""
    from hpceval import api

    return api.watch_points(watch_dir)


@click.command()
@click.argument("watch_ref", metavar="WATCH")
@click.option("--output", "-O", "output", type=click.Path(dir_okay=False),
              help="The HTML file to write [default: report.html in the watch directory].")
@click.option("--metric", help="This metric instead of each task's primary one.")
@click.option("--no-cost", is_flag=True, help="Leave out GPU-hours (no scheduler call).")
@output_dir_option
def report(watch_ref: str, output: str | None, metric: str | None, no_cost: bool,
           output_dirs: tuple[str, ...]) -> None:
    """HTML report of a checkpoint watch: each task's score against the training step.

    For runs, `hpceval results RUN... --html FILE` writes the comparison report."""
    from hpceval import api

    watch_dir = _watch_dir(watch_ref, output_dirs)
    points = _watch_points(watch_dir)
    out = Path(output) if output else watch_dir / "report.html"
    api.write_step_report(api.watch_steps(watch_dir), out,
                          f"hpceval: {watch_dir.name}: score vs training step", metric=metric,
                          cost=not no_cost, cost_dirs=[d for _, d in points])
    click.echo(f"report: {out} ({len(points)} checkpoints)")


@click.command()
@selection_options
@click.option("--dest", type=click.Choice(["local", "mlflow", "wandb"]), default="local",
              show_default=True)
@click.option("--format", "fmt", type=click.Choice(["json", "csv"]), default="json",
              show_default=True, help="--dest local: file format.")
@click.option("--output", "-O", "output", type=click.Path(file_okay=False),
              default="hpceval-export", show_default=True, help="--dest local: folder.")
@click.option("--tracking-uri", help="--dest mlflow: tracking URI (default: MLflow's own).")
@click.option("--experiment", default="hpceval", show_default=True,
              help="MLflow experiment / W&B project.")
@click.option("--online", is_flag=True, help="--dest wandb: sync now (default: offline mode).")
def export(run_args: tuple[str, ...], run_opts: tuple[str, ...], models: tuple[str, ...],
           tasks: tuple[str, ...], limit: int, output_dirs: tuple[str, ...], dest: str, fmt: str,
           output: str, tracking_uri: str | None, experiment: str, online: bool) -> None:
    """Export results of RUN(s) (default: every known run); re-exporting the same results
    changes nothing (idempotent).

    local: one file per run under --output. mlflow / wandb (optional extras:
    pip install 'hpceval[mlflow]' or 'hpceval[wandb]'): one tracking run per
    (run, model, task), found again by a deterministic name/id on re-export.
    """
    from hpceval import api

    done = api.export(run_args + run_opts, dest=dest, fmt=fmt, output=output,
                      tracking_uri=tracking_uri, experiment=experiment, online=online,
                      models=models, tasks=tasks, limit=limit, output_dirs=output_dirs)
    report = done.report
    if report is None:
        click.echo(f"{len(done.files)} file(s) in {output} ({done.rows} metric rows)")
    elif dest == "mlflow":
        click.echo(f"mlflow: {report.created} run(s) created, {report.updated} updated, "
                   f"{report.unchanged} unchanged (experiment {experiment!r})")
    else:
        click.echo(f"wandb: {report.created + report.updated} run(s) written "
                   f"({'offline' if not online else 'online'}, project {experiment!r})")
