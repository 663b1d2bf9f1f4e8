"""render_job: a resolved config and a job context in, the sbatch script text out. Pure."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from hpceval._version import __version__
from hpceval.config import ResolvedConfig
from hpceval.config.errors import ConfigError
from hpceval.config.schema import InterceptorsSpec
from hpceval.contract import JOB_FILES
from hpceval.render import pyxis
from hpceval.render.context import JobContext
from hpceval.render.header import header_lines
from hpceval.render.quoting import (
    LineStart,
    ShellCode,
    passed_env_names,
    shipped_environment,
    var,
)
from hpceval.render.servers import Instance, build_instances
from hpceval.render.steps import bind, build_steps, checked_extra_bind, container_prefix, env_value

# The vLLM release whose `vllm serve` parser the rendered command lines are checked against
# (scripts/check-vllm-args.py); see docs/rendering.md.
VLLM_VERSION = "0.32.0"
_MAX_PORT_SLOTS = 500
# Linux's default net.ipv4.ip_local_port_range starts here: below it, no outgoing connection on
# the node can be holding a job's port by chance.
_EPHEMERAL_FIRST = 32768


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


def build_context(resolved: ResolvedConfig, ctx: JobContext) -> dict[str, Any]:
    spec, layout = resolved.spec, resolved.layout
    ex, dep, ep = spec.execution, spec.deployment, spec.target.api_endpoint
    run_dir = ctx.run_dir_text
    prefix = container_prefix(resolved)
    instances = build_instances(resolved)
    block = 64 * -(-(2 * max(layout.instances, 1) + 2) // 64)
    fixed_url = ep.url if dep.type == "none" else None
    # An external endpoint gets the proxy too: its cache is what lets a resumed job replay the
    # answers it already paid for, its progress file is what status shows, and interceptors
    # apply to it as to the job's own servers.
    external_proxy = fixed_url is not None and ep.proxy
    steps = build_steps(resolved)
    server_env = _server_env(resolved)
    return {
        "header": [ShellCode(line.text())
                   for line in header_lines(spec, ctx, f"{run_dir}/models/{ctx.model_key}")],
        "job": {"run_dir": run_dir, "model_key": ctx.model_key, "python": ctx.python,
                "invocation_id": ctx.invocation_id,
                "version": ctx.hpceval_version or __version__},
        "vllm_version": VLLM_VERSION,
        "modules": ex.modules,
        "pre_commands": ex.pre_commands,
        "job_env": [(name, env_value(value)) for name, value in ex.env_vars.items()],
        "container_prefix": prefix,
        "signal_seconds": ex.signal_seconds,
        "ports": _ports(dep.port, block),
        "deployment": {"type": dep.type},
        "instances": [_instance_view(inst) for inst in instances],
        "server_prefix": _server_prefix(resolved),
        "server_srun": _server_srun(resolved, [name for name, _ in server_env]),
        "server_env": [(name if dep.runtime == "host" else prefix + name, value)
                       for name, value in server_env],
        # Secrets the tasks read by name are none of the servers' business (a judge's key):
        # they are unset before a server starts. The servers' own (deployment.env_vars) stay.
        "server_unset": sorted(_passed_names(v for step in steps for _, v in step.env)
                               - _passed_names(v for _, v in server_env)),
        "server_token": _server_token(resolved),
        "multi_node": dep.multi_node_backend if layout.nodes_per_instance > 1 else None,
        "layout_text": _layout_text(resolved),
        "health_path": dep.health_path,
        "health_timeout": dep.health_timeout,
        "files": JOB_FILES,  # the run directory's file names, as Python reads them
        # Always, even for one instance: the proxy's response cache is what lets a resumed job
        # replay finished requests, and its progress file is what `hpceval status` shows.
        "proxy": layout.instances >= 1 or external_proxy,
        "proxy_args": proxy_arguments(spec.evaluation.interceptors),
        "endpoint": {"fixed_url": fixed_url, "fixed_base": _base_of(fixed_url),
                     **_proxied(fixed_url), "model_id": ep.model_id or dep.served_model_name or ""},
        "steps": steps,
        # every task's request count known: the proxy gets the total of the unfinished ones
        "request_totals": bool(steps) and all(s.expected_requests is not None for s in steps),
        "resume": _resume_view(resolved, ctx),
        "max_concurrent": spec.evaluation.max_concurrent_tasks,
        "judge": None,  # a sweep's judge job sets it (render.judge)
    }


def proxy_arguments(rules: InterceptorsSpec) -> list[str]:
    """evaluation.interceptors as `hpceval.job proxy` options. Always --flag=value: a value
    that starts with a dash (a system prompt may) is still read as the flag's value."""
    args = [f"--rename-param={old}={new}" for old, new in rules.rename_params.items()]
    args += [f"--remove-param={name}" for name in rules.remove_params]
    args += [f"--add-param={name}={json.dumps(value, ensure_ascii=False)}"
             for name, value in rules.add_params.items()]
    if rules.system_prompt is not None:
        args.append(f"--system-prompt={rules.system_prompt}")
    if rules.strip_reasoning:
        args += ["--strip-reasoning", f"--reasoning-start={rules.reasoning_start}",
                 f"--reasoning-end={rules.reasoning_end}"]
    if rules.log_requests:
        args.append(f"--log-requests={rules.log_requests}")
    return args


def _resume_view(resolved: ResolvedConfig, ctx: JobContext) -> dict[str, Any]:
    from hpceval.backends import backend_for
    from hpceval.slurm.formats import walltime_minutes

    ex = resolved.spec.execution
    wall = walltime_minutes(ex.walltime) or 1
    cap = walltime_minutes(ex.max_walltime) or wall
    return {"enabled": ex.auto_resume and backend_for(ex.type).resubmits_itself,
            "script": ctx.script_path or f"{ctx.run_dir_text}/job.sbatch",
            "max_allocations": max(1, cap // wall), "max_walltime": ex.max_walltime}


def _instance_view(inst: Instance) -> dict[str, Any]:
    head = inst.launches[-1] if inst.launches else None
    if len(inst.nodes) > 1:
        summary = f"nodes {inst.nodes[0]}-{inst.nodes[-1]} of the job, one model copy across them"
    elif head is not None and head.gpu_count:
        last = head.gpu_first + head.gpu_count - 1
        summary = f"node {inst.nodes[0]}, GPUs {head.gpu_first}-{last} of its allocation"
    else:
        summary = f"node {inst.nodes[0]}, all of its allocated GPUs (if any)"
    return {"index": inst.index, "nodes": inst.nodes, "head_node": inst.head_node,
            "launches": inst.launches, "summary": summary}


def _server_prefix(resolved: ResolvedConfig) -> list[Any]:
    spec = resolved.spec
    ex, dep = spec.execution, spec.deployment
    if dep.type == "none" or dep.runtime == "host":
        return []
    if ex.container_runtime == "none":
        raise ConfigError.at("deployment.runtime", "is container, but "
                             "execution.container_runtime is none",
                             "set deployment.runtime=host, or a container runtime")
    if not dep.image:
        raise ConfigError.at("deployment.image", "a server from a container needs an image",
                             "set deployment.image, or deployment.runtime=host")
    if ex.container_runtime == "pyxis":
        return []  # the image and binds are srun's options then: _server_srun
    argv: list[Any] = [ex.container_runtime, "exec"]
    if resolved.layout.gpus_per_instance > 0:
        argv.append("--nv")
    argv.append("--cleanenv")  # the site's host Python must not leak into the image
    if dep.checkpoint_path:
        argv += ["--bind", bind(dep.checkpoint_path, "deployment.checkpoint_path", "ro")]
    if ex.hf_cache_dir:
        argv += ["--bind", bind(ex.hf_cache_dir, "execution.hf_cache_dir")]
    for i, extra in enumerate(ex.extra_binds):
        argv += ["--bind", checked_extra_bind(extra, f"execution.extra_binds[{i}]")]
    return [*argv, LineStart(dep.image)]


def _server_srun(resolved: ResolvedConfig, env_names: list[str]) -> list[Any]:
    """pyxis: the server step's container options (after _server_prefix's checks)."""
    ex, dep = resolved.spec.execution, resolved.spec.deployment
    if ex.container_runtime != "pyxis" or dep.type == "none" or dep.runtime == "host":
        return []
    assert dep.image is not None  # _server_prefix refused a missing one
    binds = [bind(dep.checkpoint_path, "deployment.checkpoint_path", "ro")] \
        if dep.checkpoint_path else []
    if ex.hf_cache_dir:
        binds.append(bind(ex.hf_cache_dir, "execution.hf_cache_dir"))
    binds += ex.extra_binds
    return pyxis.container_flags(dep.image, [pyxis.mount(pyxis.bind_parts(b)) for b in binds],
                                 env_names)


def _ports(first: int, block: int) -> dict[str, int]:
    limit = _EPHEMERAL_FIRST if first + block <= _EPHEMERAL_FIRST else 65536
    return {"first": first, "block": block, "coord": block // 2, "proxy": block - 1,
            "slots": max(1, min(_MAX_PORT_SLOTS, (limit - first) // block))}


def _server_token(resolved: ResolvedConfig) -> bool:
    """The job's servers require a per-job token that only the proxy sends: vLLM reads it from
    VLLM_API_KEY (not from its command line, which ps shows to every user of the node)."""
    return resolved.spec.deployment.type == "vllm" and resolved.layout.instances > 0


def _passed_names(values: Any) -> set[str]:
    return {name for value in values for name in passed_env_names(str(value))}


def _server_env(resolved: ResolvedConfig) -> list[tuple[str, Any]]:
    spec = resolved.spec
    ex, dep = spec.execution, spec.deployment
    env: list[tuple[str, Any]] = []
    if dep.type == "command":
        env.append(("PORT", var("PORT")))
    if ex.hf_cache_dir:
        env.append(("HF_HOME", ex.hf_cache_dir))
    if ex.offline:
        env.append(("HF_HUB_OFFLINE", "1"))
    env += [(name, env_value(value)) for name, value in dep.env_vars.items()]
    if _server_token(resolved):
        env.append(("VLLM_API_KEY", var("HPCEVAL_JOB_TOKEN")))
    return env


def _layout_text(resolved: ResolvedConfig) -> str:
    lay, dep, ex = resolved.layout, resolved.spec.deployment, resolved.spec.execution
    if lay.instances == 0:
        return "no servers"
    gpus = (f"{lay.gpus_per_instance} GPU(s) each" if lay.gpus_per_instance else "CPU only")
    text = (f"{ex.nodes} node(s) x {ex.gpus_per_node} GPU(s): {lay.instances} instance(s), "
            f"{gpus}")
    if dep.type in ("vllm", "sglang"):
        text += f" (TP={dep.tensor_parallel_size} x PP={dep.pipeline_parallel_size})"
    if lay.nodes_per_instance > 1:
        text += f", each across {lay.nodes_per_instance} nodes ({dep.multi_node_backend})"
    return text


def _base_of(url: str | None) -> str | None:
    if url is None:
        return None
    for suffix in ("/chat/completions", "/completions", "/embeddings"):
        if url.rstrip("/").endswith(suffix):
            return url.rstrip("/")[: -len(suffix)]
    return url.rstrip("/")


def _proxied(url: str | None) -> dict[str, str | None]:
    """An external URL split for the proxy: the origin it forwards to, and the paths the
    harness asks the proxy for (the same paths, so a URL prefix such as /api/v1 carries over)."""
    if url is None:
        return {"origin": None, "url_path": None, "base_path": None}
    parts = urlsplit(url)
    base = _base_of(url) or url
    return {"origin": f"{parts.scheme}://{parts.netloc}", "url_path": parts.path or "/",
            "base_path": urlsplit(base).path}


def _reject_nul(obj: Any, path: str) -> None:
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
