"""Configuration: compose the layers, validate everything, produce one frozen RunSpec."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hpceval.config.build import build_run_spec
from hpceval.config.compose import Composed, compose
from hpceval.config.errors import ConfigError, ConfigIssue
from hpceval.config.layout import Layout, compute_layout
from hpceval.config.schema import RunSpec

__all__ = ["ConfigError", "ConfigIssue", "Layout", "ResolvedConfig", "RunSpec", "load_config"]


@dataclass(frozen=True)
class ResolvedConfig:
    spec: RunSpec
    layout: Layout
    composed: Composed


def load_config(run_file: Path | None = None, overrides: tuple[str, ...] | list[str] = (), *,
                profile: str | None = None, environ: Mapping[str, str] | None = None,
                check_environment: bool = True) -> ResolvedConfig:
    """Compose and validate; raise ConfigError (exit code 2) with every issue found."""
    from hpceval.config.checks import expand_paths, semantic_issues, task_issues

    composed = compose(run_file, overrides, profile=profile)
    env = os.environ if environ is None else environ
    path_issues = expand_paths(composed.data, env)
    if path_issues:
        raise ConfigError(path_issues)
    spec = build_run_spec(composed.data)
    issues = list(semantic_issues(spec, env if check_environment else None))
    layout, layout_issues = compute_layout(spec)
    issues += layout_issues
    issues += task_issues(spec)
    if issues:
        raise ConfigError(issues)
    return ResolvedConfig(spec, layout, composed)
