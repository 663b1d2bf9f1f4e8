"""Values a run finds on the machine hpceval runs on: the local profile's
``execution.gpus_per_node: auto`` (this machine's GPUs) and ``execution.container_runtime:
auto`` (docker, or podman where docker is absent, as NeMo Evaluator's local executor runs
containers), and ``gpus_per_node: null`` (no GPU request, as NeMo Evaluator reads it). Each is
resolved before the schema sees the config, with a note saying what it became.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Mapping
from typing import Any

from hpceval.engines import engine_for, engine_names
from hpceval.errors import ConfigIssue
from hpceval.runtimes import IMAGE, from_image, runtime_for, runtime_names

AUTO = "auto"


def count_gpus(env: Mapping[str, str],
               which: Callable[[str], str | None] = shutil.which) -> int | None:
    """The GPUs this machine gives a job: CUDA_VISIBLE_DEVICES when set, else ``nvidia-smi
    -L``'s lines; None when neither can tell."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [d for d in visible.split(",") if d.strip() and d.strip() != "-1"]
        return len(ids)
    smi = which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def local_gpus(data: dict[str, Any], env: Mapping[str, str],
               which: Callable[[str], str | None] = shutil.which
               ) -> tuple[list[str], list[ConfigIssue]]:
    """``execution.gpus_per_node: auto`` (the local profile's): the GPUs this machine has.
    Unknown (no nvidia-smi, CUDA_VISIBLE_DEVICES unset): one instance's worth, with a note."""
    execution = data.get("execution")
    if isinstance(execution, dict) and "gpus_per_node" in execution \
            and execution["gpus_per_node"] is None:
        return _no_gpus(data, execution)
    if not isinstance(execution, dict) or execution.get("gpus_per_node") != AUTO:
        return [], []
    if not _runs_here(execution):
        return [], [ConfigIssue("execution.gpus_per_node", "is auto, which counts the GPUs of "
                                "the machine hpceval runs on: only for execution.type local",
                                "write the GPUs per node of the cluster's nodes")]
    found = count_gpus(env, which)
    if found is not None:
        execution["gpus_per_node"] = found
        return [f"execution.gpus_per_node: auto found {found} GPU(s) on this machine"], []
    dep = data.get("deployment") if isinstance(data.get("deployment"), dict) else {}
    assert isinstance(dep, dict)
    need, kind = 1, dep.get("type")
    if kind in engine_names() and engine_for(str(kind)).serves \
            and engine_for(str(kind)).parallel:  # TP x PP GPUs per instance
        tp, pp = dep.get("tensor_parallel_size", 1), dep.get("pipeline_parallel_size", 1)
        need = tp * pp if isinstance(tp, int) and isinstance(pp, int) else 1
    execution["gpus_per_node"] = need
    return [f"execution.gpus_per_node: auto could not count this machine's GPUs (no "
            f"nvidia-smi, CUDA_VISIBLE_DEVICES unset): using {need}, one instance's worth "
            "(set execution.gpus_per_node)"], []


def _workstation_runtimes() -> list[tuple[str, str]]:
    """(runtime, its program) of the runtimes `auto` may choose, in the registry's order: NEL's
    local executor runs the server and the harnesses with `docker run`; podman takes the same
    command line, so a machine with podman and no docker gets podman."""
    return [(name, runtime_for(name).run_tool) for name in runtime_names()
            if runtime_for(name).auto_on_workstation]


def _runs_here(execution: dict[str, Any]) -> bool:
    """Whether the run's jobs run on this machine (its backend's ``runs_here``): only then
    can an ``auto`` value be found here (not under the default type, nor an unknown one)."""
    from hpceval.backends import BACKENDS, backend_for

    kind = execution.get("type")
    return isinstance(kind, str) and kind in BACKENDS and backend_for(kind).runs_here


def find_program(name: str) -> str | None:
    """shutil.which, looked up at call time (tests replace it: a machine with or without
    docker)."""
    return shutil.which(name)


def local_runtime(data: dict[str, Any], which: Callable[[str], str | None] | None = None
                  ) -> tuple[list[str], list[ConfigIssue]]:
    """``execution.container_runtime: auto`` (the local profile's): a run that serves its model
    from an image gets a container runtime as NEL's local executor does (docker, or podman
    where docker is absent; neither found: docker, which the job's checks then name); any
    other run keeps host-installed harnesses (none)."""
    execution = data.get("execution")
    if not isinstance(execution, dict) or execution.get("container_runtime") != AUTO:
        return [], []
    if not _runs_here(execution):
        return [], [ConfigIssue("execution.container_runtime", "is auto, which looks for "
                                "docker or podman on the machine hpceval runs on: only for "
                                "execution.type local", "write the site's runtime, e.g. "
                                "apptainer or pyxis")]
    dep = data.get("deployment") if isinstance(data.get("deployment"), dict) else {}
    assert isinstance(dep, dict)
    kind = dep.get("type")
    serves = kind in engine_names() and engine_for(str(kind)).serves
    if not (serves and from_image(str(dep.get("runtime", IMAGE)))):
        execution["container_runtime"] = "none"
        return [], []
    look = which or find_program
    candidates = _workstation_runtimes()
    found = next((name for name, tool in candidates if look(tool)), None)
    chosen = found or candidates[0][0]
    execution["container_runtime"] = chosen
    why = "found on this machine" if found else (
        f"neither {' nor '.join(tool for _, tool in candidates)} found here")
    return [f"execution.container_runtime: auto chose {chosen} ({why}): the server and the "
            "harnesses run in containers, as NeMo Evaluator's local executor runs them "
            "(set execution.container_runtime to choose)"], []


def _no_gpus(data: dict[str, Any], execution: dict[str, Any]
             ) -> tuple[list[str], list[ConfigIssue]]:
    """``execution.gpus_per_node: null``: NeMo Evaluator's way to ask for no GPU (its examples
    that evaluate an endpoint elsewhere, ``deployment: none``). A CPU job, when nothing is served
    in it; a server of the job's own needs GPUs to be named."""
    dep = data.get("deployment") if isinstance(data.get("deployment"), dict) else {}
    assert isinstance(dep, dict)
    kind = dep.get("type", "none")
    if kind in engine_names() and engine_for(str(kind)).serves:
        return [], [ConfigIssue("execution.gpus_per_node", f"is null (no GPUs), but deployment "
                                f"{kind} serves the model in the job",
                                "give the GPUs per node, or use deployment: none with "
                                "target.api_endpoint.url")]
    execution["gpus_per_node"] = 0
    return ["execution.gpus_per_node: null (no GPU request, as NeMo Evaluator reads it): the "
            "job asks for no GPU"], []
