"""Task steps: resolve each task in the catalogue, build its command, runner and environment."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from hpceval.config import ResolvedConfig
from hpceval.config.checks import env_reference, literal_env
from hpceval.config.errors import ConfigError
from hpceval.render import pyxis
from hpceval.render.harness import params_for, render_command
from hpceval.render.quoting import LineStart, ShellCode, passed_env, var
from hpceval.staging.images import image_file_name
from hpceval.tasks import Catalogue, TaskLookupError

ENDPOINT_PATHS = {"chat": "/chat/completions", "vlm": "/chat/completions",
                  "completions": "/completions", "embedding": "/embeddings"}
_KEY_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Step:
    index: int
    key: str  # directory name under tasks/
    task: str  # harness.task, for `hpceval.job collect`
    title: str
    timeout: int
    command: ShellCode
    runner: list[Any]  # container exec prefix; empty: the host-installed harness
    env: list[tuple[str, Any]]
    expected_requests: int | None = None  # TaskDef.expected_requests: None when unknown


def env_value(value: str) -> Any:
    """A config env value: ``host:NAME`` / ``$NAME`` pass a variable through by name."""
    ref = env_reference(value)
    if ref is None:
        return literal_env(value)
    return passed_env(ref)


def container_prefix(resolved: ResolvedConfig) -> str:
    runtime = resolved.spec.execution.container_runtime
    return {"apptainer": "APPTAINERENV_", "singularity": "SINGULARITYENV_"}.get(runtime, "")


def bind(path: str, where: str, options: str = "") -> str:
    # apptainer splits --bind on ',' and ':'; such a path cannot be bound, so say which key.
    if "," in path or ":" in path:
        raise ConfigError.at(where, f"{path!r} contains ',' or ':', which a container bind "
                             "cannot express", "use a path without them (e.g. a symlink)")
    return f"{path}:{path}" + (f":{options}" if options else "")


def _key(name: str, seen: set[str]) -> str:
    key = _KEY_CHARS.sub("_", name).strip("._") or "task"
    base, n = key, 2
    while key in seen:
        key, n = f"{base}-{n}", n + 1
    seen.add(key)
    return key


def build_steps(resolved: ResolvedConfig, catalogue: Catalogue) -> list[Step]:
    spec = resolved.spec
    ex, ep = spec.execution, spec.target.api_endpoint
    model_id = ep.model_id or spec.deployment.served_model_name or ""
    seen: set[str] = set()
    steps: list[Step] = []
    for index, task_spec in enumerate(spec.evaluation.tasks, start=1):
        where = f"evaluation.tasks.{task_spec.name}"
        try:
            resolution = catalogue.resolve(task_spec.name, allow_unlisted=task_spec.allow_unlisted)
        except TaskLookupError as exc:
            raise ConfigError.at(f"{where}.name", str(exc), "see `hpceval ls tasks`") from exc
        task = resolution.task
        harness = catalogue.harness(task.harness)
        key = _key(task.qualified_name, seen)
        explicit = explicit_params(resolved, index - 1)
        command = render_command(harness, task, task_spec, model_id=model_id,
                                 api_key_env=ep.api_key_name, where=where, explicit=explicit)
        in_container = ex.container_runtime != "none" and (
            harness.runtime == "container" or task_spec.container is not None)
        prefix = container_prefix(resolved) if in_container else ""
        env = [(prefix + name, value) for name, value in _task_env(resolved, task, task_spec,
                                                                    in_container)]
        runner = _runner(resolved, task, task_spec, key, where,
                         [name for name, _ in env]) if in_container else []
        how = f"in {ex.container_runtime}" if in_container else "host-installed harness"
        title = f"{task.qualified_name} ({task.endpoint_type} endpoint, {how})"
        if resolution.requested != task.qualified_name:
            title += f", requested as {resolution.requested}"
        limit = params_for(task, task_spec, explicit).get("limit_samples")
        steps.append(Step(index, key, task.qualified_name, title, task_spec.timeout or 0,
                          command, runner, env, task.expected_requests(limit)))
    return steps


def explicit_params(resolved: ResolvedConfig, index: int) -> frozenset[str]:
    """Params the user wrote (evaluation.params or the task's own), as opposed to schema
    defaults, read from the composed layers; catalogue defaults beat schema defaults."""
    evaluation = resolved.composed.data.get("evaluation") or {}
    names = set((evaluation.get("params") or {}).keys())
    raw = evaluation.get("tasks") or []
    if index < len(raw) and isinstance(raw[index], dict):
        names |= set((raw[index].get("params") or {}).keys())
    return frozenset(names - {"extra"})


def _runner(resolved: ResolvedConfig, task: Any, task_spec: Any, key: str,
            where: str, env_names: list[str]) -> list[Any]:
    ex = resolved.spec.execution
    if task_spec.container:
        image = task_spec.container
    elif ex.image_dir and task.sif:  # the rule of staging.images.image_needs
        image = f"{ex.image_dir.rstrip('/')}/{image_file_name(task.sif, ex.container_runtime)}"
    elif task.image:
        image = f"docker://{task.image}"  # pulled at run time: stage SIFs on offline sites
    else:
        raise ConfigError.at(f"{where}.container", f"harness {task.harness!r} has no image",
                             "set the task's container, or execution.container_runtime=none")
    task_dir = ShellCode(f'"$MODEL_DIR/tasks/{key}"')
    binds = []
    if ex.hf_cache_dir:
        binds.append(bind(ex.hf_cache_dir, "execution.hf_cache_dir"))
    if ex.dataset_dir:
        binds.append(bind(ex.dataset_dir, "execution.dataset_dir", "ro"))
    for i, extra in enumerate(ex.extra_binds):
        binds.append(_checked_extra_bind(extra, f"execution.extra_binds[{i}]"))
    if ex.container_runtime == "pyxis":  # GPUs: pyxis's enroot hooks expose the step's own
        mounts = [pyxis.mount([task_dir]), *(pyxis.mount(pyxis.bind_parts(b)) for b in binds)]
        return [*pyxis.HARNESS_STEP,
                *pyxis.container_flags(image, mounts, env_names, workdir=task_dir)]
    argv: list[Any] = [ex.container_runtime, "exec", "--cleanenv"]
    if task.needs_gpu:
        argv.append("--nv")
    argv += ["--bind", task_dir]
    for spec in binds:
        argv += ["--bind", spec]
    return [*argv, LineStart(image)]


def _checked_extra_bind(spec: str, where: str) -> str:
    if "," in spec or not spec.strip():
        raise ConfigError.at(where, f"{spec!r} is not one 'src[:dst[:opts]]' bind",
                             "give one bind per list item")
    return spec


def _task_env(resolved: ResolvedConfig, task: Any, task_spec: Any,
              in_container: bool) -> list[tuple[str, Any]]:
    spec = resolved.spec
    ex, ep = spec.execution, spec.target.api_endpoint
    env: list[tuple[str, Any]] = []
    if spec.deployment.type == "none":
        env.append(("HPCEVAL_ENDPOINT_URL", var("HPCEVAL_ENDPOINT_URL")))
    else:
        path = ENDPOINT_PATHS.get(task.endpoint_type, "/chat/completions")
        env.append(("HPCEVAL_ENDPOINT_URL", ShellCode(f'"$HPCEVAL_BASE_URL{path}"')))
    if in_container:  # --cleanenv: everything the harness reads is passed explicitly
        env += [(n, var(n)) for n in ("HPCEVAL_BASE_URL", "HPCEVAL_MODEL_ID",
                                      "HPCEVAL_TASK_DIR", "HPCEVAL_OUTPUT_DIR")]
    # Harness images are read-only: caches go to the task directory unless a shared one is set.
    env.append(("HF_HOME", ex.hf_cache_dir or ShellCode('"$TASK_DIR/cache/huggingface"')))
    env.append(("XDG_CACHE_HOME", ShellCode('"$TASK_DIR/cache"')))
    if ex.offline:
        # nemo-evaluator posts telemetry to NVIDIA by default (level 2, full): an offline node
        # can only wait on it, and a cluster's model names should not leave it anyway
        env += [("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1"),
                ("TRANSFORMERS_OFFLINE", "1"), ("NEMO_EVALUATOR_TELEMETRY_LEVEL", "0")]
    if ex.dataset_dir:
        env += [("HPCEVAL_DATASET_DIR", ex.dataset_dir),
                ("NEMO_EVALUATOR_DATASET_DIR", ex.dataset_dir)]
    for name, value in {**spec.evaluation.env_vars, **task_spec.env_vars}.items():
        env.append((name, env_value(value)))
    # Secrets: passed by NAME from the job's environment; their values never reach this file.
    names = [*task.required_env, *([ep.api_key_name] if ep.api_key_name else [])]
    given = {n for n, _ in env}
    for name in dict.fromkeys(names):
        if name not in given:
            env.append((name, env_value(f"host:{name}")))
    return env
