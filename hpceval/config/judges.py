"""A sweep's judge job (an auxiliary deployment with ``scope: sweep``): its config and its rules.

One place for both: the loader checks a run with them (``load_run``: nothing is submitted when
they fail), and render/judge_job.py builds the judge job's config with them. The judge job is a
RunSpec whose deployment is the judge's, on ``num_nodes`` nodes of its own, with no tasks; its
walltime is ``execution.max_walltime``, at most the partition's MaxTime and the QOS's or the
association's MaxWall (it must outlive every element, which may run in waves or be resumed; the
aggregation job's stop file ends it as soon as the sweep is done). Where the limit is shorter,
or where no partition can be seen (render without Slurm: no limit is known, so it asks for
``execution.walltime``, which submit checks against them), the judge job continues in successor
jobs (auto-resume, templates/teardown.j2), recorded in its folder's jobs.chain.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hpceval.config.errors import ConfigIssue
from hpceval.config.layout import Layout, compute_layout, fit_explicit_layout
from hpceval.config.schema import (
    ApiEndpointSpec,
    AuxiliaryDeploymentSpec,
    DeploymentSpec,
    ExecutionSpec,
    RunSpec,
    TargetSpec,
)
from hpceval.engines import engine_for

if TYPE_CHECKING:
    from hpceval.config import ResolvedConfig

_DEPLOYMENT_FIELDS = tuple(f.name for f in dataclasses.fields(DeploymentSpec))


def sweep_scoped(spec: RunSpec) -> dict[str, AuxiliaryDeploymentSpec]:
    """The judges served by a judge job of their own (type none is an external endpoint,
    whatever its scope: nothing to serve, as render/judge_in_job.py reads it)."""
    return {n: a for n, a in spec.auxiliary_deployments.items()
            if a.scope == "sweep" and engine_for(a.type).serves}


def sweep_judge_issues(models: Sequence[tuple[str, RunSpec]]) -> list[ConfigIssue]:
    """What keeps a run's scope: sweep deployments from being one judge job for the run:
    a run of one model (no aggregation step ends the judge; the loader serves such a judge in
    the model's job instead), a backend that runs one job at a time, models declaring them
    differently, and the judge job's own layout (judge_issues). The judge deployment's own
    keys are config/aux_layout.py's (spec_issues), checked with each model."""
    from hpceval.backends import backend_for

    first_key, first = models[0]
    judges = sweep_scoped(first)
    issues = [ConfigIssue(f"models.{key}.auxiliary_deployments.{name}",
                          f"differs from model {first_key!r}'s; a scope: sweep deployment is "
                          "one job that every model of the sweep uses",
                          "declare it once, outside models:")
              for key, spec in models[1:] for name in sorted(set(judges) | set(sweep_scoped(spec)))
              if judges.get(name) != sweep_scoped(spec).get(name)]
    for name in sorted(judges):
        where = f"auxiliary_deployments.{name}.scope"
        if len(models) < 2:
            issues.append(ConfigIssue(where, "is sweep, but this run has one model: the judge "
                                      "job is ended by a sweep's aggregation step",
                                      "use scope: job (the judge in the model's job)"))
        elif not backend_for(first.execution.type).side_by_side:
            issues.append(ConfigIssue(
                where, f"is sweep, but execution.type {first.execution.type} runs one job at a "
                "time, so a judge job cannot serve the models' jobs beside it",
                "use scope: job (the judge in each model's job)"))
        issues += judge_issues(first, name)[1]
    return issues


def judge_spec(spec: RunSpec, name: str, invocation_id: str) -> RunSpec:
    """The judge job's RunSpec (before the layout fit): the judge's deployment, no tasks."""
    aux = spec.auxiliary_deployments[name]
    deployment = DeploymentSpec(**{f: getattr(aux, f) for f in _DEPLOYMENT_FIELDS})
    if aux.num_instances is not None and deployment.data_parallel_size is None:
        deployment = dataclasses.replace(deployment, data_parallel_size=aux.num_instances)
    walltime, capped = _judge_walltime(spec.execution)
    ex = dataclasses.replace(
        spec.execution, nodes=aux.num_nodes, walltime=walltime,
        auto_resume=spec.execution.auto_resume and capped, node_failure_retries=0,
        job_name=f"hpceval-{invocation_id}-judge-{name}")
    return dataclasses.replace(
        spec, execution=ex, deployment=deployment, auxiliary_deployments={},
        target=TargetSpec(ApiEndpointSpec(model_id=aux.request_model)),
        evaluation=dataclasses.replace(spec.evaluation, tasks=[]))


def _judge_walltime(ex: ExecutionSpec) -> tuple[str, bool]:
    """(the judge job's walltime, whether it continues in successor jobs). Never more than its
    backend allows (Slurm: the partition, the QOS, the association; more is refused or left
    pending for ever, and every model element waits on the judge's start). Capped, the judge
    continues in a successor job at its walltime, as a model's job does (up to max_walltime in
    all; none once the sweep is done); uncapped, the stop file ends it first."""
    from hpceval.backends import backend_for

    return backend_for(ex.type).walltime_within(ex, ex.max_walltime)


def judge_issues(spec: RunSpec, name: str, invocation_id: str = "judge"
                 ) -> tuple[tuple[RunSpec, Layout] | None, list[ConfigIssue]]:
    """(the judge job's spec and layout, or None; the issues that refuse it): the judge
    deployment's own keys (aux_layout.spec_issues: kind, image, names, num_nodes >= 1 for
    scope sweep), then the GPU arithmetic of its job."""
    from hpceval.config.aux_layout import spec_issues

    where = f"auxiliary_deployments.{name}"
    own = [i for i in spec_issues(spec) if i.path == where or i.path.startswith(where + ".")]
    if own:
        return None, own
    judge, _, issues = fit_explicit_layout(judge_spec(spec, name, invocation_id))
    layout, layout_issues = compute_layout(judge)
    issues = in_judge([*issues, *layout_issues], name)
    return (None if issues else (judge, layout)), issues


def in_judge(issues: Sequence[ConfigIssue], name: str) -> list[ConfigIssue]:
    """Issues found in the judge job's own config, named as the judge's keys."""
    return [ConfigIssue(f"auxiliary_deployments.{name} (its own job): {i.path}", i.message,
                        i.fix) for i in issues]


def judge_config(resolved: ResolvedConfig, name: str, invocation_id: str) -> ResolvedConfig:
    """The judge job's config, or ConfigError (the loader has checked it: a guard for configs
    built by hand)."""
    from hpceval.config import ConfigError, ResolvedConfig

    built, issues = judge_issues(resolved.spec, name, invocation_id)
    if built is None:
        raise ConfigError(issues)
    return ResolvedConfig(built[0], built[1], resolved.composed, ())
