"""What a container runtime is: one class declaring how hpceval runs and stages images with it.

Render asks the runtime of the run (``runtime_for(execution.container_runtime)``) for a
server's and a harness's command prefix (or srun options), the prefix that passes variables
into the container, and staging asks it for the image file it runs and the command that pulls
one. A new runtime is one module in this package plus its tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from hpceval.images import DOCKER, sif_name, usable_image_file
from hpceval.shell import LineStart, ShellCode


@dataclass(frozen=True)
class SiteOptions:
    """What a site (or a sandbox) imposes on a runtime's command line, from the profile:
    ``execution.container_options`` and ``execution.container_gpu_flags``. Runtimes whose
    command line has no room for them (apptainer's defaults) ignore them."""

    options: tuple[str, ...] = ()
    gpu_flags: tuple[str, ...] = ()


NO_SITE = SiteOptions()


def bind_parts(spec: str) -> list[str]:
    """An apptainer-style ``src[:dst[:opts]]`` bind (execution.extra_binds, already checked)
    as its parts: the source is the first, always there."""
    return spec.split(":")


class Runtime:
    """The defaults describe an apptainer-like runtime: ``<tool> exec`` with ``--bind``s."""

    name: ClassVar[str]
    order: ClassVar[int]  # place in the schema's list of choices
    summary: ClassVar[str] = ""  # the help text's words for it (default: its name)
    containers: ClassVar[bool] = True  # False: no containers, everything runs from the host
    srun_steps: ClassVar[bool] = False  # True: starts containers through srun (Slurm only)
    # True: its containers are started by a daemon (dockerd, podman's conmon), outside the
    # process tree and cgroup of whoever asked: a scheduler can neither confine nor stop them
    leaves_the_job: ClassVar[bool] = False
    # A choice of the local profile's `container_runtime: auto`, as NeMo Evaluator's local
    # executor runs containers (`docker run`); the first whose run_tool is installed wins
    auto_on_workstation: ClassVar[bool] = False
    # Prefix of a variable passed into the container (--cleanenv drops the rest).
    env_prefix: ClassVar[str] = ""
    image_suffix: ClassVar[str] = ".sif"  # the staged image file a job runs
    staged_files: ClassVar[bool] = True  # False: images live in the runtime's own store
    staged_kind: ClassVar[str] = "SIF"  # what that file is called in messages
    # what the first bytes of a file it runs may say it is (hpceval.images.FORMATS): Apptainer
    # and Singularity run SIF and plain SquashFS images
    image_formats: ClassVar[frozenset[str]] = frozenset({"sif", "squashfs"})
    pull_tool: ClassVar[str] = ""  # the program `hpceval stage` pulls with (default: name)
    # the program a compute node runs containers with (default: name), and the arguments that
    # make it print its version (hpceval doctor --on-node probes it)
    node_tool: ClassVar[str] = ""
    version_args: ClassVar[tuple[str, ...]] = ("--version",)
    # True: a bind's destination must be a folder the (read-only) image has, or one an earlier
    # bind brought in, unless an option of ``writable_options`` makes the image writable
    # (ch-run 0.31); False: the runtime makes mount points itself.
    binds_need_mount_points: ClassVar[bool] = False
    writable_options: ClassVar[frozenset[str]] = frozenset()
    # The variables that point a pull's layer cache (pull_cache_env) and its temporary files,
    # the unpacked image of many GB (pull_temp_env), at a folder of the pull's own on the
    # node's scratch (templates/pull_images.j2 writes them generically), not the tool's default
    # cache in $HOME nor a node's /tmp that every user shares. No default here: each runtime
    # declares its own (an apptainer-like one would otherwise inherit apptainer's names), ()
    # where it pulls no image file (tests/runtimes/test_runtime_conformance.py).
    pull_cache_env: ClassVar[tuple[str, ...]]
    pull_temp_env: ClassVar[tuple[str, ...]]

    def image_file(self, sif: str) -> str:
        """The staged file for this runtime, from the catalogue's SIF name."""
        return sif.removesuffix(".sif") + self.image_suffix

    def staged_server_image(self, image: str, image_dir: str | None) -> str:
        """What a server (or judge) runs from: a docker:// image that ``hpceval stage`` put in
        ``image_dir`` runs from that file, as harness images do, instead of every instance
        pulling and converting the same tens-of-GB image at once (apptainer#307: concurrent
        cache use crashes; pyxis unpacks it per step); ``image`` itself otherwise. Render and
        the submit preflight both ask this, so they agree on what the job pulls; whether the
        file is there is hpceval.images' one rule (usable_image_file)."""
        if not (image.startswith(DOCKER) and image_dir and self.staged_files):
            return image
        staged = Path(image_dir) / self.image_file(sif_name(image))
        return str(staged) if usable_image_file(staged) else image

    def pulled_in_job(self, image: str) -> bool:
        """Whether the job pulls ``image`` (what staged_server_image left as docker://) into
        a file itself, once, before its servers start (render/deployments.py): runtimes that
        run image files; the others keep images in their own store and pull them there."""
        return image.startswith(DOCKER) and self.staged_files and self.containers

    def pulled_file(self, image: str, folder: str) -> str | None:
        """The file in ``folder`` (a run's images/) that a docker:// ``image`` is pulled into
        once for the run, which servers and harnesses then run; None when this runtime keeps
        it elsewhere (its own store) or ``image`` is not docker://."""
        if not (folder and self.pulled_in_job(image)):
            return None
        return f"{folder}/{self.image_file(sif_name(image))}"

    def server_prefix(self, image: str, binds: list[str], *, gpus: bool,
                      cache: ShellCode | None = None, env_names: list[str] | None = None,
                      site: SiteOptions = NO_SITE, home: bool = True) -> list[Any]:
        """Words before a server's command line: ``<tool> exec ... IMAGE``; ``cache``: the
        servers' cache folder (bound at the same path); ``env_names``: the variables the
        server environment sets (apptainer passes them by env_prefix instead); ``home``:
        False where nothing the server reads is in the user's home folder
        (render/deployments.needs_home)."""
        argv: list[Any] = [self.name, "exec"]
        if gpus:
            argv.append("--nv")
        argv.append("--cleanenv")  # the site's host Python must not leak into the image
        if not home:  # apptainer binds $HOME unasked: one quota every job of the user shares
            argv.append("--no-home")
        argv += [item for b in binds for item in ("--bind", b)]
        if cache is not None:
            argv += ["--bind", cache]
        return [*argv, LineStart(image)]

    def server_srun(self, image: str, binds: list[str], env_names: list[str],
                    cache: ShellCode | None = None) -> list[Any]:
        """srun options of a server step (runtimes that start containers through srun)."""
        return []

    def harness_runner(self, image: str, task_dir: ShellCode, binds: list[str],
                       env_names: list[str], *, gpus: bool,
                       site: SiteOptions = NO_SITE) -> list[Any]:
        """Words before a harness's command: the task directory is bound and its workdir.
        The user's home stays out (``--no-home``), as pyxis's and Charliecloud's harnesses
        run: a harness's caches are in its task folder (HF_HOME, XDG_CACHE_HOME), the hub
        cache and data folders are bound by name, and $HOME is one quota every job of the
        user shares (hpc-admin-2 D12)."""
        argv: list[Any] = [self.name, "exec", "--cleanenv", "--no-home"]
        if gpus:
            argv.append("--nv")
        argv += ["--bind", task_dir]
        for spec in binds:
            argv += ["--bind", spec]
        return [*argv, LineStart(image)]

    @property
    def tool(self) -> str:
        return self.pull_tool or self.name

    @property
    def run_tool(self) -> str:
        return self.node_tool or self.name

    def pull_argv(self, binary: str, dest: Path, source: str) -> list[str]:
        """The one pull command line (the strict fakes of the tests accept exactly it);
        ``source`` is a docker:// reference."""
        return [str(word) for word in self.pull_words(binary, str(dest), source)]

    def pull_words(self, binary: str, dest: Any, source: str) -> list[Any]:
        """pull_argv's words, ``dest`` as given (the job script's pull passes a variable)."""
        return [binary, "pull", "--force", dest, source]

    pull_verb: ClassVar[str] = "pull"  # in messages: `<tool> <verb> <source>`
    pull_over_file: ClassVar[bool] = True  # False: the tool refuses to write over a file
