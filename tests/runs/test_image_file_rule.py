"""One rule for "this image file is there and usable" (hpceval.images.image_file_problem): the
runtime's choice of a staged image, the submit preflight and resume's check of the pulled
images took a directory, an unreadable file or an empty one differently before; now they ask
the same function and agree on each case."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from support.runs import configs
from support.slurm import FakeSlurm

from hpceval.images import image_file_problem, sif_name, usable_image_file
from hpceval.records import read_run
from hpceval.runs.control import _missing_images
from hpceval.runs.submit import submit_configs
from hpceval.runtimes import runtime_for
from hpceval.staging.preflight import preflight

IMAGE = "docker://example.org/server:1"
FILE = sif_name(IMAGE)


def _good(path: Path) -> None:
    path.write_bytes(b"image")


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _directory(path: Path) -> None:
    path.mkdir()
    (path / "rootfs").write_bytes(b"x")  # not even an empty one


def _dangling(path: Path) -> None:
    path.symlink_to(path.parent / "gone.sif")


def _link_to_good(path: Path) -> None:
    target = path.parent / "real.sif"
    target.write_bytes(b"image")
    path.symlink_to(target)


def _absent(path: Path) -> None:
    pass


# (what is at the path, what the rule says: None is an image file)
CASES: dict[str, tuple[Callable[[Path], None], str | None]] = {
    "file": (_good, None),
    "symlink to a file": (_link_to_good, None),
    "missing": (_absent, "missing"),
    "empty": (_empty, "empty"),
    "directory": (_directory, "a directory, not an image file"),
    "dangling symlink": (_dangling, "a symlink to nothing"),
}


@pytest.mark.parametrize("case", CASES)
def test_the_rule(tmp_path: Path, case: str) -> None:
    make, problem = CASES[case]
    make(tmp_path / FILE)
    assert image_file_problem(tmp_path / FILE) == problem
    assert usable_image_file(str(tmp_path / FILE)) is (problem is None)


def test_a_file_this_user_cannot_read_is_not_usable(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # the tests may run as root, whom no mode bit stops: os.access says no instead
    _good(tmp_path / FILE)
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    assert image_file_problem(tmp_path / FILE) == "unreadable"


def _three_answers(tmp_path: Path, fake: FakeSlurm, make: Callable[[Path], None]
                   ) -> tuple[bool, bool, bool]:
    """(staged by the runtime, passed by the preflight, present for resume) for one path."""
    image_dir = tmp_path / "staged"
    image_dir.mkdir()
    make(image_dir / FILE)
    runtime = runtime_for("apptainer")
    staged = runtime.staged_server_image(IMAGE, str(image_dir)) != IMAGE
    execution = {"type": "slurm", "container_runtime": "apptainer", "offline": False}
    [resolved] = configs(tmp_path / "file", execution=execution, deployment={
        "type": "command", "image": str(image_dir / FILE), "runtime": "container",
        "command": "exec my-server --port $PORT"})
    passed = not [i for i in preflight(resolved, environ={}) if i.path == "deployment.image"]
    # a run whose pull job wrote (or failed to write) the same thing into its images/
    [pulling] = configs(tmp_path / "pull", execution=execution, deployment={
        "type": "command", "image": IMAGE, "runtime": "container",
        "command": "exec my-server --port $PORT"})
    run_dir = submit_configs(pulling, fake).run_dir
    (run_dir / "images").mkdir(exist_ok=True)
    make(run_dir / "images" / FILE)
    present = not _missing_images(run_dir, read_run(run_dir))
    return staged, passed, present


@pytest.mark.parametrize("case", CASES)
def test_the_three_callers_agree(tmp_path: Path, fake: FakeSlurm, case: str) -> None:
    make, problem = CASES[case]
    assert _three_answers(tmp_path, fake, make) == (problem is None,) * 3


def test_they_agree_on_an_unreadable_file(tmp_path: Path, fake: FakeSlurm,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable(path: Path) -> None:
        _good(path)
        unreadable_paths.add(str(path))

    unreadable_paths: set[str] = set()
    access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: (
        str(path) not in unreadable_paths and access(path, mode, **kw)))
    assert _three_answers(tmp_path, fake, unreadable) == (False, False, False)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _link_to_directory(path: Path) -> None:
    target = path.parent / "real"
    _directory(target)
    path.symlink_to(target)


# the shell's extra cases: what a job's check meets on a node, beside CASES
SHELL_CASES = {**CASES, "fifo": (_fifo, "not a regular file"),
               "symlink to a directory": (_link_to_directory, "a directory, not an image file")}


@pytest.mark.parametrize("case", SHELL_CASES)
def test_the_jobs_check_is_the_same_rule(tmp_path: Path, case: str) -> None:
    """The rendered jobs check their image files on the node with the shell function of
    templates/image_file.j2 (the pull job before it pulls, the jobs that hold GPUs before their
    servers start): the same answer as image_file_problem, in the same words. `[ -s ]`, the
    check before, took a directory for an image."""
    from hpceval.render.quoting import render_template

    make, problem = SHELL_CASES[case]
    make(tmp_path / FILE)
    assert image_file_problem(tmp_path / FILE) == problem
    check = render_template("image_file.j2", {}) + 'usable_image_file "$1"\n'
    out = subprocess.run(["bash", "-c", check, "check", str(tmp_path / FILE)],
                         capture_output=True, text=True, timeout=30, check=False)
    assert out.stderr == ""
    assert (out.returncode, out.stdout) == ((0, "") if problem is None else (1, problem + "\n"))
