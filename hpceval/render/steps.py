"""Task steps: each resolved task's command, runner and environment, as the script runs it.

The tasks were resolved (and their commands rendered) when the run was loaded
(``config.tasks``); nothing here looks anything up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpceval.config import ResolvedConfig, ResolvedTask
from hpceval.config.auxiliary import has_reference
from hpceval.config.checks import env_reference, literal_env
from hpceval.config.endpoint_key import HARNESS_KEY, harness_key_value, judge_keys
from hpceval.config.errors import ConfigError
from hpceval.config.schema import ExecutionSpec
from hpceval.config.script_checks import bind_issue, extra_bind_issue
from hpceval.config.secret_files import from_file, secret_file, secret_var
from hpceval.config.tasks import stale
from hpceval.contract import TASK_ROUTE, TASKS_DIR
from hpceval.engines import engine_for
from hpceval.render import judge_in_job
from hpceval.render.quoting import ShellCode, passed_env, var
from hpceval.runtimes import runtime_for
from hpceval.runtimes.base import SiteOptions

ENDPOINT_PATHS = {"chat": "/chat/completions", "vlm": "/chat/completions",
                  "completions": "/completions", "embedding": "/embeddings"}


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
    # its route when it has interceptors of its own: it asks the in-job proxy under
    # /task/<key>/ (contract.TASK_ROUTE; its chain, hpceval.job.interceptors.Routes); "" else
    route: str = ""
    infra_errors_allowed: int = 0  # evaluation.infra_errors_allowed_for the task (collect)


def env_value(value: str) -> Any:
    """A config env value: ``host:NAME`` / ``$NAME`` pass a variable through by name;
    ``file:PATH`` is the secret the job read from PATH (preamble.j2, read_secret)."""
    path = secret_file(value)
    if path is not None:
        return ShellCode(f'"${{{secret_var(path)}}}"')
    ref = env_reference(value)
    if ref is None:
        return literal_env(value)
    return passed_env(ref)


def bind(path: str, where: str, options: str = "") -> str:
    issue = bind_issue(path, where)  # refused when the run was loaded; a guard here
    if issue is not None:
        raise ConfigError(issue)
    return f"{path}:{path}" + (f":{options}" if options else "")


def checked_extra_bind(spec: str, where: str) -> str:
    issue = extra_bind_issue(spec, where)
    if issue is not None:
        raise ConfigError(issue)
    return spec


def image_pull(ex: ExecutionSpec, image: str, pull_dir: str) -> dict[str, Any] | None:
    """The run's one pull of ``image`` into ``pull_dir`` (None: nothing to pull: a file, or
    the runtime's own store): the file, the source, the pull command with the file's
    temporary name as "$tmp", and the variables that point the tool's cache and temporary
    files at the pull's scratch folder (templates/pull_images.j2)."""
    runtime = runtime_for(ex.container_runtime)
    file = runtime.pulled_file(image, pull_dir)
    if file is None:
        return None
    return {"source": image, "file": file,
            "argv": runtime.pull_words(runtime.tool, var("tmp"), image),
            "cache_env": runtime.pull_cache_env, "temp_env": runtime.pull_temp_env}


def harness_pulls(resolved: ResolvedConfig, pull_dir: str) -> list[dict[str, Any]]:
    """The pulls of the run's harness images (docker:// references nothing staged), which
    the harnesses then run as files: not converted again by every task (hpc-admin-2 D5)."""
    ex = resolved.spec.execution
    pulls = [image_pull(ex, image, pull_dir) for rt in resolved.tasks
             if rt.in_container(ex) and (image := rt.image(ex)) is not None]
    return [pull for pull in pulls if pull is not None]


def build_steps(resolved: ResolvedConfig, pull_dir: str = "") -> list[Step]:
    """``pull_dir``: where the run's docker:// images are pulled once (render/pull.py); a
    harness runs its file from there. Empty: the runtime converts the reference itself."""
    spec = resolved.spec
    ex = spec.execution
    if stale(resolved.tasks, spec):
        raise ValueError("the run's tasks changed after loading; resolve them again "
                         "(hpceval.config.with_tasks)")
    steps: list[Step] = []
    for index, rt in enumerate(resolved.tasks, start=1):
        task = rt.task
        in_container = rt.in_container(ex)
        prefix = runtime_for(ex.container_runtime).env_prefix if in_container else ""
        env = [(prefix + name, value) for name, value in _task_env(resolved, rt, in_container)]
        runner = _runner(resolved, rt, [name for name, _ in env], pull_dir) \
            if in_container else []
        how = f"in {ex.container_runtime}" if in_container else "host-installed harness"
        title = f"{task.qualified_name} ({task.endpoint_type} endpoint, {how})"
        if rt.resolution.requested != task.qualified_name:
            title += f", requested as {rt.resolution.requested}"
        own = spec.evaluation.own_chain(rt.spec) is not None
        if own:
            title += ", its own interceptors"
        steps.append(Step(index, rt.key, task.qualified_name, title, rt.spec.timeout or 0,
                          ShellCode(rt.command), runner, env,
                          task.expected_requests(rt.params.get("limit_samples")),
                          f"{TASK_ROUTE}/{rt.key}" if own else "",
                          spec.evaluation.infra_errors_allowed_for(rt.spec)))
    return steps


def _runner(resolved: ResolvedConfig, rt: ResolvedTask, env_names: list[str],
            pull_dir: str) -> list[Any]:
    ex = resolved.spec.execution
    image = rt.image(ex)
    if image is None:  # refused when the run was loaded (config.script_checks); a guard here
        raise ConfigError.at(f"{rt.where}.container", f"harness {rt.task.harness!r} has no "
                             "image", "set the task's container, or "
                             "execution.container_runtime=none")
    image = runtime_for(ex.container_runtime).pulled_file(image, pull_dir) or image
    task_dir = ShellCode(f'"$MODEL_DIR/{TASKS_DIR}/{rt.key}"')
    binds = []
    if ex.hf_cache_dir:
        binds.append(bind(ex.hf_cache_dir, "execution.hf_cache_dir"))
    if ex.dataset_dir:
        binds.append(bind(ex.dataset_dir, "execution.dataset_dir", "ro"))
    for i, extra in enumerate(ex.extra_binds):
        binds.append(checked_extra_bind(extra, f"execution.extra_binds[{i}]"))
    return runtime_for(ex.container_runtime).harness_runner(
        image, task_dir, binds, env_names, gpus=rt.task.needs_gpu, site=site_options(ex))


def site_options(ex: ExecutionSpec) -> SiteOptions:
    """The profile's runtime settings (docker/podman: run options a site imposes, GPU flags)."""
    return SiteOptions(tuple(ex.container_options), tuple(ex.container_gpu_flags))


def _task_env(resolved: ResolvedConfig, rt: ResolvedTask,
              in_container: bool) -> list[tuple[str, Any]]:
    task, task_spec = rt.task, rt.spec
    spec = resolved.spec
    ex, ep = spec.execution, spec.target.api_endpoint
    env: list[tuple[str, Any]] = []
    if not engine_for(spec.deployment.type).serves:
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
    if in_container:  # the judges' URLs and names (config/auxiliary.py), exported by the job
        env += judge_in_job.container_env(resolved)
    for name, value in {**spec.evaluation.env_vars, **task_spec.env_vars}.items():
        env.append((name, judge_in_job.env_value(value, resolved) if has_reference(value)
                    else env_value(value)))
    # Secrets: passed by NAME from the job's environment; their values never reach this file.
    names = [*task.required_env, *([ep.api_key_name] if ep.api_key_name else [])]
    given = {n for n, _ in env}
    token = harness_key_value(spec)
    if token is not None and HARNESS_KEY not in given:  # the key the in-job proxy asks for
        env.append((HARNESS_KEY, var(token)))
        given.add(HARNESS_KEY)
    for name, source in judge_keys(spec):  # the key each judge's proxy asks for
        if name not in given and name not in names:
            env.append((name, var(source)))
            given.add(name)
    for name in dict.fromkeys(names):
        if name not in given and not from_file(spec, name):  # (that one the job reads itself)
            env.append((name, env_value(f"host:{name}")))
    return env
