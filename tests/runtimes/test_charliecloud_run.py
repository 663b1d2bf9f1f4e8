"""container_runtime charliecloud for real: the harness line the runtime renders runs through
bash and ch-run, on a tiny image built here from the host's bash (a directory image, and the
same as SquashFS where mksquashfs is installed). No Slurm, no GPU.

Skipped only where ch-run is missing; HPCEVAL_REQUIRE_CHARLIECLOUD=1 (CI, which installs
charliecloud-runtime) makes that a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hpceval.runtimes import runtime_for
from hpceval.runtimes.charliecloud import PREFIX
from hpceval.shell import ShellCode, argv

SECRET = "s3cr3t-not-passed"
# what the step sets: a space, a colon, a $ and quotes must arrive as they are
NOTE = "two words: $HOME 'q'"


def _ch_run() -> str:
    found = shutil.which("ch-run")
    if found is None:
        if os.environ.get("HPCEVAL_REQUIRE_CHARLIECLOUD") == "1":
            pytest.fail("HPCEVAL_REQUIRE_CHARLIECLOUD=1 but ch-run is not on PATH "
                        "(apt-get install charliecloud-runtime)")
        pytest.skip("ch-run is not installed (apt-get install charliecloud-runtime)")
    return found


def _image(root: Path) -> Path:
    """A rootfs holding bash and its libraries, the folders ch-run binds onto (/dev /proc
    /sys /tmp /home; /etc/passwd and /etc/group it replaces) and /ch/environment (what
    `ch-image pull` writes from the image's ENV; the bare --set-env needs it)."""
    bash = Path(os.path.realpath(shutil.which("bash") or "/bin/bash"))
    files = [bash]
    out = subprocess.run(["ldd", str(bash)], capture_output=True, text=True, check=True).stdout
    files += [Path(w) for w in out.split() if w.startswith("/")]
    for f in files:
        dest = root / f.relative_to("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest)  # follows links: the library itself
    (root / "bin").mkdir(exist_ok=True)
    if not (root / "bin" / "bash").exists():
        shutil.copy2(bash, root / "bin" / "bash")
    for d in ("dev", "proc", "sys", "tmp", "home", "etc", "ch"):
        (root / d).mkdir(exist_ok=True)
    (root / "etc" / "passwd").touch()
    (root / "etc" / "group").touch()
    (root / "ch" / "environment").write_text("PATH=/bin:/usr/bin\nIMAGE_ONLY=from-image\n"
                                             "NOTE=the-image-s\n")
    return root


def _run_line(image: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path,
                                                    Path]:
    task_dir, bound = tmp_path / "run" / "task", tmp_path / "data"
    task_dir.mkdir(parents=True)
    bound.mkdir()
    # The node's scratch is ch-run's /tmp ($TMPDIR), so the host's /tmp, where tmp_path is,
    # is not in the container but for the binds. ch-run 0.31 cannot create a mount point in
    # a read-only image: like a site's image, this one holds them.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for folder in (task_dir, bound):
        if folder.is_relative_to("/tmp"):  # below the /tmp that ch-run binds: its scratch
            (scratch / folder.relative_to("/tmp")).mkdir(parents=True)
        elif image.is_dir():
            (image / folder.relative_to("/")).mkdir(parents=True)
        else:
            pytest.skip(f"{folder} is not below /tmp: a SquashFS image here has no mount point")
    home = tmp_path / "home"
    home.mkdir()
    (home / "dotfile").write_text("host home\n")
    runtime = runtime_for("charliecloud")
    words = runtime.harness_runner(str(image), ShellCode('"$TASK_DIR"'), [str(bound)],
                                   [PREFIX + "NOTE", PREFIX + "EMPTY"], gpus=False)
    inside = ('echo "NOTE=$NOTE"; echo "EMPTY=${EMPTY-unset}"; '
              'echo "SECRET=${FAKE_SECRET-absent}"; echo "IMAGE_ONLY=${IMAGE_ONLY-}"; '
              'echo "PWD=$(pwd)"; echo "HOME=${HOME-unset}"; '
              f'[ -e {home}/dotfile ] || [ -e "/home/$USER/dotfile" ] && echo HOME_MOUNTED; '
              f': > {bound}/written && echo WROTE; '
              'env_left=""; for v in $(compgen -e); do case $v in '
              f'{PREFIX}*) env_left="$env_left $v";; esac; done; echo "LEFT=$env_left"')
    script = (f"export {PREFIX}NOTE={argv([NOTE])} {PREFIX}EMPTY=''\n"
              f"{argv(words)} bash -c {argv([inside])}\n")
    # no USER: a job whose submitter had none (cron, SBATCH_EXPORT=NONE); ch-run needs one
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "HOME": str(home), "TMPDIR": str(scratch), "TASK_DIR": str(task_dir),
           "FAKE_SECRET": SECRET, "CUDA_VISIBLE_DEVICES": "0,1"}
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    return proc, task_dir, bound


def _check(proc: subprocess.CompletedProcess[str], task_dir: Path, bound: Path) -> None:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert f"NOTE={NOTE}" in lines  # by name, the step's value over the image's ENV
    assert "EMPTY=" in lines  # set to "" stays set, to ""
    assert "SECRET=absent" in lines and SECRET not in proc.stdout  # not passed: not there
    assert "IMAGE_ONLY=from-image" in lines  # the image's ENV applies
    assert f"PWD={task_dir}" in lines  # the task directory is the working directory
    assert "HOME=unset" in lines and "HOME_MOUNTED" not in lines  # no home folder
    assert "WROTE" in lines and (bound / "written").exists()  # bound, writable
    assert "LEFT=" in lines  # the prefixed copies are gone


def test_the_rendered_harness_line_runs_in_ch_run(tmp_path: Path) -> None:
    _ch_run()
    image = _image(tmp_path / "image")
    _check(*_run_line(image, tmp_path))


def test_the_same_line_runs_a_squashfs_image(tmp_path: Path) -> None:
    _ch_run()
    if shutil.which("mksquashfs") is None:
        pytest.skip("mksquashfs is not installed (squashfs-tools): the directory image ran")
    image = _image(tmp_path / "image")
    sqfs = tmp_path / "image.sqfs"
    subprocess.run(["mksquashfs", str(image), str(sqfs), "-noappend", "-quiet", "-all-root"],
                   check=True, capture_output=True)
    shutil.rmtree(image)
    proc, task_dir, bound = _run_line(sqfs, tmp_path)
    if "squash" in proc.stderr.lower() and proc.returncode != 0 \
            and os.environ.get("HPCEVAL_REQUIRE_CHARLIECLOUD") != "1":
        pytest.skip(f"this ch-run cannot mount SquashFS here: {proc.stderr.strip()}")
    _check(proc, task_dir, bound)
