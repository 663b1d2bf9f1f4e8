"""One judge per sweep: an auxiliary deployment with ``scope: sweep`` as a job of its own. Pure.

The judge job (templates/judge.sbatch.j2) is the model job's machinery with no tasks: the same
header, preamble, teardown, deployment and health partials, rendered from a RunSpec whose
deployment is the judge's. Once every instance is healthy it publishes, in
``<run dir>/auxiliary/<name>/``, ``token`` (0600) and then ``endpoint.json`` (renamed into
place), and serves until ``stop`` exists (the sweep's aggregation job writes it) or its walltime
ends. The array elements are submitted with ``--dependency=after:<judge job>`` (started, not
ended) and wait for ``endpoint.json`` themselves. The judge job's config and the rules that
refuse it are config/judges.py's (the loader applies them first).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from hpceval.config import ResolvedConfig
from hpceval.config.aux_layout import job_nodes
from hpceval.config.errors import ConfigError
from hpceval.config.judges import in_judge, judge_config, sweep_judge_issues, sweep_scoped
from hpceval.config.schema import AuxiliaryDeploymentSpec
from hpceval.contract import AUX_JOB_SCRIPT, aux_folder
from hpceval.records import Role
from hpceval.render.context import JobContext, job_backend
from hpceval.render.quoting import ShellCode, shipped_environment

JUDGE_TEMPLATE = "judge.sbatch.j2"


def judge_script(name: str) -> str:
    """The judge job's script, relative to the run directory."""
    return f"{aux_folder(name)}/{AUX_JOB_SCRIPT}"


def sweep_judges(models: Sequence[tuple[str, ResolvedConfig]]
                 ) -> dict[str, AuxiliaryDeploymentSpec]:
    """The auxiliary deployments of a sweep that run as ONE job for the whole sweep (the
    loader refused what config.judges refuses; checked again for configs built by hand)."""
    issues = sweep_judge_issues([(key, resolved.spec) for key, resolved in models])
    if issues:
        raise ConfigError(issues)
    return sweep_scoped(models[0][1].spec)


def render_judge_job(resolved: ResolvedConfig, name: str, ctx: JobContext) -> str:
    """The judge job's script for the auxiliary deployment ``name`` of ``resolved``."""
    from hpceval.render.job import build_context

    judge = judge_config(resolved, name, ctx.invocation_id)
    judge_ctx = dataclasses.replace(ctx, model_key=f"judge-{name}", array=None,
                                    script_path=f"{ctx.run_dir_text}/{judge_script(name)}")
    try:
        # TCP: the models' jobs, on other nodes, are its clients (a socket serves its node only)
        context: dict[str, Any] = build_context(judge, judge_ctx, sockets=False)
    except ConfigError as exc:  # its keys are the judge's: say so
        raise ConfigError(in_judge(exc.issues, name)) from exc
    aux = resolved.spec.auxiliary_deployments[name]
    model_id = aux.request_model or name
    log_dir = f"{ctx.run_dir_text}/{aux_folder(name)}"
    header = job_backend(judge.spec.execution.type).header(
        judge.spec, judge_ctx, log_dir, job_nodes(judge.spec), role=Role.JUDGE)
    context.update(
        header=[ShellCode(line) for line in header],
        proxy=False, steps=[], overlap=False,  # a judge job serves; it runs no task
        judge={"name": name, "model_id": model_id, "model_id_json": json.dumps(model_id)})
    text = shipped_environment().get_template(JUDGE_TEMPLATE).render(context)
    if "\x00" in text:
        raise ConfigError.at(f"auxiliary_deployments.{name}", "a NUL character reached the "
                             "judge job's script")
    return text

