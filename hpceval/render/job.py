"""render_job: a resolved config and a job context in, the job script text out. Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from hpceval._version import __version__
from hpceval.config import ResolvedConfig
from hpceval.config.aux_layout import job_nodes
from hpceval.config.endpoint_key import CLIENT_TOKEN, proxy_client_key, proxy_upstream_key
from hpceval.config.errors import ConfigError
from hpceval.config.schema import InterceptorsSpec
from hpceval.config.secret_files import secret_files, secret_var
from hpceval.contract import JOB_FILES, JOB_SCRIPT, model_dir
from hpceval.engines import engine_for

# VLLM_VERSION: the vLLM release the rendered command lines target (the vLLM engine's)
from hpceval.engines.vllm import VLLM_VERSION as VLLM_VERSION
from hpceval.interceptors import Interceptor, chain_json, routes_json
from hpceval.render.context import JobContext, backend_view, job_backend
from hpceval.render.deployments import HOST_SERVER_TEMP, SERVER_CACHES, deployment_view
from hpceval.render.judge_in_job import proxy_views
from hpceval.render.ports import PortPlan
from hpceval.render.pull import pull_dir
from hpceval.render.quoting import ShellCode, passed_env_names, shipped_environment
from hpceval.render.servers import auxiliary_served, model_served, runs_ray
from hpceval.render.steps import build_steps, env_value, harness_pulls
from hpceval.render.urls import base_of, proxied
from hpceval.runtimes import runtime_for

# How long a job waits for the model's lock (model_lock.j2): a predecessor's teardown stops tasks
# and servers (30 s each at most) and merges its cache shards (300 s at most).
MODEL_LOCK_WAIT_S = 600


def render_job(resolved: ResolvedConfig, ctx: JobContext) -> str:
    """The job script. Reads nothing but the shipped templates and writes nothing: the tasks
    were resolved, and every value checked, when the run was loaded. The ConfigErrors raised
    here are guards for configs built or changed by hand (tests, the API)."""
    _reject_nul(resolved.spec, "")
    context = build_context(resolved, ctx)
    text = shipped_environment().get_template("job.sbatch.j2").render(context)
    if "\x00" in text:  # belt and braces: bash would silently drop it
        raise ConfigError.at("", "a NUL character reached the job script")
    return text


def site_context(resolved: ResolvedConfig) -> dict[str, Any]:
    """What templates/site_setup.j2 reads: the site's set-up of every job that runs site
    tools (modules, the admin's commands, the environment, secrets read from files)."""
    spec = resolved.spec
    ex = spec.execution
    return {
        "module_init": ex.module_init,
        "modules": ex.modules,
        "pre_commands": ex.pre_commands,
        # env values `file:PATH`: read once at the start, into the job's own variables
        "secret_files": [(secret_var(path), path) for path in secret_files(spec)],
        "job_env": [(name, env_value(value)) for name, value in ex.env_vars.items()],
        "container_prefix": runtime_for(ex.container_runtime).env_prefix,
    }


def build_context(resolved: ResolvedConfig, ctx: JobContext, *, sockets: bool = True
                  ) -> dict[str, Any]:
    """``sockets``: the servers may listen on Unix sockets (serves_on_socket); False where
    their clients are other jobs (a sweep's judge job, render.judge)."""
    spec, layout = resolved.spec, resolved.layout
    ex, dep, ep = spec.execution, spec.deployment, spec.target.api_endpoint
    run_dir = ctx.run_dir_text
    judges = auxiliary_served(resolved)
    served_model = model_served(resolved)
    # every node of the job gets Ray's ports in the block once an instance runs Ray
    ray = any(runs_ray(s) for s in [served_model, *judges.values()])
    ports = PortPlan(dep.port, layout.instances,
                     tuple((n, s.placement.layout.instances) for n, s in judges.items()),
                     tuple(spec.auxiliary_deployments),
                     ray_nodes=job_nodes(spec) if ray else 0, gpus_per_node=ex.gpus_per_node)
    engine = engine_for(dep.type)
    fixed_url = ep.url if not engine.serves else None
    # An external endpoint gets the proxy too: its cache is what lets a resumed job replay the
    # answers it already paid for, its progress file is what status shows, and interceptors
    # apply to it as to the job's own servers.
    external_proxy = fixed_url is not None and ep.proxy
    # A docker:// image nothing staged (a server's, a harness's) is pulled once for the whole
    # run, into the run directory (shared storage every node reads), before any server starts
    # (render/pull.py), and run as that file.
    pulls_to = pull_dir(ctx)
    steps = build_steps(resolved, pulls_to)
    # Secrets the tasks read by name are none of the servers' business (a judge's key):
    # they are unset before a server starts. The servers' own (env_vars) stay.
    unset = sorted(_passed_names(v for step in steps for _, v in step.env))
    model = deployment_view(resolved, served_model, key="model", ports=ports,
                            unset=unset, pull_dir=pulls_to, sockets=sockets)
    served = [model] + [deployment_view(resolved, s, key=name, ports=ports, unset=unset,
                                        pull_dir=pulls_to, sockets=sockets)
                        for name, s in judges.items()]
    served = [d for d in served if d["instances"]]
    pulls = list({p["file"]: p for p in [*(d["pull"] for d in served if d["pull"]),
                                          *harness_pulls(resolved, pulls_to)]}.values())
    aux_views = proxy_views(resolved, ports)
    return {
        "backend": backend_view(ex.type),
        "header": [ShellCode(line) for line in job_backend(ex.type).header(
            spec, ctx, model_dir(run_dir, ctx.model_key), job_nodes(spec))],
        "job": {"run_dir": run_dir, "model_key": ctx.model_key, "python": ctx.python,
                "invocation_id": ctx.invocation_id,
                "version": ctx.hpceval_version or __version__,
                # what the header asks for, so what the allocation is charged for, busy or not
                "gpus": job_nodes(spec) * ex.gpus_per_node},
        "vllm_version": VLLM_VERSION,
        **site_context(resolved),
        "signal_seconds": ex.signal_seconds,
        "lock_wait": MODEL_LOCK_WAIT_S,
        "ports": ports.view(),
        "deployment": {"type": dep.type, "template": engine.template},
        "model": model,
        # the model's, then each judge's served in this job: the same launch and health code
        "served": served,
        "any_srun": any(d["server_srun"] for d in served),
        # an instance spans nodes: its steps take the address another node reaches them at
        "spans_nodes": any(len(inst["nodes"]) > 1 for d in served for inst in d["instances"]),
        # an instance listens on a Unix socket: the job makes the folder for them
        "any_socket": any(inst["socket"] for d in served for inst in d["instances"]),
        # a server runs from the host: its step makes a private cache folder on its node
        "private_cache": any(d["private_cache"] and d["instances"] for d in served),
        "server_caches": ShellCode(" ".join(
            [*(f"{name}=$cache{sub}" for name, sub in SERVER_CACHES), "=".join(HOST_SERVER_TEMP)])),
        "server_temp": ShellCode(f'"{HOST_SERVER_TEMP[1]}"'),
        "pulls": pulls,
        "health_timeout": max([d["health_timeout"] for d in served] or [dep.health_timeout]),
        "instances": model["instances"],
        "server_prefix": model["server_prefix"],
        "server_token": any(d["server_token"] for d in served),
        # the variables they read it from (the engines' token_env), for the script's comment
        "server_token_env": ", ".join(sorted({str(engine_for(d["type"]).token_env)
                                              for d in served if d["server_token"]})),
        "multi_node": model["multi_node"],
        # a server runs Ray: the teardown removes its temp dir (RAY_TEMP_DIR) on the job's node
        "ray": ray,
        "layout_text": model["layout_text"],
        "health_path": dep.health_path,
        "files": JOB_FILES,  # the run directory's file names, as Python reads them
        # Always, even for one instance: the proxy's response cache is what lets a resumed job
        # replay finished requests, and its progress file is what `hpceval status` shows.
        "proxy": layout.instances >= 1 or external_proxy,
        "model_token": model["server_token"],
        # the key the model's proxy asks its clients for (config/endpoint_key.py, review F3)
        "client_key": proxy_client_key(spec),
        "client_token": proxy_client_key(spec) == CLIENT_TOKEN,
        "upstream_key": proxy_upstream_key(spec, model["server_token"]),
        "proxy_args": proxy_arguments(spec.evaluation.interceptors,
                                      spec.evaluation.proxy_budget,
                                      {s.key: rt.spec.interceptors.chain()
                                       for s, rt in zip(steps, resolved.tasks, strict=True)
                                       if s.route}),
        "aux_proxies": aux_views,
        # a judge's proxy asks for the job's token: the job makes one (preamble.j2)
        "aux_token": any(a["client_key"] == CLIENT_TOKEN for a in aux_views),
        "endpoint": {"fixed_url": fixed_url, "fixed_base": base_of(fixed_url),
                     **proxied(fixed_url), "model_id": spec.request_model or ""},
        "steps": steps,
        # every task's request count known: the proxy gets the total of the unfinished ones
        "request_totals": bool(steps) and all(s.expected_requests is not None for s in steps),
        "resume": _resume_view(resolved, ctx),
        "max_concurrent": spec.evaluation.max_concurrent_tasks,
        # tasks start while the model loads, their requests held by the proxy until every
        # instance serves: only for a model served alone in the job (judges' proxies start
        # after the health wait, and a task may ask them at once)
        "overlap": overlap_load(resolved) and bool(model["instances"])
                   and len(served) == 1 and not aux_views,
        "judge": None,  # a sweep's judge job sets it (render.judge_job)
    }


def overlap_load(resolved: ResolvedConfig) -> bool:
    """evaluation.overlap_load as set, "auto" as the model's engine decides."""
    setting = resolved.spec.evaluation.overlap_load
    if setting == "auto":
        return engine_for(resolved.spec.deployment.type).tasks_start_while_loading
    return bool(setting)


def proxy_arguments(rules: InterceptorsSpec, budget: str = "off",
                    routes: Mapping[str, Sequence[Interceptor]] | None = None) -> list[str]:
    """evaluation.interceptors, the tasks' own chains (by task key: each task with one asks
    the proxy under /task/<key>/) and proxy_budget as `hpceval.job proxy` options: each chain
    set as one JSON word. Always --flag=value: a value that starts with a dash is still the
    flag's value."""
    chain = rules.chain()
    words = [f"--interceptors={chain_json(chain)}"] if chain else []
    if routes:
        words.append(f"--task-interceptors={routes_json(routes)}")
    return [*words, f"--budget={budget}"] if budget != "off" else words


def _resume_view(resolved: ResolvedConfig, ctx: JobContext) -> dict[str, Any]:
    from hpceval.backends import requeues_on_node_failure, resumes_itself
    from hpceval.durations import walltime_minutes

    ex = resolved.spec.execution
    wall = walltime_minutes(ex.walltime) or 1
    cap = walltime_minutes(ex.max_walltime) or wall
    return {"enabled": resumes_itself(ex),
            "node_failure_retries": ex.node_failure_retries if requeues_on_node_failure(ex)
            else 0,
            "script": ctx.script_path or f"{ctx.run_dir_text}/{JOB_SCRIPT}",
            "max_allocations": max(1, cap // wall), "max_walltime": ex.max_walltime,
            "walltime": ex.walltime}


def _passed_names(values: Any) -> set[str]:
    return {name for value in values for name in passed_env_names(str(value))}


def _reject_nul(obj: Any, path: str) -> None:
    # repr writes a NUL as backslash-x00: without that text there is none, and the walk that
    # names its key (a tenth of a sweep's submit) is skipped.
    if "\\x00" not in repr(obj):
        return
    for where, value in _strings(obj, path):
        if "\x00" in value:
            raise ConfigError.at(where, "contains a NUL character", "remove it")


def _strings(obj: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(obj, str):
        yield path, obj
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from _strings(getattr(obj, f.name), f"{path}.{f.name}".lstrip("."))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _strings(str(k), f"{path}.{k}")
            yield from _strings(v, f"{path}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _strings(v, f"{path}[{i}]")
