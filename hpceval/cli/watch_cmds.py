"""``hpceval watch start|stop|resume|status``: evaluate each new checkpoint of a training run.

WATCH is a watch id (watch-..., or a unique prefix of one) or a watch directory; watches are
found in the output directories `hpceval status` knows (or --output-dir). docs/watch.md.
"""

from __future__ import annotations

import json

import click

from hpceval.cli.options import config_options, run_file_from
from hpceval.cli.track_cmds import output_dir_option
from hpceval.contract import WATCH_SCRIPT
from hpceval.watch.spec import DEFAULT_MAX_PER_TICK


@click.group()
def watch() -> None:
    """Evaluate each new checkpoint of a training run as it lands (no daemon: a tiny CPU job
    looks, submits, and queues itself again)."""


@watch.command()
@config_options
@click.option("--checkpoints", required=True, type=click.Path(file_okay=False),
              help="Folder the training job writes checkpoints into (shared storage).")
@click.option("--pattern", default="step_*", show_default=True,
              help="Checkpoint folder names to watch (shell pattern).")
@click.option("--step-regex", help="Regular expression with one group: the step in a "
                                   "folder's name. Default: its last integer (step_1000 -> "
                                   "1000).")
@click.option("--marker", help="A checkpoint is complete once this file exists in it "
                               "(written last by the training job).")
@click.option("--grace", help="Without --marker: complete once its files (names, sizes, "
                              "mtimes) stayed the same for this long across ticks, e.g. 5m "
                              "[default: 5m].")
@click.option("--interval", default="10m", show_default=True,
              help="Time between ticks (each a small CPU job), e.g. 10m, 90s. Minimum 60 s "
                   "unless $HPCEVAL_WATCH_MIN_INTERVAL says otherwise.")
@click.option("--after-job", help="The training job's id: the watch ends by itself once that "
                                  "job has ended and a tick found nothing new or pending.")
@click.option("--attempts", default=3, show_default=True, type=click.IntRange(1, 20),
              help="Submissions of one checkpoint before it is given up (only failures that "
                   "queued no job are retried).")
@click.option("--max-per-tick", default=DEFAULT_MAX_PER_TICK, show_default=True,
              type=click.IntRange(1, 100),
              help="Submissions per tick at most; further complete checkpoints wait for the "
                   "next tick.")
@click.option("--trust-owner", "trust_owners", multiple=True, metavar="USER",
              help="Also evaluate checkpoints owned by USER (a name or uid; repeatable). "
                   "By default only your own are: others' are shown as ignored.")
@click.option("--dry-run", is_flag=True, help="Validate and print the tick script; write and "
                                              "submit nothing.")
def start(config_file: str | None, config_opt: str | None, config_dir: str | None,
          config_name: str | None, profile: str | None, overrides: tuple[str, ...],
          checkpoints: str, pattern: str, step_regex: str | None, marker: str | None,
          grace: str | None, interval: str, after_job: str | None, attempts: int,
          max_per_tick: int, trust_owners: tuple[str, ...], dry_run: bool) -> None:
    """Watch a checkpoint folder: evaluate the run file (CONFIG) on every new complete
    checkpoint.

    The run is validated as `hpceval submit` would (with deployment.checkpoint_path set to a
    sample checkpoint): a config error exits 2 and submits nothing. Each checkpoint's run is
    `hpceval submit CONFIG -o deployment.checkpoint_path=CKPT`, each submitted once. Every
    tick reads CONFIG again on a compute node: keep it on shared storage. Only checkpoints
    (and markers) owned by you, or by a --trust-owner, after resolving symlinks, are
    evaluated.
    """
    from hpceval import api

    run_file = run_file_from(config_file, config_opt, config_dir, config_name)
    if run_file is None:
        raise click.UsageError("give the run file (CONFIG or --config)")
    started = api.watch(run_file, checkpoints, overrides, profile=profile, pattern=pattern,
                        step_regex=step_regex, marker=marker, grace_s=grace,
                        interval_s=interval, after_job=after_job, attempts=attempts,
                        max_per_tick=max_per_tick, trust_owners=trust_owners, dry_run=dry_run)
    for warning in started.warnings:
        click.echo(f"warning: {warning}", err=True)
    if dry_run:
        click.echo(f"# ===== {started.watch_dir}/{WATCH_SCRIPT} (dry run: not written, not "
                   f"submitted; validated with checkpoint {started.sample}) =====")
        click.echo(started.script, nl=False)
        return
    click.echo(f"started {started.watch_id}: first tick job {started.tick_job}")
    click.echo(f"watch directory: {started.watch_dir}")
    click.echo(f"follow it with: hpceval status {started.watch_id}")


@watch.command()
@click.argument("watch_ref", metavar="WATCH")
@output_dir_option
def stop(watch_ref: str, output_dirs: tuple[str, ...]) -> None:
    """Stop a watch: no further tick; evaluations already submitted go on."""
    from hpceval import api

    watch_dir, cancelled = api.stop_watch(watch_ref, output_dirs=output_dirs)
    click.echo(f"{watch_dir.name}: stopped" + (f"; cancelled tick job(s) "
                                               f"{', '.join(cancelled)}" if cancelled else ""))


@watch.command()
@click.argument("watch_ref", metavar="WATCH")
@output_dir_option
def resume(watch_ref: str, output_dirs: tuple[str, ...]) -> None:
    """Queue a tick now: for a stopped watch, or one whose ticks stopped (a repaired
    state.json, a failed resubmission). Claims in state.json are kept: nothing is
    evaluated twice."""
    from hpceval import api

    watch_dir, tick = api.resume_watch(watch_ref, output_dirs=output_dirs)
    click.echo(f"{watch_dir.name}: watching again; tick job {tick}")


@watch.command("status")
@click.argument("watch_ref", metavar="WATCH")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@output_dir_option
def status_cmd(watch_ref: str, as_json: bool, output_dirs: tuple[str, ...]) -> None:
    """Checkpoints seen / evaluated / running / pending / failed, the tick job, and each
    checkpoint's run (one scheduler call). Same as `hpceval status WATCH`."""
    show_watch(watch_ref, as_json, output_dirs)


def show_watch(watch_ref: str, as_json: bool, output_dirs: tuple[str, ...]) -> None:
    from hpceval import api
    from hpceval.watch.status import format_watch

    data = api.watch_status(watch_ref, output_dirs=output_dirs)
    click.echo(json.dumps(data, indent=2) if as_json else format_watch(data), nl=as_json)
    if data["status"] == "error":
        raise click.ClickException(data["reason"])
