"""What the job script cannot express, checked when the run is loaded.

Render writes values into the backend's header (its rules: Backend.spec_issues) and container
binds; some values cannot be written there at all. Each rule is a function here that render
calls too (as a guard for hand-built configs), so `hpceval config show` refuses exactly what
`hpceval render` would.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from hpceval.backends import backend_for
from hpceval.config.errors import ConfigIssue
from hpceval.config.schema import ExecutionSpec, RunSpec
from hpceval.config.tasks import ResolvedTask
from hpceval.runtimes import runtime_for


def bind_issue(path: str, where: str) -> ConfigIssue | None:
    # apptainer splits --bind on ',' and ':'; such a path cannot be bound, so say which key.
    if "," in path or ":" in path:
        return ConfigIssue(where, f"{path!r} contains ',' or ':', which a container bind "
                           "cannot express", "use a path without them (e.g. a symlink)")
    return None


def extra_bind_issue(spec: str, where: str) -> ConfigIssue | None:
    if "," in spec or not spec.strip():
        return ConfigIssue(where, f"{spec!r} is not one 'src[:dst[:opts]]' bind",
                           "give one bind per list item")
    return None


def server_issues(spec: RunSpec) -> Iterator[ConfigIssue]:
    """A server run from an image: a container runtime and an image are needed."""
    ex, dep = spec.execution, spec.deployment
    if not spec.deployment.serves_from_image:
        return
    if not dep.image:
        yield ConfigIssue("deployment.image", f"a {dep.type} server from a container needs an "
                          "image", "set deployment.image, or deployment.runtime=host")
    if not runtime_for(ex.container_runtime).containers:
        yield ConfigIssue("deployment.runtime", "is container, but execution.container_runtime "
                          "is none", "set deployment.runtime=host, or a container runtime")
        return
    if dep.checkpoint_path:
        yield from _some(bind_issue(dep.checkpoint_path, "deployment.checkpoint_path"))
    if ex.hf_cache_dir:
        yield from _some(bind_issue(ex.hf_cache_dir, "execution.hf_cache_dir"))
    yield from extra_binds_issues(ex)


def extra_binds_issues(ex: ExecutionSpec) -> Iterator[ConfigIssue]:
    for i, extra in enumerate(ex.extra_binds):
        yield from _some(extra_bind_issue(extra, f"execution.extra_binds[{i}]"))


def task_container_issues(spec: RunSpec, tasks: Sequence[ResolvedTask]) -> Iterator[ConfigIssue]:
    ex = spec.execution
    # (Every container harness has an image: the catalogue's schema requires one.)
    if any(t.in_container(ex) for t in tasks):
        if ex.hf_cache_dir:
            yield from _some(bind_issue(ex.hf_cache_dir, "execution.hf_cache_dir"))
        if ex.dataset_dir:
            yield from _some(bind_issue(ex.dataset_dir, "execution.dataset_dir"))
        yield from extra_binds_issues(ex)


def script_issues(spec: RunSpec, tasks: Sequence[ResolvedTask]) -> list[ConfigIssue]:
    """Every value of one model's run that its job script could not express."""
    issues = [*backend_for(spec.execution.type).spec_issues(spec.execution, ask=False),
              *server_issues(spec), *task_container_issues(spec, tasks)]
    return list(dict.fromkeys(issues))


def _some(issue: ConfigIssue | None) -> Iterator[ConfigIssue]:
    if issue is not None:
        yield issue
