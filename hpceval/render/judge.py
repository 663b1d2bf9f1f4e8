"""One judge per sweep: an auxiliary deployment with ``scope: sweep`` as a job of its own. Pure.

The judge job (templates/judge.sbatch.j2) is the model job's machinery with no tasks: the same
header, preamble, teardown, deployment and health partials, rendered from a RunSpec whose
deployment is the judge's. Once every instance is healthy it publishes, in
``<run dir>/auxiliary/<name>/``, ``token`` (0600) and then ``endpoint.json`` (renamed into
place), and serves until ``stop`` exists (the sweep's aggregation job writes it) or its walltime
ends. The array elements are submitted with ``--dependency=after:<judge job>`` (started, not
ended) and wait for ``endpoint.json`` themselves.

Walltime: ``execution.max_walltime``, the longest a model's chain of jobs may take; the judge
must outlive every element (which may run in waves under ``array_parallelism``), and the stop
file ends it early, so the allocation is held only while the sweep runs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from hpceval.config import ResolvedConfig
from hpceval.config.errors import ConfigError, ConfigIssue
from hpceval.config.layout import compute_layout, fit_explicit_layout
from hpceval.config.schema import (
    ApiEndpointSpec,
    AuxiliaryDeploymentSpec,
    DeploymentSpec,
    TargetSpec,
)
from hpceval.contract import AUX_DIR, AUX_JOB_SCRIPT
from hpceval.render.context import JobContext
from hpceval.render.header import header_lines
from hpceval.render.quoting import ShellCode, shipped_environment

JUDGE_TEMPLATE = "judge.sbatch.j2"
# the model job's header comments, as they read for the judge job
_JUDGE_WHY = {"nodes": "auxiliary_deployments.<name>.num_nodes: the judge's own nodes",
              "time": "execution.max_walltime: the stop file ends it sooner",
              "no-requeue": "a resumed sweep submits a new judge job"}
_DEPLOYMENT_FIELDS = tuple(f.name for f in dataclasses.fields(DeploymentSpec))


def judge_script(name: str) -> str:
    """The judge job's script, relative to the run directory."""
    return f"{AUX_DIR}/{name}/{AUX_JOB_SCRIPT}"


def sweep_judges(models: Sequence[tuple[str, ResolvedConfig]]
                 ) -> dict[str, AuxiliaryDeploymentSpec]:
    """The auxiliary deployments of a sweep that run as ONE job for the whole sweep.

    Every model must declare each of them identically (one job serves them all); a single-model
    run has no aggregation step to end the judge, so scope sweep needs a sweep."""
    from hpceval.backends import backend_for

    first_key, first = models[0]
    judges = {name: aux for name, aux in first.spec.auxiliary_deployments.items()
              if aux.scope == "sweep"}
    for key, resolved in models[1:]:
        theirs = {n: a for n, a in resolved.spec.auxiliary_deployments.items()
                  if a.scope == "sweep"}
        for name in sorted(set(judges) | set(theirs)):
            if judges.get(name) != theirs.get(name):
                raise ConfigError.at(
                    f"models.{key}.auxiliary_deployments.{name}",
                    f"differs from model {first_key!r}'s; a scope: sweep deployment is one job "
                    "that every model of the sweep uses", "declare it once, outside models:")
    if not judges:
        return {}
    name = sorted(judges)[0]
    where = f"auxiliary_deployments.{name}.scope"
    if len(models) < 2:
        raise ConfigError.at(where, "is sweep, but this run has one model: the judge job is "
                             "ended by the sweep's aggregation step",
                             "use scope: job (the judge in the model's job)")
    if not backend_for(first.spec.execution.type).side_by_side:
        raise ConfigError.at(where, f"is sweep, but execution.type {first.spec.execution.type} "
                             "runs one job at a time, so a judge job cannot serve the models' "
                             "jobs beside it", "use scope: job (the judge in each model's job)")
    return judges


def judge_config(resolved: ResolvedConfig, name: str, invocation_id: str) -> ResolvedConfig:
    """A config whose deployment is the judge's, on ``num_nodes`` nodes of its own, no tasks."""
    spec = resolved.spec
    aux = spec.auxiliary_deployments[name]
    where = f"auxiliary_deployments.{name}"
    if aux.type == "none":
        raise ConfigError.at(f"{where}.scope", "is sweep, but type none serves nothing (an "
                             "external endpoint)", "remove scope, or give it a server type")
    if aux.num_nodes < 1:
        raise ConfigError.at(f"{where}.num_nodes", "is 0, but a scope: sweep judge runs on "
                             "nodes of its own", "set num_nodes: 1 (or more)")
    deployment = DeploymentSpec(**{f: getattr(aux, f) for f in _DEPLOYMENT_FIELDS})
    if aux.num_instances is not None and deployment.data_parallel_size is None:
        deployment = dataclasses.replace(deployment, data_parallel_size=aux.num_instances)
    ex = dataclasses.replace(
        spec.execution, nodes=aux.num_nodes, walltime=spec.execution.max_walltime,
        auto_resume=False, job_name=f"hpceval-{invocation_id}-judge-{name}")
    judge = dataclasses.replace(
        spec, execution=ex, deployment=deployment, auxiliary_deployments={},
        target=TargetSpec(ApiEndpointSpec(model_id=aux.model_id or aux.served_model_name)),
        evaluation=dataclasses.replace(spec.evaluation, tasks=[]))
    judge, _, issues = fit_explicit_layout(judge)
    layout, layout_issues = compute_layout(judge)
    issues += layout_issues
    if issues:
        raise _in_judge(issues, name)
    return ResolvedConfig(judge, layout, resolved.composed, ())


def render_judge_job(resolved: ResolvedConfig, name: str, ctx: JobContext) -> str:
    """The judge job's script for the auxiliary deployment ``name`` of ``resolved``."""
    from hpceval.render.job import build_context

    judge = judge_config(resolved, name, ctx.invocation_id)
    judge_ctx = dataclasses.replace(ctx, model_key=f"judge-{name}", array=None,
                                    script_path=f"{ctx.run_dir_text}/{judge_script(name)}")
    try:
        context: dict[str, Any] = build_context(judge, judge_ctx)
    except ConfigError as exc:  # its keys are the judge's: say so
        raise _in_judge(exc.issues, name) from exc
    aux = resolved.spec.auxiliary_deployments[name]
    model_id = aux.model_id or aux.served_model_name or name
    log_dir = f"{ctx.run_dir_text}/{AUX_DIR}/{name}"
    header = [dataclasses.replace(line, why=_JUDGE_WHY.get(line.flag, line.why))
              for line in header_lines(judge.spec, judge_ctx, log_dir)]
    context.update(
        header=[ShellCode(line.text()) for line in header],
        proxy=False, steps=[],
        judge={"name": name, "model_id": model_id, "model_id_json": json.dumps(model_id)})
    text = shipped_environment().get_template(JUDGE_TEMPLATE).render(context)
    if "\x00" in text:
        raise ConfigError.at(f"auxiliary_deployments.{name}", "a NUL character reached the "
                             "judge job's script")
    return text


def _in_judge(issues: Sequence[ConfigIssue], name: str) -> ConfigError:
    """Issues found in the judge job's own config, named as the judge's keys."""
    return ConfigError([ConfigIssue(f"auxiliary_deployments.{name} (its own job): {i.path}",
                                    i.message, i.fix) for i in issues])
