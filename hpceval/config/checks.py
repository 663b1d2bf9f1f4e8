"""Checks that need more than one key, or the environment: run after the types are right."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from hpceval.backends import backend_for
from hpceval.config.errors import ConfigIssue
from hpceval.config.schema import RunSpec
from hpceval.config.secret_files import from_file, secret_file_issues
from hpceval.contract import is_proxy_budget
from hpceval.durations import walltime_minutes
from hpceval.engines import engine_for, engine_names
from hpceval.runtimes import Runtime, bind_parts, runtime_for, runtime_names
from hpceval.shell import BARE_NAME
from hpceval.storage import run_umask_bits, within

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$")
_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


PATH_KEYS = ("execution.output_dir", "execution.image_dir", "execution.hf_cache_dir",
             "execution.compile_cache_dir",
             "execution.dataset_dir", "execution.python", "deployment.checkpoint_path",
             "deployment.image")


def expand_paths(data: dict[str, Any], environ: Mapping[str, str]) -> list[ConfigIssue]:
    """Expand ~ and $VARS in path keys on the login node ($SCRATCH, $WORK are common)."""
    issues: list[ConfigIssue] = []
    for path in PATH_KEYS:
        section, key = path.split(".")
        node = data.get(section)
        if not isinstance(node, dict) or not isinstance(node.get(key), str):
            continue
        value = os.path.expanduser(node[key])
        missing = [m for m in _VAR.findall(value) if m not in environ]
        if missing:
            issues.append(ConfigIssue(path, f"{node[key]!r} uses ${missing[0]}, which is not set",
                                      f"export {missing[0]}=... or write the path out"))
            continue
        node[key] = _VAR.sub(lambda m: environ[m.group(1)], value)
    return issues


def env_reference(value: str) -> str | None:
    """The variable NAME a value passes through (host:NAME, $NAME, ${NAME}), or None if literal."""
    for prefix in ("host:", "runtime:"):
        if value.startswith(prefix):
            return value[len(prefix):]
    m = re.fullmatch(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", value)
    return m.group(1) if m else None


def literal_env(value: str) -> str:
    return value[4:] if value.startswith("lit:") else value


def semantic_issues(spec: RunSpec, environ: Mapping[str, str] | None) -> Iterator[ConfigIssue]:
    """``environ`` None skips the checks that secrets are set (render on another machine)."""
    ex, dep, ep = spec.execution, spec.deployment, spec.target.api_endpoint
    if not ex.output_dir.startswith("/"):
        yield ConfigIssue("execution.output_dir", f"{ex.output_dir!r} is not an absolute path",
                          "use an absolute path on storage that compute nodes share")
    for key in ("walltime", "max_walltime"):
        if walltime_minutes(getattr(ex, key)) is None:
            yield ConfigIssue(f"execution.{key}", f"{getattr(ex, key)!r} is not a Slurm time",
                              "write HH:MM:SS, D-HH:MM:SS or minutes")
    wall, cap = walltime_minutes(ex.walltime), walltime_minutes(ex.max_walltime)
    if wall and cap and cap < wall:
        yield ConfigIssue("execution.max_walltime", f"{ex.max_walltime} is shorter than one "
                          f"allocation's walltime {ex.walltime}", "raise max_walltime")
    # the backend's own rules (Slurm: #SBATCH values and flags, the partition's time limits)
    yield from backend_for(ex.type).spec_issues(ex, ask=environ is not None)
    if ep.url and "@" in ep.url.partition("://")[2].partition("/")[0]:
        # The URL is written into the job script and its logs; a password there is stored.
        yield ConfigIssue("target.api_endpoint.url", "carries a user:password@ part",
                          "remove it from the URL and set target.api_endpoint.api_key_name to "
                          "the NAME of the variable holding the key")
    budget = spec.evaluation.proxy_budget
    if not is_proxy_budget(budget):
        yield ConfigIssue("evaluation.proxy_budget", f"{budget!r} is not a budget",
                          "write off, adaptive or a number of requests above 0")
    engine = engine_for(dep.type)
    if not engine.serves and not ep.url:
        yield ConfigIssue("target.api_endpoint.url", f"required when deployment.type is {dep.type}",
                          "give the endpoint URL, or pick a deployment ("
                          + ", ".join(n for n in engine_names() if engine_for(n).serves) + ")")
    if engine.model_source and bool(dep.checkpoint_path) == bool(dep.hf_model_handle):
        yield ConfigIssue("deployment.checkpoint_path",
                          "give exactly one of checkpoint_path and hf_model_handle",
                          "set deployment.checkpoint_path=/path/to/model")
    if engine.needs_command and not dep.command:
        yield ConfigIssue("deployment.command", f"required when deployment.type is {dep.type}",
                          "give the server command line; $PORT holds its port")
    if engine.serves and not spec.served_name:
        yield ConfigIssue("deployment.served_model_name", "no model name for requests",
                          "set deployment.served_model_name (or target.api_endpoint.model_id)")
    if not engine.serves and not ep.model_id:
        yield ConfigIssue("target.api_endpoint.model_id", "required for an external endpoint",
                          "set the model name the endpoint serves")
    yield from _export_issues(spec)
    if runtime_for(ex.container_runtime).srun_steps and not backend_for(ex.type).srun_steps:
        yield ConfigIssue("execution.container_runtime", f"{ex.container_runtime} starts "
                          "containers through "
                          f"srun, which a {ex.type} run does not use",
                          "use container_runtime apptainer (or none) here, or execution.type "
                          "slurm")
    if runtime_for(ex.container_runtime).leaves_the_job and backend_for(ex.type).confines_jobs:
        confined = [r for r in runtime_names() if runtime_for(r).containers
                    and not runtime_for(r).leaves_the_job]
        yield ConfigIssue("execution.container_runtime", f"{ex.container_runtime} containers "
                          f"start outside the {ex.type} job's cgroup (dockerd or podman's "
                          "conmon starts them): the job's GPU limits do not hold for them, "
                          "they are not accounted, and scancel does not stop them",
                          f"use container_runtime {', '.join(confined[:-1])} or {confined[-1]} "
                          f"(or none) in a {ex.type} job; {ex.container_runtime} is for "
                          "execution.type local")
    if dep.port + 64 > 65535:
        yield ConfigIssue("deployment.port", f"{dep.port} leaves no room for instance ports",
                          "use a port below 65000")
    yield from _env_issues(spec, environ)
    yield from _word_issues(spec)
    yield from _interceptor_issues(spec)


def _export_issues(spec: RunSpec) -> Iterator[ConfigIssue]:
    export = spec.export
    folder = export.local.output_dir
    if folder is not None and not folder.startswith("/"):
        yield ConfigIssue("export.local.output_dir", f"{folder!r} is not an absolute path",
                          "use an absolute path (the export job runs on a compute node)")
    uri = export.mlflow.tracking_uri or ""
    if "@" in uri.partition("://")[2].partition("/")[0]:
        yield ConfigIssue("export.mlflow.tracking_uri", "carries a user:password@ part",
                          "remove it; MLflow reads MLFLOW_TRACKING_USERNAME/PASSWORD from the "
                          "job's environment")


def _interceptor_issues(spec: RunSpec) -> Iterator[ConfigIssue]:
    chains = [("evaluation.interceptors", spec.evaluation.interceptors.chain())]
    chains += [(f"evaluation.tasks.{t.name}.interceptors", c) for t in spec.evaluation.tasks
               if (c := spec.evaluation.own_chain(t)) is not None]  # a task's own, merged
    for where, chain in chains:
        for interceptor in chain:  # each checks its own keys
            yield from interceptor.issues(where)
    if any(chain for _, chain in chains) and not engine_for(spec.deployment.type).serves \
            and not spec.target.api_endpoint.proxy:
        yield ConfigIssue("target.api_endpoint.proxy", "is false, but evaluation.interceptors "
                          "are applied by the in-job proxy",
                          "remove target.api_endpoint.proxy: false, or the interceptors")


# Values that become a word of a server's or harness's command line, or a directory name.
_ARGUMENT_KEYS = ("deployment.served_model_name", "deployment.checkpoint_path",
                  "deployment.hf_model_handle", "target.api_endpoint.model_id")
_MAX_NAME = 200  # the model's name is also its directory name under the run directory


def _word_issues(spec: RunSpec) -> Iterator[ConfigIssue]:
    for path in _ARGUMENT_KEYS:
        section, _, key = path.rpartition(".")
        value = getattr(spec.target.api_endpoint if section.startswith("target")
                        else spec.deployment, key)
        if isinstance(value, str) and value.startswith("-"):
            # `vllm serve --help` or `--served-model-name --help` would read it as an option.
            yield ConfigIssue(path, f"{value[:80]!r} starts with '-', so servers and harnesses "
                              "would read it as an option", "remove the leading dash")
        if path.endswith(("served_model_name", "model_id")) and len(value or "") > _MAX_NAME:
            yield ConfigIssue(path, f"is {len(value or '')} characters long, more than a "
                              "directory name can hold", f"use at most {_MAX_NAME} characters")
    paths = [(path, getattr(getattr(spec, path.partition(".")[0]), path.partition(".")[2]))
             for path in PATH_KEYS]
    paths += [(f"evaluation.tasks.{t.name}.container", t.container)
              for t in spec.evaluation.tasks]
    for path, value in paths:
        if isinstance(value, str) and any(len(part.encode()) > 255 for part in value.split("/")):
            yield ConfigIssue(path, "has a folder or file name longer than 255 bytes, which "
                              "file systems refuse", "use shorter names")


def _this_machine(name: str) -> bool:
    """Whether a launcher's execution.hostname names the machine hpceval runs on."""
    import socket

    here = {socket.gethostname(), socket.getfqdn(), "localhost", "127.0.0.1", "::1"}
    here |= {h.split(".")[0] for h in here}
    if name in here:
        return True
    try:  # a cluster alias (login.cluster.org) that resolves to this login node
        return socket.gethostbyname(name) in {socket.gethostbyname(socket.gethostname()),
                                               "127.0.0.1"}
    except (OSError, UnicodeError):
        return False


def _env_issues(spec: RunSpec, environ: Mapping[str, str] | None) -> Iterator[ConfigIssue]:
    host = spec.execution.hostname
    if host is not None and not _HOSTNAME.match(host):
        yield ConfigIssue("execution.hostname", "is not a host name",
                          "write the login node's name, e.g. login.cluster.org")
    elif host and environ is not None and not _this_machine(host):
        # NeMo Evaluator ssh'es there to submit; hpceval submits where it runs, so
        # submitting here would put the jobs on another cluster than the file names.
        yield ConfigIssue("execution.hostname", f"names {host!r}, which is not this machine; "
                          "hpceval submits its jobs from here (no ssh hop)",
                          f"run hpceval on {host}, or remove execution.hostname")
    name = spec.target.api_endpoint.api_key_name
    if name is not None:
        if not ENV_NAME.match(name):
            # The value is not echoed: it may be the key itself, pasted by mistake.
            yield ConfigIssue("target.api_endpoint.api_key_name", "is not a variable name",
                              "give the NAME of the variable holding the key, never the key")
        elif environ is not None and name not in environ and not from_file(spec, name):
            yield ConfigIssue("target.api_endpoint.api_key_name", f"${name} is not set",
                              f"export {name}=... before submitting (the value is never "
                              f"stored), or read it from a file of yours: execution.env_vars."
                              f"{name}: file:~/.hpceval/{name.lower()}.key (chmod 600)")
    if environ is not None:
        yield from secret_file_issues(spec)
    groups = [("execution.env_vars", spec.execution.env_vars),
              ("deployment.env_vars", spec.deployment.env_vars),
              ("evaluation.env_vars", spec.evaluation.env_vars)]
    groups += [(f"evaluation.tasks.{t.name}.env_vars", t.env_vars) for t in spec.evaluation.tasks]
    for where, env in groups:
        for var, value in env.items():
            if not ENV_NAME.match(var):
                yield ConfigIssue(f"{where}.{var}", "is not a valid variable name",
                                  "use letters, digits and _")
            ref = env_reference(value)
            if where != "execution.env_vars" and BARE_NAME.match(value):
                # The launcher refuses unprefixed values (0.2.7) or read them as a host
                # variable's name (before): taken as text, a secret's NAME would be sent.
                yield ConfigIssue(f"{where}.{var}", f"{value!r} has no prefix, so it is unclear "
                                  "whether it names a variable or is the text itself",
                                  f"write host:{value} to pass that variable, or lit:{value} "
                                  "for the text")
            elif ref is not None and not ENV_NAME.match(ref):
                yield ConfigIssue(f"{where}.{var}", f"{value!r} names no valid variable",
                                  "write host:NAME")
            elif ref is not None and environ is not None and ref not in environ:
                yield ConfigIssue(f"{where}.{var}", f"passes ${ref} through, but it is not set",
                                  f"export {ref}=... before submitting (the value is never stored)")


def umask_notes(spec: RunSpec) -> list[str]:
    """execution.umask with a write bit for group or others: what it does instead."""
    value = spec.execution.umask
    bits = run_umask_bits(value)
    if bits == int(value, 8):
        return []
    return [f"execution.umask {value} acts as {bits:04o}: nothing in a run directory is writable "
            "by group or others (a member of the group could replace a queued job's script, "
            f"which runs as you); group members still read it (set execution.umask {bits:04o} "
            "to silence this)"]


def mount_point_notes(spec: RunSpec) -> list[str]:
    """A runtime that binds only onto folders its images have (Charliecloud 0.31: ch-run cannot
    make a mount point in a read-only image) binds the run's folders at their own paths: unless
    an execution.extra_binds folder above execution.output_dir is bound first, every image
    must have that folder, or its containers fail to start on the node, after the queue wait.
    A note, not a refusal: images built for the site have its file systems' folders."""
    ex = spec.execution
    runtime = runtime_for(ex.container_runtime)
    if not runtime.binds_need_mount_points or runtime.writable_options & set(
            ex.container_options):
        return []
    output = os.path.normpath(os.path.expanduser(ex.output_dir))
    if "$" in output:  # a variable of the job's: not known here
        return []
    sources = [os.path.normpath(os.path.expanduser(bind_parts(b)[0])) for b in ex.extra_binds]
    if any(within(output, s) for s in sources):
        return []
    top = "/" + output.strip("/").split("/")[0]
    return [f"execution.output_dir {ex.output_dir}: {runtime.name} binds the run's folders at "
            f"their own paths, and binds only onto folders an image has, so every image of the "
            f"run must have {output} (or {top} bound first: add it to execution.extra_binds, "
            f"with {top} in the images){_writable_hint(runtime)}"]


def _writable_hint(runtime: Runtime) -> str:
    options = sorted(runtime.writable_options)
    return (f"; or make the images writable with execution.container_options: [{options[0]}] "
            f"where {runtime.name} has it" if options else "")


def load_fit_notes(spec: RunSpec) -> list[str]:
    """Loads that may not fit in one allocation (health_timeout + signal_seconds > walltime):
    a note, not a refusal (a small model loads in minutes whatever its timeout says). The job
    chains from an allocation that never became healthy once, not twice (templates/teardown.j2)."""
    from hpceval.engines import engine_for

    ex = spec.execution
    wall = walltime_minutes(ex.walltime)
    if wall is None:
        return []
    served = [("deployment", spec.deployment)] + [
        (f"auxiliary_deployments.{name}", aux)
        for name, aux in spec.auxiliary_deployments.items()]
    return [f"{where}.health_timeout {dep.health_timeout} s + execution.signal_seconds "
            f"{ex.signal_seconds} s is more than execution.walltime {ex.walltime}: a load that "
            "takes that long is stopped by the walltime, and auto-resume tries it once more only "
            f"(raise execution.walltime, or lower {where}.health_timeout)"
            for where, dep in served
            if engine_for(dep.type).serves and dep.health_timeout + ex.signal_seconds > wall * 60]


def image_version_findings(spec: RunSpec, span: Callable[[str], int]
                           ) -> tuple[list[str], list[ConfigIssue]]:
    """What each served deployment's engine says of its image (``Engine.image_findings``:
    vLLM reads its release from the tag), with ``span`` the nodes per instance of the
    deployment at a key path."""
    from hpceval.engines import engine_for

    notes: list[str] = []
    issues: list[ConfigIssue] = []
    served = [("deployment", spec.deployment)] + [
        (f"auxiliary_deployments.{name}", aux)
        for name, aux in spec.auxiliary_deployments.items()]
    for where, dep in served:
        found_notes, found_issues = engine_for(dep.type).image_findings(
            where, dep, functools.partial(span, where))
        notes += found_notes
        issues += found_issues
    return notes, issues
