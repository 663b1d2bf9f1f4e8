"""container_runtime docker (podman, the same command line, is runtimes/podman.py):
``<tool> run --rm`` with ``-v`` binds, ``-e NAME`` for every variable a step passes, and the
host's network.

NeMo Evaluator's local executor runs servers and harnesses this way. Differences from
apptainer that the rendered lines carry:
- the container starts with an empty environment: each variable the step sets (its own, the
  server token VLLM_API_KEY, CUDA_VISIBLE_DEVICES of the instance, the node address vLLM
  advertises) is passed by NAME with ``-e NAME``, so no value is written into the script;
- the host network (``--network=host``): the server listens on the node's port and the
  harness reaches the in-job proxy on 127.0.0.1, as with apptainer; servers also get the
  host's IPC namespace (``--ipc=host``) for tensor parallelism's shared memory;
- the task directory is bound at its own path and is the working directory (``-w``);
- GPUs are asked for with the profile's ``execution.container_gpu_flags`` (``--gpus all`` for
  docker's NVIDIA runtime, ``--device nvidia.com/gpu=all`` for CDI, podman's way), and what a
  site or sandbox imposes (``--runtime runc``, ``--ulimit host``, ``--cgroups disabled``) is
  ``execution.container_options``, profile keys rather than code.
Images are references in the runtime's own store (``podman pull``/``podman import``), not
staged files.
"""

from __future__ import annotations

from typing import Any, ClassVar

from hpceval.images import DOCKER
from hpceval.runtimes import register
from hpceval.runtimes.base import NO_SITE, Runtime, SiteOptions
from hpceval.shell import LineStart, ShellCode

# Set by the job on the node for every server or harness (GPU slice, the address vLLM
# advertises, the interfaces NCCL/gloo use, proxies); -e NAME of an unset one passes nothing.
ALWAYS_PASSED = ("CUDA_VISIBLE_DEVICES", "VLLM_HOST_IP", "NCCL_SOCKET_IFNAME",
                 "GLOO_SOCKET_IFNAME", "no_proxy", "NO_PROXY")


def _volume(spec: str) -> str:
    """apptainer's ``src`` (same path inside) as ``src:src``; ``src:dst[:opts]`` as written."""
    return spec if ":" in spec else f"{spec}:{spec}"


@register
class Docker(Runtime):
    name = "docker"
    auto_on_workstation = True  # and podman, which takes the same command line
    order = 4
    summary = "docker (docker run, local runs)"
    staged_kind = "image"
    staged_files = False
    leaves_the_job: ClassVar[bool] = True  # dockerd / conmon start the container
    tool_name: ClassVar[str] = "docker"
    pull_cache_env = pull_temp_env = ()  # its images live in the daemon's store, not in files

    def reference(self, image: str) -> str:
        return image.removeprefix(DOCKER)

    def _run(self, binds: list[Any], env_names: list[str], site: SiteOptions, *,
             gpus: bool) -> list[Any]:
        argv: list[Any] = [self.tool_name, "run", "--rm", "--network=host", *site.options]
        if gpus:
            argv += list(site.gpu_flags)
        for b in binds:
            argv += ["-v", b]
        for name in dict.fromkeys([*ALWAYS_PASSED, *env_names]):
            argv += ["-e", name]
        return argv

    def server_prefix(self, image: str, binds: list[str], *, gpus: bool,
                      cache: ShellCode | None = None, env_names: list[str] | None = None,
                      site: SiteOptions = NO_SITE, home: bool = True) -> list[Any]:
        # home: docker mounts only the volumes it is given
        volumes: list[Any] = [_volume(b) for b in binds]
        if cache is not None:  # the servers' cache folder, at the same path
            volumes.append(ShellCode(f"{cache}:{cache}"))
        argv = self._run(volumes, env_names or [], site, gpus=gpus)
        # the host's IPC namespace: a container's own /dev/shm is 64 MB, too small for the
        # shared memory of tensor parallelism (vLLM's docs ask for --ipc=host or --shm-size)
        return [*argv, "--ipc=host", LineStart(self.reference(image))]

    def harness_runner(self, image: str, task_dir: ShellCode, binds: list[str],
                       env_names: list[str], *, gpus: bool,
                       site: SiteOptions = NO_SITE) -> list[Any]:
        own = ShellCode(f"{task_dir}:{task_dir}")
        argv = self._run([own, *(_volume(b) for b in binds)], env_names, site, gpus=gpus)
        return [*argv, "-w", task_dir, LineStart(self.reference(image))]

