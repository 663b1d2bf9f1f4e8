"""Configuration: compose the layers, validate everything, produce one frozen RunSpec."""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hpceval.config.build import build_run_spec
from hpceval.config.compose import Composed, compose
from hpceval.config.errors import ConfigError, ConfigIssue
from hpceval.config.layout import Layout, compute_layout, fit_explicit_layout
from hpceval.config.schema import RunSpec

__all__ = [
    "ConfigError", "ConfigIssue", "Layout", "ResolvedConfig", "RunSpec", "load_config", "load_run",
]


@dataclass(frozen=True)
class ResolvedConfig:
    spec: RunSpec
    layout: Layout
    composed: Composed


def load_run(run_file: Path | None = None, overrides: tuple[str, ...] | list[str] = (), *,
             profile: str | None = None, environ: Mapping[str, str] | None = None,
             check_environment: bool = True) -> list[ResolvedConfig]:
    """One resolved config per model: a sweep's ``models:`` list, or the single model.

    Every model is validated before anything is returned; errors name the model's entry.
    """
    composed = compose(run_file, overrides, profile=profile)
    models = composed.data.pop("models", None)
    if models is None:
        return [_resolve(composed, environ, check_environment)]
    from hpceval.config.compose import merge
    from hpceval.config.sweep import expand_models

    resolved: list[ResolvedConfig] = []
    issues: list[ConfigIssue] = []
    for label, _, patch in expand_models(models):
        one = Composed(copy.deepcopy(composed.data), dict(composed.sources),
                       list(composed.notes), composed.run_file, list(composed.layers))
        merge(one.data, patch, one.sources, label)
        try:
            resolved.append(_resolve(one, environ, check_environment))
        except ConfigError as exc:
            issues += [ConfigIssue(f"{label}: {i.path}", i.message, i.fix) for i in exc.issues]
    if issues:
        raise ConfigError(issues)
    return resolved


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
             check_environment: bool) -> ResolvedConfig:
    from hpceval.config.checks import expand_paths, semantic_issues, task_issues

    env = os.environ if environ is None else environ
    path_issues = expand_paths(composed.data, env)
    if path_issues:
        raise ConfigError(path_issues)
    spec = build_run_spec(composed.data)
    spec, layout_notes, issues = fit_explicit_layout(spec)
    composed.notes += layout_notes
    issues += semantic_issues(spec, env if check_environment else None)
    layout, layout_issues = compute_layout(spec)
    if not any(i.path.startswith(("deployment.data_parallel", "execution.gpus_per_node"))
               for i in issues):  # the same numbers would be refused twice
        issues += layout_issues
    issues += task_issues(spec)
    if issues:
        raise ConfigError(issues)
    return ResolvedConfig(spec, layout, composed)
