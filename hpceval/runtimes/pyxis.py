"""container_runtime pyxis: servers and harnesses start as srun job steps with pyxis's flags.

Pyxis (Slurm's SPANK plugin over enroot) takes the image, mounts and environment as srun
options, not as a command prefix. Its mounts are the same binds as apptainer's (from the same
config keys, checked by ``steps.bind``); its environment is srun's (``--export=ALL``, written
on every step: what the job exported, even under a site's ``SBATCH_EXPORT=NONE``), and
``--container-env`` names the variables that must win over the image's own ``ENV`` lines
(HF_HOME, the endpoint URL...).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from hpceval.images import DOCKER, pyxis_reference, sif_name
from hpceval.runtimes import register
from hpceval.runtimes.base import NO_SITE, Runtime, SiteOptions, bind_parts
from hpceval.shell import ShellCode, env_name, joined


def image(value: str) -> str:
    """deployment.image or a task's image for --container-image: a docker:// reference in
    pyxis's spelling (registry#repo:tag), or a .sqsh file as it is."""
    return pyxis_reference(value) if value.startswith(DOCKER) else value


def mount(parts: Sequence[Any]) -> ShellCode:
    """One SRC:DST[:FLAGS] entry; a bare SRC mounts at the same path (pyxis wants both)."""
    return joined(parts if len(parts) > 1 else [parts[0], parts[0]], ":")


def container_name(image_value: str) -> ShellCode:
    """pyxis's --container-name: one per image and job, so the steps of the job on a node reuse
    the container pyxis unpacked for the first (without a name, every step unpacks the image
    again). The job's id keeps it apart from another job's where a site keeps named containers
    beyond the job (pyxis's container_scope=global)."""
    name = Path(sif_name(image_value) if image_value.startswith(DOCKER) else image_value).name
    if Path(name).suffix in (".sqsh", ".sif", ".squashfs"):
        name = Path(name).stem
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", name)  # plain in any tool's paths
    return joined([ShellCode(f'"hpceval-${{HPCEVAL_JOB_ID}}-{safe}"')], ",",
                  "--container-name=")


def container_flags(image_value: str, mounts: Iterable[ShellCode],
                    env_names: Iterable[str], workdir: ShellCode | None = None) -> list[Any]:
    flags: list[Any] = [joined([image(image_value)], ",", "--container-image="),
                        container_name(image_value)]
    entries = list(mounts)
    if entries:
        flags.append(joined(entries, ",", "--container-mounts="))
    if workdir is not None:
        flags.append(joined([workdir], ",", "--container-workdir="))
    # Like apptainer's explicit binds: the user's home (dotfiles, ~/.cache) stays out.
    flags.append("--no-container-mount-home")
    names = [env_name(n) for n in dict.fromkeys(env_names)]
    if names:
        flags.append(joined(names, ",", "--container-env="))
    return flags


# A harness runs as its own one-task step beside the servers (--overlap: the servers' steps
# hold the allocation's resources), on the batch node: it calls the in-job proxy on 127.0.0.1,
# and Slurm would otherwise place a one-node step on any node of the allocation. --export=ALL:
# under a site's SBATCH_EXPORT=NONE a bare srun starts its step with an empty environment.
HARNESS_STEP = ["srun", "--overlap", "--nodes=1", "--ntasks=1", "--export=ALL",
                joined([ShellCode('"$SLURMD_NODENAME"')], ",", "--nodelist=")]


@register
class Pyxis(Runtime):
    name = "pyxis"
    order = 2
    summary = "pyxis (srun --container-image, .sqsh images; Slurm jobs only)"
    srun_steps: ClassVar[bool] = True
    image_suffix = ".sqsh"  # the squashfs file `enroot import` writes (same stem as the SIF)
    image_formats = frozenset({"squashfs"})  # enroot runs SquashFS files only (a SIF is not one)
    staged_kind = "squashfs image (.sqsh)"
    pull_tool = "enroot"
    node_tool = "enroot"  # srun's pyxis plugin runs the containers through it
    version_args = ("version",)
    pull_verb = "import"
    pull_cache_env = ("ENROOT_CACHE_PATH",)  # enroot import's layers
    pull_temp_env = ("ENROOT_TEMP_PATH",)  # and the image it unpacks before mksquashfs
    pull_over_file: ClassVar[bool] = False  # enroot import refuses to write over a file

    def server_prefix(self, image: str, binds: list[str], *, gpus: bool,
                      cache: ShellCode | None = None, env_names: list[str] | None = None,
                      site: SiteOptions = NO_SITE, home: bool = True) -> list[Any]:
        # home: pyxis containers never mount it (container_flags: --no-container-mount-home)
        return []  # the image and binds are srun's options then: server_srun

    def server_srun(self, image: str, binds: list[str], env_names: list[str],
                    cache: ShellCode | None = None) -> list[Any]:
        mounts = [mount(bind_parts(b)) for b in binds]
        return container_flags(image, mounts + ([mount([cache])] if cache is not None else []),
                               env_names)

    def harness_runner(self, image: str, task_dir: ShellCode, binds: list[str],
                       env_names: list[str], *, gpus: bool,
                       site: SiteOptions = NO_SITE) -> list[Any]:
        # GPUs: pyxis's enroot hooks expose the step's own
        mounts = [mount([task_dir]), *(mount(bind_parts(b)) for b in binds)]
        return [*HARNESS_STEP, *container_flags(image, mounts, env_names, workdir=task_dir)]

    def pull_words(self, binary: str, dest: Any, source: str) -> list[Any]:
        # enroot writes the squashfs file pyxis's --container-image reads
        return [binary, "import", "--output", dest, DOCKER + pyxis_reference(source)]
