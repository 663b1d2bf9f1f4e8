"""``hpceval render`` and ``hpceval submit``: validate first, then render, then (maybe) submit.

A run file with a ``models:`` list is a sweep: ONE array job whose dispatcher execs each
model's own job script. render prints exactly those files, submit sends exactly those files.
"""

from __future__ import annotations

from pathlib import Path

import click

from hpceval.cli.options import config_options, load_all


def _print_scripts(scripts: dict[str, str], run_dir: Path | None = None,
                   note: str = "") -> None:
    for name, text in scripts.items():
        if len(scripts) > 1 or run_dir is not None:
            where = f"{run_dir}/{name}" if run_dir is not None else name
            click.echo(f"# ===== {where}{note} =====")
        click.echo(text, nl=False)


@click.command()
@config_options
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Write the scripts into this folder instead of printing them.")
def render(config_file: str | None, config_opt: str | None, config_dir: str | None,
           config_name: str | None, profile: str | None, overrides: tuple[str, ...],
           out_dir: str | None) -> None:
    """Print exactly the job scripts that submit would send (nothing is submitted).

    A sweep prints the array dispatcher (what the scheduler receives), every model's job script and
    the dependent aggregation script. Secrets are checked by name only at submit time, so
    render works on any machine.
    """
    from hpceval import api

    configs = load_all(config_file, config_opt, config_dir, config_name, profile, overrides,
                       check_environment=False)
    scripts = api.render(configs)
    if out_dir is None:
        _print_scripts(scripts)
        return
    target = Path(out_dir)
    for name, text in scripts.items():
        try:
            _write_no_follow(target, name, text)
        except OSError as exc:
            raise click.ClickException(f"cannot write {target / name}: "
                                       f"{exc.strerror or exc}") from exc
        click.echo(str(target / name))


def _write_no_follow(target: Path, name: str, text: str) -> None:
    """Write target/name without following a symlink below `target` (a folder others may
    write to could hold one pointing at a file of yours): refused, nothing written."""
    import errno
    import os
    import stat

    target.mkdir(parents=True, exist_ok=True)
    path = target
    for part in Path(name).parts[:-1]:
        path = path / part
        try:
            if stat.S_ISLNK(path.lstat().st_mode):
                raise OSError(errno.ELOOP, "is a symlink; not following it")
        except FileNotFoundError:
            path.mkdir(parents=True)
    leaf = target / name
    try:
        fd = os.open(leaf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "is a symlink; not following it") from exc
        raise
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


@click.command()
@config_options
@click.option("--dry-run", is_flag=True, help="Validate and render, write and submit nothing.")
@click.option("--no-aggregate", is_flag=True,
              help="Sweeps: no dependent job writing the results table (a sweep with a "
                   "scope: sweep judge keeps it: that job also ends the judge).")
def submit(config_file: str | None, config_opt: str | None, config_dir: str | None,
           config_name: str | None, profile: str | None, overrides: tuple[str, ...],
           dry_run: bool, no_aggregate: bool) -> None:
    """Validate a run, render its job scripts and submit them to the scheduler (one call).

    Validation runs before anything is written: a config error names the key and the fix,
    exits 2, and submits nothing. execution.type local runs the same job here with bash.
    """
    from hpceval import api

    configs = load_all(config_file, config_opt, config_dir, config_name, profile, overrides)
    for line in configs[0].composed.layer_lines():  # where the settings came from (review F2)
        click.echo(f"hpceval: layer: {line}", err=True)
    checked = api.preflight(configs, notes_only=not dry_run)
    for note in checked.notes:  # works, but every job pays for it
        click.echo(f"hpceval: preflight note: {note}", err=True)
    if dry_run:
        for issue in checked.issues:  # a dry run may be made away from the cluster
            click.echo(f"hpceval: preflight warning: {issue}", err=True)
        run = api.plan(configs)
        _print_scripts(run.scripts, run.run_dir, " (dry run: not written, not submitted)")
        return
    # SubmitFailed (the backend refused it) names the run directory, kept for inspection
    result = api.submit(configs, aggregate=not no_aggregate)
    click.echo(f"submitted {result.invocation_id}: {result.what}")
    after = {"aggregate": "aggregation job {} (runs after the sweep; ends any judge job)",
             "export": "export job {} (runs after the main job)",
             "pull": "pull job {} (a CPU job that pulls the server images first; the jobs "
                     "that hold GPUs start once it has ended)"}
    for job_id, role in zip(result.job_ids, result.roles, strict=True):
        if role == "main":  # in `what` (several: a sweep beyond the scheduler's array limit)
            continue
        click.echo(after[role].format(job_id) if role in after else
                   f"{role} job {job_id} (the array starts once it has started)")
    click.echo(f"run directory: {result.run_dir}")
    click.echo(f"follow it with: hpceval status {result.invocation_id} --watch")
