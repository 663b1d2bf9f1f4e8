"""``hpceval render`` and ``hpceval submit``: validate first, then render, then (maybe) submit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from hpceval.cli.options import config_options, load_from_options


def _scripts(resolved: Any) -> dict[str, str]:
    """Rendered job scripts by file name (one per model; one array script for a sweep)."""
    from hpceval.runs.rundir import JOB_SCRIPT, prepare_run

    return {JOB_SCRIPT: prepare_run(resolved).script}


@click.command()
@config_options
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Write the scripts into this folder instead of printing them.")
def render(config_file: str | None, config_opt: str | None, config_dir: str | None,
           config_name: str | None, profile: str | None, overrides: tuple[str, ...],
           out_dir: str | None) -> None:
    """Print exactly the job scripts that submit would send (nothing is submitted).

    Secrets are checked by name only at submit time, so render works on any machine.
    """
    resolved = load_from_options(config_file, config_opt, config_dir, config_name, profile,
                                 overrides, check_environment=False)
    scripts = _scripts(resolved)
    if out_dir is None:
        for name, text in scripts.items():
            if len(scripts) > 1:
                click.echo(f"# ===== {name} =====")
            click.echo(text, nl=False)
        return
    target = Path(out_dir)
    target.mkdir(parents=True, exist_ok=True)
    for name, text in scripts.items():
        (target / name).write_text(text, encoding="utf-8")
        click.echo(str(target / name))


@click.command()
@config_options
@click.option("--dry-run", is_flag=True, help="Validate and render, submit nothing.")
def submit(config_file: str | None, config_opt: str | None, config_dir: str | None,
           config_name: str | None, profile: str | None, overrides: tuple[str, ...],
           dry_run: bool) -> None:
    """Validate a run, render its job scripts and submit them with sbatch.

    Validation runs before anything is written: a config error names the key and the fix,
    exits 2, and submits nothing.
    """
    from hpceval.runs.rundir import prepare_run

    resolved = load_from_options(config_file, config_opt, config_dir, config_name, profile,
                                 overrides)
    run = prepare_run(resolved)
    if dry_run:
        click.echo(f"# ===== {run.run_dir}/job.sbatch (dry run: not submitted) =====")
        click.echo(run.script, nl=False)
        return
    if resolved.spec.execution.type != "slurm":
        click.echo("hpceval submit: execution.type=local is not built yet (part of the "
                   "controller); nothing was run", err=True)
        raise SystemExit(3)
    from hpceval.runs.submit import submit_prepared

    job_id = submit_prepared(run)
    click.echo(f"submitted {run.invocation_id}: Slurm job {job_id}")
    click.echo(f"run directory: {run.run_dir}")
