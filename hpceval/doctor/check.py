"""``hpceval doctor`` end to end: the login lines, then (``on_node``) the node job's lines."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from typing import cast

from hpceval.config import ResolvedConfig
from hpceval.config.schema import RunSpec
from hpceval.doctor import login, node
from hpceval.doctor.report import Line, Report, Status

DEFAULT_TIMEOUT_S = 300.0
# A profile alone is not a run (no tasks, no model): these stand-ins let its execution section
# be built and checked; nothing of them reaches a job or a check.
_STAND_IN = {"deployment": {"type": "none"}, "evaluation": {"tasks": [{"name": "doctor"}]}}


def profile_spec(profile: str, overrides: Sequence[str] = (),
                 environ: Mapping[str, str] | None = None) -> RunSpec:
    """The RunSpec of a site profile on its own (``hpceval doctor PROFILE``)."""
    from hpceval.config.build import build_run_spec
    from hpceval.config.checks import expand_paths
    from hpceval.config.compose import compose
    from hpceval.config.errors import ConfigError

    composed = compose(None, list(overrides), profile=profile)
    for key, value in _STAND_IN.items():
        composed.data.setdefault(key, value)
    issues = expand_paths(composed.data, os.environ if environ is None else environ)
    if issues:
        raise ConfigError(issues)
    return build_run_spec(composed.data)


def doctor(spec: RunSpec, configs: Sequence[ResolvedConfig] = (), *,
           client: login.ProbingClient | None = None, on_node: bool = False,
           network_target: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
           environ: Mapping[str, str] | None = None, mounts: str | None = None) -> Report:
    """Every check of the site ``spec`` runs on; ``configs`` (a run's models, empty for a bare
    profile) add the staged images and data."""
    env = dict(os.environ if environ is None else environ)
    table = login.read_mounts() if mounts is None else mounts
    ex = spec.execution
    python = ex.python or sys.executable
    if client is None:
        from hpceval.backends.slurm.backend import SlurmBackend

        # the backend's client: the one seam through which hpceval submits
        client = cast(login.ProbingClient, SlurmBackend().client)
    report = Report()
    report.lines += login.partition_lines(ex)
    report.lines.append(login.association_line(ex))
    report.lines.append(login.submit_limit_line(ex))
    report.lines.append(login.submit_environment_line(configs[0].spec if configs else spec, env))
    folder, lines = login.private_folder(ex.output_dir, table)
    report.lines += lines
    # the job's own header: a run's first model's (what submit writes), else the profile's
    report.lines.append(login.test_only_line(configs[0].spec if configs else spec, client,
                                             folder))
    report.lines += login.staging_lines(configs, env) if configs else [Line(
        login.LOGIN, "images and data", Status.OK, "not checked: a profile alone names no run",
        "give RUN.yaml to check what a run needs staged")]
    report.lines.append(login.python_line(python, table))
    if on_node and folder is None:
        report.lines.append(Line(node.NODE, "doctor job", Status.WARNING, "not run: it reports "
                                 "into execution.output_dir, which is not usable",
                                 "fix execution.output_dir (above)"))
    elif on_node and folder is not None:
        target = node.network_target([spec, *(c.spec for c in configs)], network_target, env)
        script = node.job_script(ex, python, folder / node.REPORT_FILE, target)
        report.job_id, facts, failed = node.run_node_job(client, ex, folder, script,
                                                         timeout_s=timeout_s)
        report.lines += [failed] if failed is not None else node.node_lines(
            spec, facts, python, target)
    if folder is not None:
        if on_node and report.status is Status.PROBLEM:
            report.job_dir = str(folder)  # its script, log and report: kept to read
        else:
            shutil.rmtree(folder, ignore_errors=True)
    return report
