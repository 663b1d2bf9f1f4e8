"""container_runtime charliecloud: ``ch-run`` (fully unprivileged, no setuid helper) with
SquashFS images (``.sqfs``, mounted by ch-run itself through squashfuse); directory images
run too.

The command line (written for Charliecloud 0.31, Debian's charliecloud-runtime)::

    env USER=... ch-run '--unset-env=!(HPCEVAL_CH_A|...|CUDA_VISIBLE_DEVICES|...)' --set-env \\
        '--set-env=A=$HPCEVAL_CH_A' ... '--unset-env=HPCEVAL_CH_*' \\
        -b SRC:DST ... [-c TASK_DIR] IMAGE -- COMMAND

The environment, by NAME only (ch-run logs its whole command line to syslog, so no value may
be on it, and a value in a file would be a secret on disk). ch-run applies --unset-env and
--set-env in their order, after its own tweaks:
1. the keep-list drops everything of the host's environment but the step's own variables
   (exported under ``env_prefix``, so the script holds them in names of their own) and the
   ones the job sets for every container (docker.ALWAYS_PASSED: the GPU slice, the address vLLM
   advertises, ...);
2. a bare ``--set-env`` applies the image's ENV lines (``/ch/environment``, which
   ``ch-image pull`` writes; ch-run refuses an image without it): PATH and the libraries;
3. each step variable is set back to its own name from the prefixed copy (ch-run expands
   ``$NAME`` itself, from its own environment: the value is never a word of the line), after
   the image's ENV, so the step's value wins, as docker's ``-e NAME`` does;
4. the prefixed copies go.
A step variable set to "" arrives as ""; an unset ALWAYS_PASSED one stays unset (its value is
the host's, and the image's ENV wins only where the image sets that name itself).

Binds are ``-b SRC:DST`` (apptainer's bare ``src`` binds at the same path). ch-run 0.31 cannot
create a mount point in a read-only image: each bound folder must exist in the image, or be
below a folder ch-run binds itself (/tmp, or $TMPDIR there). Sites build their images with
their file systems' folders, or, from Charliecloud 0.36, add ``--write-fake`` with
``execution.container_options`` (its words go right after ``ch-run``).

Home: ch-run mounts none by default; ``home=True`` (a server whose hub cache may be under
$HOME) adds ``--home``, which mounts $HOME at /home/$USER. ch-run needs $USER set: the line
starts ``env USER="${USER:-$(id -un)}" ch-run``.

GPUs: Charliecloud has no ``--nv``. The NVIDIA libraries are put into the image beforehand with
``ch-fromhost --nvidia IMAGE_DIR`` (a directory image, at staging time; converted to SquashFS
after), and the GPU slice arrives as CUDA_VISIBLE_DEVICES by name: a GPU step's line is the same
as another's. Nothing in the tests can check a GPU.

Pulls: ``ch-image pull`` into its storage, then ``ch-convert`` to the SquashFS file, one
``sh -c`` line (the pull commands are one argv: render/steps.image_pull, staging/pull.py).
"""

from __future__ import annotations

from typing import Any

from hpceval.images import DOCKER
from hpceval.runtimes import register
from hpceval.runtimes.base import NO_SITE, Runtime, SiteOptions, bind_parts
from hpceval.runtimes.docker import ALWAYS_PASSED
from hpceval.shell import LineStart, ShellCode, env_name

PREFIX = "HPCEVAL_CH_"
USER = ShellCode('USER="${USER:-$(id -un)}"')
# $1: ch-image, $2: the reference, $3: the SquashFS file (its name need not end in .sqfs: -o).
# ch-image keeps the unpacked image in its storage ($CH_IMAGE_STORAGE; the pull job points it
# at the node's scratch, which it then removes).
PULL_SCRIPT = '"$1" pull "$2" && exec ch-convert -i ch-image -o squash "$2" "$3"'


def _bind(spec: str) -> str:
    """apptainer's ``src`` (same path inside) as ``src:src``; ``src:dst`` as written. ch-run
    has no bind options (apptainer's ``:ro``): a third part is dropped, the image and its
    bind sources stay as the host's permissions make them."""
    parts = bind_parts(spec)
    return f"{parts[0]}:{parts[0]}" if len(parts) == 1 else f"{parts[0]}:{parts[1]}"


@register
class Charliecloud(Runtime):
    name = "charliecloud"
    order = 6
    summary = "charliecloud (ch-run, .sqfs images)"
    env_prefix = PREFIX
    image_suffix = ".sqfs"
    image_formats = frozenset({"squashfs"})  # ch-run runs SquashFS files (or folders), not SIF
    staged_kind = "SquashFS"
    pull_tool = "ch-image"
    node_tool = "ch-run"
    # ch-image keeps the layers and the unpacked image in its storage, which ch-convert then
    # reads: one folder for both
    pull_cache_env = ("CH_IMAGE_STORAGE",)
    pull_temp_env = ()
    binds_need_mount_points = True
    writable_options = frozenset({"--write-fake", "-W"})  # Charliecloud 0.36 and later

    def _environment(self, env_names: list[str]) -> list[Any]:
        own = [env_name(n.removeprefix(PREFIX)) for n in dict.fromkeys(env_names)]
        keep = [*(PREFIX + n for n in own), *ALWAYS_PASSED]
        words: list[Any] = [f"--unset-env=!({'|'.join(dict.fromkeys(keep))})", "--set-env"]
        # \$: the word is ch-run's to expand (shellcheck wants no $ in single quotes)
        words += [ShellCode(f"--set-env={n}=\\${PREFIX}{n}") for n in own]
        return [*words, f"--unset-env={PREFIX}*"]

    def _run(self, binds: list[Any], env_names: list[str], site: SiteOptions) -> list[Any]:
        # ch-run refuses to start without $USER (it names its storage and mount point after
        # it), and a job has none where its submitter's environment had none (submitted from
        # cron or a service, or with the site's export setting NONE): the job's own user
        # then. Not a secret.
        argv: list[Any] = ["env", USER, "ch-run", *site.options, *self._environment(env_names)]
        for b in binds:
            argv += ["-b", b]
        return argv

    def server_prefix(self, image: str, binds: list[str], *, gpus: bool,
                      cache: ShellCode | None = None, env_names: list[str] | None = None,
                      site: SiteOptions = NO_SITE, home: bool = True) -> list[Any]:
        mounts: list[Any] = [_bind(b) for b in binds]
        if cache is not None:  # the servers' cache folder, at the same path
            mounts.append(ShellCode(f"{cache}:{cache}"))
        argv = self._run(mounts, env_names or [], site)
        if home:
            argv.append("--home")
        return [*argv, LineStart(image), "--"]

    def harness_runner(self, image: str, task_dir: ShellCode, binds: list[str],
                       env_names: list[str], *, gpus: bool,
                       site: SiteOptions = NO_SITE) -> list[Any]:
        own = ShellCode(f"{task_dir}:{task_dir}")
        # The site's folders first, then the task's own: ch-run 0.31 mounts onto a folder the
        # image has, or one a bind before it brought in, so a task folder below a bound file
        # system's top folder (execution.extra_binds: /scratch, which the image has) needs no
        # mount point of its own (a bind in the other order mounts the file system over it).
        argv = self._run([*(_bind(b) for b in binds), own], env_names, site)
        return [*argv, "-c", task_dir, LineStart(image), "--"]

    def pull_words(self, binary: str, dest: Any, source: str) -> list[Any]:
        return ["sh", "-c", PULL_SCRIPT, "ch-pull", binary, source.removeprefix(DOCKER), dest]

