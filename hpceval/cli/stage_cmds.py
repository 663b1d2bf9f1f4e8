"""``hpceval stage`` and ``hpceval tasks discover``: the login-node side of offline sites."""

from __future__ import annotations

from pathlib import Path

import click

from hpceval.cli.options import config_options, run_file_from

STAGE_INCOMPLETE_EXIT = 1


def _parse_pulls(pulls: tuple[str, ...]) -> dict[str, str]:
    known: dict[str, str] = {}
    for text in pulls:
        sif, sep, ref = text.partition("=")
        if not sep or not sif or not ref.startswith("docker://"):
            raise click.BadParameter(f"{text!r}: write SIF=docker://REPO:TAG", param_hint="--pull")
        known[sif] = ref
    return known


@click.command()
@config_options
@click.option("--dry-run", is_flag=True, help="Say what would be pulled and fetched; do nothing.")
@click.option("--force", is_flag=True, help="Pull every image and fetch all data again.")
@click.option("--pull", "pulls", multiple=True, metavar="SIF=docker://REF",
              help="The image a SIF path in the config is built from (when it has no record "
                   "yet), e.g. --pull vllm-openai_v0.32.0.sif=docker://vllm/vllm-openai:v0.32.0.")
def stage(config_file: str | None, config_opt: str | None, config_dir: str | None,
          config_name: str | None, profile: str | None, overrides: tuple[str, ...],
          dry_run: bool, force: bool, pulls: tuple[str, ...]) -> None:
    """Pull the run's images into execution.image_dir and fetch its hub data, on the login node.

    Every harness image (and deployment.image) becomes a SIF, pulled to a temporary name and
    renamed into place; a SIF already staged from the same image is kept (with skopeo, only
    while the registry digest matches). The model (deployment.hf_model_handle) and tokenizers
    named by params.extra.tokenizer go into execution.hf_cache_dir; so do the datasets a task
    lists (data:), built without network where a package ships them (HumanEval), in the Python
    beside nemo-evaluator on PATH. Exit 2: config problem, nothing done; exit 1: something
    could not be staged (listed, with the command that does it).
    """
    from hpceval import api

    known = _parse_pulls(pulls)
    run_file = run_file_from(config_file, config_opt, config_dir, config_name)
    # Secrets are not needed to stage (a gated hub repo reads $HF_TOKEN itself).
    configs = api.load(run_file, overrides, profile=profile, check_environment=False)
    for note in configs[0].composed.notes:
        click.echo(f"hpceval: note: {note}", err=True)
    report = api.stage(configs, dry_run=dry_run, force=force, pulls=known,
                       echo=lambda text: click.echo(text, err=True))
    for item in report.items:
        click.echo(item.line())
    if not report.items:
        click.echo("nothing to stage: this run needs no images or hub data")
    for hint in report.hints:
        click.echo(f"hint: {hint}")
    if report.manifest is not None:
        click.echo(f"manifest: {report.manifest}")
    if dry_run:
        click.echo("dry run: nothing was pulled or written")
    if not report.ok:
        bad = [i for i in report.items if not i.ok]
        click.echo(f"hpceval stage: {len(bad)} item(s) not staged (see above)", err=True)
        raise SystemExit(STAGE_INCOMPLETE_EXIT)


@click.group()
def tasks() -> None:
    """Manage the task catalogue."""


@tasks.command("discover")
@click.argument("image", type=click.Path(path_type=Path))
@click.option("--runtime", type=click.Choice(["apptainer", "singularity"]), default="apptainer",
              show_default=True, help="Container runtime that opens the image.")
@click.option("--image", "reference", metavar="REPO:TAG",
              help="Image reference the SIF was built from (needed for a harness the catalogue "
                   "lacks, unless `hpceval stage` pulled it and recorded it).")
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write the catalogue file here instead of ~/.config/hpceval/tasks.")
@click.option("--dry-run", is_flag=True, help="Show what would be added; write nothing.")
def discover(image: Path, runtime: str, reference: str | None, out_dir: Path | None,
             dry_run: bool) -> None:
    """Add the harness and tasks of an eval-factory IMAGE.sif to your task catalogue.

    IMAGE may also be a venv (or site-packages folder) with the nvidia-* harness packages
    installed, as for container_runtime none (scripts/evalfactory/install.sh).
    Reads each core_evals/*/framework.yml inside it and writes the tasks the catalogue
    lacks to ~/.config/hpceval/tasks/<harness>.yaml (validated with the whole catalogue, then
    written atomically). Tasks already listed are left as they are.
    """
    from hpceval import api

    found = api.discover(image, runtime=runtime, reference=reference, out_dir=out_dir,
                         dry_run=dry_run)
    for item in found:
        kind = "new harness" if item.new_harness else "harness"
        click.echo(f"{kind} {item.harness}: {len(item.added)} task(s) added, "
                   f"{len(item.known)} already in the catalogue")
        for name in item.added:
            click.echo(f"  + {item.harness}.{name}")
        for why in item.skipped:
            click.echo(f"  skipped {why}")
        if item.written:
            click.echo(f"wrote {item.path}")
        elif dry_run and (item.added or item.new_harness):
            click.echo(f"would write {item.path} (dry run: nothing written)")
