"""Each task of a run resolved once, against one catalogue, when the run is loaded.

A ``ResolvedTask`` carries what everything downstream needs about a task: the run's entry,
the catalogue's task and harness definitions, its directory name in the run, its parameters
and its harness command line. Render, staging, preflight and the CLI read these; none of them
looks a task up again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpceval.config.errors import ConfigIssue
from hpceval.config.schema import ExecutionSpec, RunSpec, TaskSpec
from hpceval.engines import engine_for
from hpceval.runtimes import runtime_for

if TYPE_CHECKING:
    from hpceval.tasks import Catalogue, HarnessDef, Resolution, TaskDef

_KEY_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
# What hpceval's judged tasks read to find their judge (lm-eval-upstream.judged_qa's utils.py):
# NeMo Evaluator's variable for an auxiliary deployment named judge, which the job exports.


@dataclass(frozen=True)
class ResolvedTask:
    spec: TaskSpec  # the run's entry (evaluation.tasks[i])
    resolution: Resolution  # what the name resolved to, and how (for the CLI's note)
    harness: HarnessDef
    key: str  # its directory name under models/<key>/tasks/
    params: dict[str, Any]  # what the command template sees as `params`
    command: str  # the harness command line, $HPCEVAL_* references for in-job values

    @property
    def task(self) -> TaskDef:
        return self.resolution.task

    @property
    def where(self) -> str:
        return f"evaluation.tasks.{self.spec.name}"

    def in_container(self, ex: ExecutionSpec) -> bool:
        """Whether the harness runs in a container image (else host-installed)."""
        return runtime_for(ex.container_runtime).containers and (
            self.harness.from_image or self.spec.container is not None)

    def image(self, ex: ExecutionSpec) -> str | None:
        """The image a containerised harness runs from: the task's container, a staged SIF,
        or the catalogue's docker reference (pulled at run time); None: none is known."""
        if self.spec.container:
            return self.spec.container
        if ex.image_dir and self.task.sif and runtime_for(ex.container_runtime).staged_files:
            name = runtime_for(ex.container_runtime).image_file(self.task.sif)
            return f"{ex.image_dir.rstrip('/')}/{name}"
        if self.task.image:
            return f"docker://{self.task.image}"
        return None


def params_for(task: TaskDef, spec_task: TaskSpec,
               explicit: frozenset[str] | None = None) -> dict[str, Any]:
    """Parameters for the command template: what the run config set explicitly wins, then the
    catalogue's per-task defaults, then hpceval's schema defaults. ``explicit`` None: every
    non-null run-config value counts as set."""
    from hpceval.tasks import GENERIC_PARAMS

    params: dict[str, Any] = dict.fromkeys(GENERIC_PARAMS)
    for name, value in vars(spec_task.params).items():
        if name == "extra":
            continue
        if (explicit is None or name in explicit) and value is not None:
            params[name] = value
        elif task.params.get(name) is not None:
            params[name] = task.params[name]
        else:
            params[name] = value
    extra = {**dict(task.params.get("extra", {})), **spec_task.params.extra}
    return {**params, "extra": extra}


def explicit_params(composed_data: dict[str, Any], index: int) -> frozenset[str]:
    """Params the user wrote (evaluation.params or the task's own), as opposed to schema
    defaults, read from the composed layers; catalogue defaults beat schema defaults."""
    evaluation = composed_data.get("evaluation") or {}
    names = set((evaluation.get("params") or {}).keys())
    raw = evaluation.get("tasks") or []
    if index < len(raw) and isinstance(raw[index], dict):
        names |= set((raw[index].get("params") or {}).keys())
    return frozenset(names - {"extra"})


def _key(name: str, seen: set[str]) -> str:
    key = _KEY_CHARS.sub("_", name).strip("._") or "task"
    base, n = key, 2
    while key in seen:
        key, n = f"{base}-{n}", n + 1
    seen.add(key)
    return key


def resolve_tasks(spec: RunSpec, catalogue: Catalogue, composed_data: dict[str, Any] | None,
                  memo: dict[tuple[str, bool], Resolution] | None = None
                  ) -> tuple[tuple[ResolvedTask, ...], list[ConfigIssue]]:
    """Every task of ``spec`` resolved in ``catalogue``, with the issues that stop a task from
    being written into a job. ``memo`` shares lookups between the models of a sweep;
    ``composed_data`` None (a hand-built spec): every non-null param counts as set."""
    from hpceval.config import auxiliary
    from hpceval.config.endpoint_key import harness_key
    from hpceval.tasks import TaskLookupError
    from hpceval.tasks.command import CommandError, render_command, runtime_token

    key_env = harness_key(spec)  # the variable the harness reads its API key from
    server_tokenizer = engine_for(spec.deployment.type).tokenizer_routes
    model_id = spec.request_model or ""
    memo = {} if memo is None else memo
    seen: set[str] = set()
    out: list[ResolvedTask] = []
    issues: list[ConfigIssue] = []
    for i, task_spec in enumerate(spec.evaluation.tasks):
        where = f"evaluation.tasks.{task_spec.name}" if task_spec.name else \
            f"evaluation.tasks[{i}]"
        lookup = (task_spec.name, task_spec.allow_unlisted)
        try:
            if lookup not in memo:
                memo[lookup] = catalogue.resolve(task_spec.name,
                                                 allow_unlisted=task_spec.allow_unlisted)
            resolution = memo[lookup]
        except TaskLookupError as exc:
            issues.append(ConfigIssue(f"{where}.name", str(exc).rstrip("."),
                                      "see `hpceval ls tasks`; write harness.task for an "
                                      "unlisted task and set allow_unlisted: true"))
            continue
        task = resolution.task
        harness = catalogue.harness(task.harness)
        explicit = None if composed_data is None else explicit_params(composed_data, i)
        params = params_for(task, task_spec, explicit)
        unnamed = auxiliary.judge_issue(task, task_spec, params, spec, where)
        if unnamed is not None:
            issues.append(unnamed)
        # auxiliary_deployments.<name>.<field> references: the judge's model name, or its URL
        # as "${HPCEVAL_AUX_<NAME>_<FIELD>}" (known in the job); checked when the run loaded
        seen_params = auxiliary.resolve(params, spec.auxiliary_deployments, runtime_token)
        try:
            command = render_command(harness, task, seen_params, model_id=model_id,
                                     api_key_env=key_env, server_tokenizer=server_tokenizer)
        except CommandError as exc:
            issues.append(ConfigIssue(where, str(exc), f"check its catalogue file "
                                      f"{harness.source}"))
            continue
        out.append(ResolvedTask(task_spec, resolution, harness,
                                _key(task.qualified_name, seen), params, command))
    return tuple(out), issues


def stale(tasks: Sequence[ResolvedTask], spec: RunSpec) -> bool:
    """Whether ``tasks`` were resolved for other task entries than ``spec`` holds (a spec
    changed by hand after loading): then they must be resolved again."""
    return [t.spec for t in tasks] != list(spec.evaluation.tasks)
