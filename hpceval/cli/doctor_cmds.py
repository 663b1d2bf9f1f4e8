"""``hpceval doctor``: check a site (login node, and with --on-node one compute node)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from hpceval.cli.options import config_options, run_file_from


def _host_port(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(f"{value!r}: write HOST:PORT, e.g. 127.0.0.1:3128")
    return value


@click.command()
@config_options
@click.option("--on-node", is_flag=True,
              help="Also submit one short CPU job to the partition and report what a compute "
                   "node sees (waits for it, at most --timeout).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=300.0,
              show_default=True, help="Seconds to wait for the --on-node job's report.")
@click.option("--network-target", metavar="HOST:PORT", callback=_host_port,
              help="What the node job tries to connect to (default: $https_proxy, or an "
                   "external target.api_endpoint.url; neither: not tried).")
@click.option("--json", "as_json", is_flag=True, help="Print the lines as JSON.")
def doctor(config_file: str | None, config_opt: str | None, config_dir: str | None,
           config_name: str | None, profile: str | None, overrides: tuple[str, ...],
           on_node: bool, timeout_s: float, network_target: str | None,
           as_json: bool) -> None:
    """Check that this site can run RUN.yaml (or a site PROFILE) before spending GPU-hours.

    On the login node: the partition exists and its MaxTime fits execution.walltime, a
    test-only submission accepts the account/QOS, images and data are staged (RUN.yaml only),
    HPCEVAL_PYTHON and the output dir are on shared storage, the output dir is writable. With
    --on-node, one short CPU job reports: hpceval importable by HPCEVAL_PYTHON, each `module
    load`, apptainer/singularity/enroot/podman and their versions, GPUs (nvidia-smi -L), the
    HF cache and image dir readable, outbound network (bounded, only with a target), the
    default route, free ports below 32768. One table, each line ok / warning / problem with
    the fix. Exit 0: no problem (warnings allowed); 1: a problem; 2: config error.
    """
    from hpceval import api
    from hpceval.cli.options import load_all

    run_file = run_file_from(config_file, config_opt, config_dir, config_name)
    # a name that is no file and no .yaml: a site profile (hpceval ls profiles)
    bare = run_file is not None and not run_file.is_file() and \
        run_file.suffix not in (".yaml", ".yml") and not (config_dir or config_opt)
    if bare and profile is not None:
        raise click.UsageError("give a run file or a profile, not both")
    if bare or (run_file is None and profile is not None):
        report = api.doctor_report(None, overrides, profile=str(run_file) if bare else profile,
                                   on_node=on_node, network_target=network_target,
                                   timeout_s=timeout_s)
    else:
        # secrets are not needed to look at the site; the preflight names missing ones
        configs = load_all(config_file, config_opt, config_dir, config_name, profile, overrides,
                           check_environment=False)
        report = api.doctor_report(configs, on_node=on_node, network_target=network_target,
                                   timeout_s=timeout_s)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(report.table())
        if report.job_dir is not None:
            click.echo(f"the node job's script, log and report are kept in "
                       f"{Path(report.job_dir)}")
    if report.exit_code:
        raise SystemExit(report.exit_code)
