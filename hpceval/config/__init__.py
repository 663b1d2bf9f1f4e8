"""Configuration: compose the layers, validate everything, produce one frozen RunSpec.

Loading a run also resolves its tasks in the catalogue (once; see ``config.tasks``) and runs
every check the job script needs (``config.script_checks``): what loads, renders.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hpceval.config.aux_layout import Placement
from hpceval.config.build import build_run_spec
from hpceval.config.compose import Composed, compose
from hpceval.config.errors import ConfigError, ConfigIssue
from hpceval.config.layout import Layout, compute_layout, fit_explicit_layout
from hpceval.config.schema import RunSpec
from hpceval.config.tasks import ResolvedTask

if TYPE_CHECKING:
    from hpceval.tasks import Catalogue, Resolution

__all__ = [
    "ConfigError", "ConfigIssue", "Layout", "ResolvedConfig", "ResolvedTask", "RunSpec",
    "load_config", "load_run", "with_tasks",
]


@dataclass(frozen=True)
class ResolvedConfig:
    spec: RunSpec
    layout: Layout
    composed: Composed
    tasks: tuple[ResolvedTask, ...] = ()  # spec.evaluation.tasks, resolved in the catalogue
    # auxiliary deployments served in this job (a judge), by name: where their instances go
    auxiliary: Mapping[str, Placement] = field(default_factory=dict)

    @property
    def placement(self) -> Placement:
        """Where the model's instances go: from node 0, GPU 0; pinned when a judge shares
        the node."""
        from hpceval.config.aux_layout import slice_gpus

        lay = self.layout
        return Placement(lay, 0, 0, pin=lay.instances_per_node > 1 or slice_gpus(self.spec) > 0)


def with_tasks(resolved: ResolvedConfig, catalogue: Catalogue | None = None) -> ResolvedConfig:
    """``resolved`` with its tasks resolved again, for a spec changed after loading (tests, the
    API); raises ConfigError as loading would."""
    from hpceval.config.script_checks import script_issues
    from hpceval.config.tasks import resolve_tasks

    if catalogue is None:
        from hpceval.tasks import load_catalogue

        catalogue = load_catalogue()
    tasks, issues = resolve_tasks(resolved.spec, catalogue, resolved.composed.data)
    issues += script_issues(resolved.spec, tasks)
    if issues:
        raise ConfigError(issues)
    return ResolvedConfig(resolved.spec, resolved.layout, resolved.composed, tasks,
                          resolved.auxiliary)


def load_run(run_file: Path | None = None, overrides: tuple[str, ...] | list[str] = (), *,
             profile: str | None = None, environ: Mapping[str, str] | None = None,
             check_environment: bool = True,
             catalogue: Catalogue | None = None) -> list[ResolvedConfig]:
    """One resolved config per model: a sweep's ``models:`` list, or the single model.

    Every model is validated, and its tasks resolved in ``catalogue`` (default: the installed
    one, loaded once here), before anything is returned; errors name the model's entry.
    """
    composed = compose(run_file, overrides, profile=profile)
    models = composed.data.pop("models", None)
    lookups = _Lookups(catalogue)
    if models is None:
        # one model: its scope sweep judges were turned into scope job (_sweep_judges_in_job)
        single = [_resolve(composed, environ, check_environment, lookups, single_model=True)]
        _check_judges([("model", single[0])])
        return single
    from hpceval.config.compose import merge
    from hpceval.config.sweep import expand_models

    resolved: list[ResolvedConfig] = []
    labels: list[str] = []
    issues: list[ConfigIssue] = []
    for label, _, patch in expand_models(models):
        one = Composed(copy.deepcopy(composed.data), dict(composed.sources),
                       list(composed.notes), composed.run_file, list(composed.layers),
                       composed.translation)
        merge(one.data, patch, one.sources, label)
        one.layers.append((label, "its entry under models: in the run file"))
        try:
            resolved.append(_resolve(one, environ, check_environment, lookups))
            labels.append(label)
        except ConfigError as exc:
            issues += [ConfigIssue(f"{label}: {i.path}", i.message, i.fix) for i in exc.issues]
    if issues:
        raise ConfigError(issues)
    _check_judges(list(zip(labels, resolved, strict=True)))
    return resolved


def _check_judges(models: list[tuple[str, ResolvedConfig]]) -> None:
    """A run's scope: sweep deployments (one judge job for the run): config/judges.py."""
    from hpceval.config.judges import sweep_judge_issues

    issues = sweep_judge_issues([(label, r.spec) for label, r in models])
    if issues:
        raise ConfigError(issues)


class _Lookups:
    """One catalogue per load, loaded on first use; a task name is looked up once per load."""

    def __init__(self, catalogue: Catalogue | None) -> None:
        self._catalogue = catalogue
        self.memo: dict[tuple[str, bool], Resolution] = {}

    @property
    def catalogue(self) -> Catalogue:
        if self._catalogue is None:
            from hpceval.tasks import load_catalogue

            self._catalogue = load_catalogue()
        return self._catalogue


def load_config(run_file: Path | None = None, overrides: tuple[str, ...] | list[str] = (), *,
                profile: str | None = None, environ: Mapping[str, str] | None = None,
                check_environment: bool = True) -> ResolvedConfig:
    """Compose and validate a single-model run; raise ConfigError (exit 2) with every issue."""
    runs = load_run(run_file, overrides, profile=profile, environ=environ,
                    check_environment=check_environment)
    if len(runs) != 1:
        raise ConfigError.at("models", f"this run is a sweep of {len(runs)} models",
                             "use load_run() for sweeps")
    return runs[0]


def _resolve(composed: Composed, environ: Mapping[str, str] | None,
             check_environment: bool, lookups: _Lookups, *,
             single_model: bool = False) -> ResolvedConfig:
    from hpceval.config.auto import local_gpus, local_runtime
    from hpceval.config.aux_layout import (
        env_issues,
        model_layout_spec,
        placements,
        slice_gpus,
        spec_issues,
    )
    from hpceval.config.auxiliary import reference_issues
    from hpceval.config.checks import (
        expand_paths,
        image_version_findings,
        load_fit_notes,
        mount_point_notes,
        semantic_issues,
        umask_notes,
    )
    from hpceval.config.script_checks import script_issues
    from hpceval.config.tasks import resolve_tasks

    env = os.environ if environ is None else environ
    gpu_notes, path_issues = local_gpus(composed.data, env)
    runtime_notes, runtime_issues = local_runtime(composed.data)
    gpu_notes, path_issues = gpu_notes + runtime_notes, path_issues + runtime_issues
    path_issues += expand_paths(composed.data, env)
    if path_issues:
        raise ConfigError(path_issues)
    foreign_notes, foreign_issues = composed.translation.environment(composed.data, env)
    if foreign_issues:
        raise ConfigError(foreign_issues)
    composed.notes += gpu_notes + foreign_notes
    spec = build_run_spec(composed.data)
    if single_model:
        spec, sweep_notes = _sweep_judges_in_job(spec)
        composed.notes += sweep_notes
    # An explicit data_parallel_size beside a judge's slice of the node sizes the model's part
    # of it: the node is not shrunk to the model's GPUs (the judge needs the rest).
    spec, layout_notes, issues = (spec, [], []) if slice_gpus(spec) else fit_explicit_layout(spec)
    composed.notes += (layout_notes + load_fit_notes(spec) + umask_notes(spec)
                       + mount_point_notes(spec))
    issues += list(semantic_issues(spec, env if check_environment else None))
    aux_issues = spec_issues(spec)
    issues += aux_issues + reference_issues(spec)
    issues += env_issues(spec, env if check_environment else None)
    layout, layout_issues = compute_layout(model_layout_spec(spec))
    aux_placements = {} if aux_issues else placements(spec)
    version_notes, version_issues = image_version_findings(
        spec, lambda where: _span(spec, where, layout, aux_placements))
    composed.notes += version_notes
    issues += version_issues
    if slice_gpus(spec):
        layout_issues = [ConfigIssue(i.path, f"{i.message} (the node's other "
                                     f"{slice_gpus(spec)} GPU(s) serve auxiliary deployments)",
                                     i.fix) for i in layout_issues]
    if not any(i.path.startswith(("deployment.data_parallel", "execution.gpus_per_node"))
               for i in issues):  # the same numbers would be refused twice
        issues += layout_issues
    tasks, task_issues = resolve_tasks(spec, lookups.catalogue, composed.data, lookups.memo)
    issues += task_issues
    issues += script_issues(spec, tasks)
    if issues:
        raise ConfigError(list(dict.fromkeys(issues)))
    return ResolvedConfig(spec, layout, composed, tasks, aux_placements)


def _span(spec: RunSpec, where: str, layout: Layout, aux: Mapping[str, Placement]) -> int:
    """Nodes per instance of the served deployment at key path ``where`` (1 if unknown): the
    model's layout, a judge's placement in the job, or a sweep judge's own job's layout."""
    from hpceval.config.judges import judge_issues

    if where == "deployment":
        return max(layout.nodes_per_instance, 1)
    name = where.split(".", 1)[1]
    if name in aux:
        return max(aux[name].layout.nodes_per_instance, 1)
    built, _ = judge_issues(spec, name)
    return max(built[1].nodes_per_instance, 1) if built else 1


def _sweep_judges_in_job(spec: RunSpec) -> tuple[RunSpec, list[str]]:
    """scope sweep on a run of one model: its one job is the sweep, so the judge is served in
    it (scope job) and loads once all the same; no judge job of its own to wait for."""
    import dataclasses

    changed = {name: dataclasses.replace(aux, scope="job")
               for name, aux in spec.auxiliary_deployments.items() if aux.scope == "sweep"}
    if not changed:
        return spec, []
    notes = [f"auxiliary_deployments.{name}.scope is sweep, but the run has one model: the "
             "judge is served in its job (scope job; it loads once either way)"
             for name in changed]
    return dataclasses.replace(
        spec, auxiliary_deployments={**spec.auxiliary_deployments, **changed}), notes
