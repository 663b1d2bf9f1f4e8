"""What the job script needs to start one deployment's servers: the model's, or a judge's.

The same view feeds the same template code (templates/deployment/_instances.j2) for both, so a
judge starts through the same launch_server, is waited for by the same health wait and fails the
job as fast as a model server does. Differences are data: its server folder, its environment
function, its container, its port slots.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any

from hpceval.config import ResolvedConfig
from hpceval.config.errors import ConfigError
from hpceval.contract import COMPILE_CACHE_DIR, SERVER_DIR, UNIX_URL, aux_folder, server_socket
from hpceval.engines import engine_for
from hpceval.render.judge_in_job import urls_var
from hpceval.render.ports import PortPlan
from hpceval.render.quoting import ShellCode, var
from hpceval.render.servers import Instance, Served, build_instances
from hpceval.render.steps import (
    bind,
    checked_extra_bind,
    env_value,
    image_pull,
    site_options,
)
from hpceval.runtimes import runtime_for


def deployment_view(resolved: ResolvedConfig, served: Served, *, key: str, ports: PortPlan,
                    unset: list[str], pull_dir: str, sockets: bool = True) -> dict[str, Any]:
    """``key``: "model", or the judge's name (an identifier: it becomes part of names);
    ``pull_dir``: where the job pulls a docker:// image that nothing staged (server_image);
    ``sockets``: False where the instances' clients are not this job (a sweep's judge job)."""
    ex, dep = resolved.spec.execution, served.dep
    engine = engine_for(dep.type)
    prefix = runtime_for(ex.container_runtime).env_prefix if dep.serves_from_image else ""
    env = server_env(resolved, served)
    model = key == "model"
    base = ports.first_slot(None if model else key)
    instances = build_instances(served, ports, sockets and serves_on_socket(resolved, served))
    return {
        "key": key, "type": dep.type, "where": served.where,
        "shell_command": engine.needs_command,
        "what": "model server" if model else f"{served.where} server",
        "dir": ShellCode(f'"$MODEL_DIR/{SERVER_DIR}"' if model
                         else f'"$MODEL_DIR/{aux_folder(key)}/{SERVER_DIR}"'),
        "env_fn": "server_environment" if model else f"aux_{key}_server_environment",
        "urls_var": urls_var(key),
        "instances": [_instance_view(inst, base) for inst in instances],
        "server_prefix": server_prefix(resolved, served, [name for name, _ in env], pull_dir),
        "server_srun": server_srun(resolved, served, [name for name, _ in env], pull_dir),
        "pull": server_pull(resolved, served, pull_dir),
        "server_env": [(prefix + name, value) for name, value in env],
        # its steps make their own cache folder on their node (PIN_GPUS)
        "private_cache": ("HPCEVAL_PRIVATE_CACHE", "1") in env,
        "server_unset": sorted(set(unset) - _env_passes(env)),
        "server_token": server_token(served),
        "multi_node": dep.multi_node_backend if served.placement.layout.nodes_per_instance > 1
        else None,
        "layout_text": layout_text(resolved, served),
        "health_path": dep.health_path,
        "health_timeout": dep.health_timeout,
        # what an instance's log says once it serves (the engine's; "" for none)
        "ready_line": engine.ready_line,
        # its command line names HEAD_NODE as the address to listen on (engines/base.py)
        "listens_on_node": engine.listens_on_node,
    }


def _env_passes(env: list[tuple[str, Any]]) -> set[str]:
    from hpceval.render.quoting import passed_env_names

    return {n for _, value in env for n in passed_env_names(str(value))}


def serves_on_socket(resolved: ResolvedConfig, served: Served) -> bool:
    """THE rule for Unix sockets: an engine that can serve on one, run from the host (a
    container would need the socket folder bound in and its runtime's user mapping to allow
    the connection: not done), and deployment.unix_socket not false. Which instances then do
    is build_instances' part: the single-node ones on the job's first node."""
    return (engine_for(served.dep.type).unix_socket and served.dep.unix_socket
            and from_host(resolved, served))


def from_host(resolved: ResolvedConfig, served: Served) -> bool:
    """Whether the servers run from the host, not from a container."""
    return not (served.dep.serves_from_image
                and runtime_for(resolved.spec.execution.container_runtime).containers)


def _instance_view(inst: Instance, slot_base: int) -> dict[str, Any]:
    head = inst.launches[-1] if inst.launches else None
    if len(inst.nodes) > 1:
        summary = f"nodes {inst.nodes[0]}-{inst.nodes[-1]} of the job, one model copy across them"
    elif head is not None and head.gpu_count:
        last = head.gpu_first + head.gpu_count - 1
        summary = f"node {inst.nodes[0]}, GPUs {head.gpu_first}-{last} of its allocation"
    else:
        summary = f"node {inst.nodes[0]}, all of its allocated GPUs (if any)"
    slot = slot_base + inst.index
    if inst.on_socket:
        summary += ", on a Unix socket"
    # how the health wait and the proxy reach it (contract.UNIX_URL for a socket)
    url = ShellCode(f'"{UNIX_URL}$SOCKET"' if inst.on_socket
                    else f'"http://${{NODES[{inst.head_node}]}}:$PORT"')
    return {"index": inst.index, "slot": slot, "nodes": inst.nodes,
            "head_node": inst.head_node, "launches": inst.launches, "summary": summary,
            "socket": server_socket(slot) if inst.on_socket else None, "url": url}


def server_prefix(resolved: ResolvedConfig, served: Served,
                  env_names: list[str] | None = None, pull_dir: str = "") -> list[Any]:
    ex, dep, where = resolved.spec.execution, served.dep, served.where
    runtime = runtime_for(ex.container_runtime)
    if not dep.serves_from_image:
        return []
    if not runtime.containers:
        raise ConfigError.at(f"{where}.runtime", "is container, but "
                             "execution.container_runtime is none",
                             f"set {where}.runtime=host, or a container runtime")
    if not dep.image:
        raise ConfigError.at(f"{where}.image", "a server from a container needs an image",
                             f"set {where}.image, or {where}.runtime=host")
    return runtime.server_prefix(server_image(resolved, served, pull_dir),
                                 _binds(resolved, served),
                                 gpus=served.placement.layout.gpus_per_instance > 0,
                                 cache=ShellCode(f'"{CONTAINER_CACHE}"'),
                                 env_names=env_names, site=site_options(ex),
                                 home=needs_home(resolved, served))


def needs_home(resolved: ResolvedConfig, served: Served) -> bool:
    """Whether a container server may read the user's home folder. Its caches are in the
    job's folder, bound in (SERVER_CACHES), and HF_HOME is the hub cache where it already was
    (server_env): under $HOME by default. So only a model named on the hub, with no
    execution.hf_cache_dir bound in, may be there; a model from checkpoint_path needs no home
    (anything else under $HOME a server reads: execution.extra_binds)."""
    return not (served.dep.checkpoint_path or resolved.spec.execution.hf_cache_dir)


def server_image(resolved: ResolvedConfig, served: Served, pull_dir: str) -> str:
    """The image a server runs from: the file staged in execution.image_dir (the runtime's
    rule); else, for a docker:// image that the runtime runs as a file, the file the job
    pulls once into ``pull_dir`` before any server starts (server_pull); else the image."""
    ex, image = resolved.spec.execution, served.dep.image
    assert image is not None  # server_prefix refused a missing one
    runtime = runtime_for(ex.container_runtime)
    staged = runtime.staged_server_image(image, ex.image_dir)
    return runtime.pulled_file(staged, pull_dir) or staged


def server_pull(resolved: ResolvedConfig, served: Served, pull_dir: str
                ) -> dict[str, Any] | None:
    """The run's one pull of this server's image (None: it runs a file or its runtime's
    store): render/steps.image_pull of what staged_server_image left."""
    ex, dep = resolved.spec.execution, served.dep
    if not (dep.image and dep.serves_from_image):
        return None
    staged = runtime_for(ex.container_runtime).staged_server_image(dep.image, ex.image_dir)
    return image_pull(ex, staged, pull_dir)


def _binds(resolved: ResolvedConfig, served: Served) -> list[str]:
    ex, dep = resolved.spec.execution, served.dep
    binds = [bind(dep.checkpoint_path, f"{served.where}.checkpoint_path", "ro")] \
        if dep.checkpoint_path else []
    if ex.hf_cache_dir:
        binds.append(bind(ex.hf_cache_dir, "execution.hf_cache_dir"))
    return binds + [checked_extra_bind(extra, f"execution.extra_binds[{i}]")
                    for i, extra in enumerate(ex.extra_binds)]


def server_srun(resolved: ResolvedConfig, served: Served, env_names: list[str],
                pull_dir: str = "") -> list[Any]:
    """The server step's container options for runtimes that start containers through srun
    (pyxis), after server_prefix's checks."""
    ex, dep = resolved.spec.execution, served.dep
    runtime = runtime_for(ex.container_runtime)
    if not (runtime.srun_steps and dep.serves_from_image):
        return []
    assert dep.image is not None  # server_prefix refused a missing one
    return runtime.server_srun(server_image(resolved, served, pull_dir),
                               _binds(resolved, served), env_names,
                               cache=ShellCode(f'"{CONTAINER_CACHE}"'))


def server_token(served: Served) -> bool:
    """The job's servers require a per-job token that only the proxy sends, where the engine
    takes one (vLLM reads it from VLLM_API_KEY, not from its command line)."""
    return engine_for(served.dep.type).token_env is not None \
        and served.placement.layout.instances > 0


def server_env(resolved: ResolvedConfig, served: Served) -> list[tuple[str, Any]]:
    ex, dep = resolved.spec.execution, served.dep
    engine = engine_for(dep.type)
    env: list[tuple[str, Any]] = []
    if engine.port_env:
        env.append(("PORT", var("PORT")))
    # Models stay where the hub cache already is: XDG_CACHE_HOME moves below, HF_HOME must not.
    env.append(("HF_HOME", ex.hf_cache_dir or ShellCode(
        '"${HF_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/huggingface}"')))
    if ex.offline:
        env.append(("HF_HUB_OFFLINE", "1"))
    # vLLM posts usage statistics (model, hardware) to stats.vllm.ai unless told not to; a
    # cluster's model names should not leave it (the harnesses' telemetry is off too).
    env += [("VLLM_NO_USAGE_STATS", "1"), ("DO_NOT_TRACK", "1")]
    # vLLM, torch.compile/Triton, FlashInfer's JIT kernels, CUDA's ComputeCache and anything
    # using XDG write caches under $HOME by default: read-only or unmounted in containers, one
    # quota shared by every job elsewhere. Host servers: a fresh 0700 folder per server step on
    # its node, made by the step itself (PIN_GPUS): a fixed name in a node's /tmp (Slurm sets
    # TMPDIR=/tmp) is every user's, and a record planted there changes what vLLM serves
    # (shared-cluster-4 N5). Containers: bound in from the deployment's server folder.
    if from_host(resolved, served):
        env.append(("HPCEVAL_PRIVATE_CACHE", "1"))
        store = compile_store(resolved, served)
        if store is not None:  # its step seeds that folder from here, and adds to it after
            env += [("HPCEVAL_COMPILE_CACHE", store), ("HPCEVAL_PYTHON", var("HPCEVAL_PYTHON"))]
    else:
        env += [(name, ShellCode(f'"{CONTAINER_CACHE}{sub}"')) for name, sub in SERVER_CACHES]
    env += [(name, env_value(value)) for name, value in dep.env_vars.items()]
    if server_token(served):
        assert engine.token_env is not None  # server_token says it takes one
        env.append((engine.token_env, var("HPCEVAL_JOB_TOKEN")))
    return env


def compile_store(resolved: ResolvedConfig, served: Served) -> Any:
    """Where a host server's compile caches persist across jobs (job.compile_cache): one
    folder per engine and model under execution.compile_cache_dir, else under the run's own
    compile-cache folder; None where nothing is kept (turned off, or an engine that does not
    compile)."""
    ex, dep = resolved.spec.execution, served.dep
    if not (ex.compile_cache and engine_for(dep.type).compiles):
        return None
    source = dep.checkpoint_path or dep.hf_model_handle or ""
    # readable (the model's last path part) and exact (a digest of what the server loads)
    digest = hashlib.sha256(f"{dep.type}\0{source}".encode()).hexdigest()[:12]
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.basename(source.rstrip("/")))[:40]
    name = f"{dep.type}-{slug.lstrip('.') or 'model'}-{digest}"
    if ex.compile_cache_dir:
        return f"{ex.compile_cache_dir.rstrip('/')}/{name}"  # a literal path: quoted
    return ShellCode(f'"$RUN_DIR/{COMPILE_CACHE_DIR}/{name}"')


# The servers' cache variables, and the folder each names under the cache root ("": the root).
# TORCHINDUCTOR_CACHE_DIR: Inductor's default is /tmp/torchinductor_$USER, a fixed name in a
# node's shared /tmp where another user can make it first and plant compiled kernels.
SERVER_CACHES = (("VLLM_CACHE_ROOT", "/vllm"), ("TORCHINDUCTOR_CACHE_DIR", "/inductor"),
                 ("TRITON_CACHE_DIR", "/triton"),
                 ("FLASHINFER_WORKSPACE_BASE", "/flashinfer"), ("CUDA_CACHE_PATH", "/nv-compute"),
                 ("XDG_CACHE_HOME", ""))
# A host server's temporary files too, beside its caches in its step's private folder (the
# step makes both, templates/deployment/_launch.j2; only the caches are published to the
# compile store): Python's tempfile, and so Inductor's precompiled headers, which ignore
# TORCHINDUCTOR_CACHE_DIR and take /tmp/torchinductor_$USER, a name another user can make first
# (then the server dies on a PermissionError, or loads what was planted). Not for containers:
# their cache root is on shared storage, where vLLM's ZMQ sockets (made in the temp folder)
# would not work and a long path exceeds a socket name's 107 bytes.
HOST_SERVER_TEMP = ("TMPDIR", "$private/tmp")
# A container server's cache root: the deployment's server folder on shared storage (made by
# the batch shell, see _instances.j2), bound in, because a bind's source must exist on every
# node before the container starts.
CONTAINER_CACHE = "$SERVER_DIR/hpceval-cache"


def layout_text(resolved: ResolvedConfig, served: Served) -> str:
    lay, dep, ex = served.placement.layout, served.dep, resolved.spec.execution
    if lay.instances == 0:
        return "no servers"
    gpus = (f"{lay.gpus_per_instance} GPU(s) each" if lay.gpus_per_instance else "CPU only")
    if served.where == "deployment":
        text = (f"{ex.nodes} node(s) x {ex.gpus_per_node} GPU(s): {lay.instances} instance(s), "
                f"{gpus}")
    elif served.placement.first_node == 0:  # a judge's own nodes come after the model's
        text = (f"a slice of the model's node 0 from GPU {served.placement.gpu_offset}: "
                f"{lay.instances} instance(s), {gpus}")
    else:
        nodes = getattr(dep, "num_nodes", 1)
        text = (f"{nodes} node(s) of its own (node {served.placement.first_node} on of the job"
                f"): {lay.instances} instance(s), {gpus}")
    if engine_for(dep.type).parallel:
        text += f" (TP={dep.tensor_parallel_size} x PP={dep.pipeline_parallel_size})"
    if lay.nodes_per_instance > 1:
        text += f", each across {lay.nodes_per_instance} nodes ({dep.multi_node_backend})"
    return text
