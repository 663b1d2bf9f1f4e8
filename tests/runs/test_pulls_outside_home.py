"""Pulled images never land in $HOME: on Slurm the run's pull job writes each unstaged docker://
image (10-20 GB for a vLLM one) into the run's images/ folder under execution.output_dir; a
home quota is a few GB, so submit refuses that output_dir (ConfigError, exit 2) before
anything is written or queued, and resume, which submits the pull job again when an image is
missing, refuses a run directory there by the same function. Staged images, an output_dir
elsewhere and the local backend are not refused."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.runs import configs, write_run_file
from support.slurm import FakeSlurm

from hpceval.config import ResolvedConfig, load_run
from hpceval.config.errors import ConfigError
from hpceval.images import sif_name
from hpceval.runs.control import ResumeRefused, resume_run
from hpceval.runs.index import find_run
from hpceval.runs.submit import submit_configs
from hpceval.staging.preflight import preflight

IMAGE = "docker://example.org/server:1"
FILE = sif_name(IMAGE)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "home" / "me"
    folder.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(folder))  # Path.home() reads $HOME
    return folder


def pulling(tmp_path: Path, output_dir: Path, image_dir: Path | None = None,
            kind: str = "slurm", image: str = IMAGE) -> list[ResolvedConfig]:
    execution: dict[str, Any] = {"type": kind, "container_runtime": "apptainer",
                                 "offline": False, "output_dir": str(output_dir),
                                 **({"image_dir": str(image_dir)} if image_dir else {})}
    return configs(tmp_path / "cfg", execution=execution,
                   deployment={"type": "command", "image": image, "runtime": "container",
                               "command": "exec my-server --port $PORT"})


def test_a_pull_into_home_is_refused_before_anything_is_queued(
        tmp_path: Path, home: Path, fake: FakeSlurm) -> None:
    output_dir = home / "hpceval-runs"
    with pytest.raises(ConfigError) as err:
        submit_configs(pulling(tmp_path, output_dir), fake)
    assert fake.submits == []
    assert not output_dir.exists()  # nothing written either
    [issue] = err.value.issues
    assert issue.path == "execution.output_dir"
    assert IMAGE in issue.message and "home" in issue.message
    assert "execution.output_dir" in issue.fix and "execution.image_dir" in issue.fix
    assert "hpceval stage" in issue.fix


def test_symlinks_are_resolved_both_ways(tmp_path: Path, home: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # a scratch-looking path that leads into home
    (tmp_path / "scratch").symlink_to(home)
    [resolved] = pulling(tmp_path, tmp_path / "scratch" / "runs")
    assert [i.path for i in preflight(resolved, environ={})] == ["execution.output_dir"]
    # $HOME itself a symlink (/home -> /gpfs/home) and output_dir its real path
    monkeypatch.setenv("HOME", str(tmp_path / "scratch"))
    [resolved] = pulling(tmp_path, home / "runs")
    assert [i.path for i in preflight(resolved, environ={})] == ["execution.output_dir"]


def test_a_harness_image_pulled_into_home_is_refused_too(tmp_path: Path, home: Path) -> None:
    [resolved] = pulling(tmp_path, home / "runs", image="/shared/server.sif")
    assert [i for i in preflight(resolved, environ={}) if i.path == "execution.output_dir"] == []
    harness = "docker://example.org/harness:1"
    run_file = write_run_file(tmp_path / "h", execution={
        "type": "slurm", "container_runtime": "apptainer", "offline": False,
        "output_dir": str(home / "runs")})
    run = yaml.safe_load(run_file.read_text())
    for task in run["evaluation"]["tasks"]:
        task["container"] = harness
    run_file.write_text(yaml.safe_dump(run))
    [resolved] = load_run(run_file, profile="local-dev", check_environment=False)
    issues = [i for i in preflight(resolved, environ={}) if i.path == "execution.output_dir"]
    assert len(issues) == 1 and harness in issues[0].message


def test_an_output_dir_outside_home_submits(tmp_path: Path, home: Path,
                                            fake: FakeSlurm) -> None:
    submit_configs(pulling(tmp_path, tmp_path / "scratch" / "runs"), fake)
    assert fake.submits[0]["script"].name == "pull.sbatch"


def test_a_staged_image_pulls_nothing_and_submits(tmp_path: Path, home: Path,
                                                  fake: FakeSlurm) -> None:
    image_dir = tmp_path / "scratch" / "images"
    image_dir.mkdir(parents=True)
    (image_dir / FILE).write_bytes(b"staged")
    submit_configs(pulling(tmp_path, home / "runs", image_dir), fake)
    assert [s["script"].name for s in fake.submits] == ["job.sbatch"]


def test_the_local_backend_is_not_refused(tmp_path: Path, home: Path) -> None:
    # its job pulls for itself, no quota-bound pull job ahead (and a laptop's home is its disk)
    [resolved] = pulling(tmp_path, home / "runs", kind="local")
    assert [i for i in preflight(resolved, environ={}) if i.path == "execution.output_dir"] == []


def _failed_pull_run(tmp_path: Path, fake: FakeSlurm, output_dir: Path) -> Path:
    """A run submitted with its output_dir outside home (or by an hpceval before the check),
    whose pull job failed: resume would submit the pull job again."""
    result = submit_configs(pulling(tmp_path, output_dir), fake)
    fake.states.update({s["id"]: "FAILED" for s in fake.submits})
    return result.run_dir


def test_resume_refuses_to_pull_into_home_too(tmp_path: Path, home: Path, fake: FakeSlurm,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """hpceval resume submits the pull job again when an image is missing: into the run's
    images/ folder, which is in the home folder of the user who resumes (a run submitted under
    another $HOME, or before submit checked it). The same check as submit's, before anything
    is submitted."""
    run_dir = _failed_pull_run(tmp_path, fake, tmp_path / "runs")
    monkeypatch.setenv("HOME", str(tmp_path))  # the run is now in the home folder
    submitted = len(fake.submits)
    with pytest.raises(ResumeRefused) as err:
        resume_run(find_run(run_dir.name), fake)
    assert len(fake.submits) == submitted  # nothing queued
    message = str(err.value)
    assert f"{run_dir} is in your home folder ({tmp_path})" in message, message
    assert f"would pull {FILE} into the run's images/ folder there" in message, message
    assert "hpceval stage" in message and "symlink" in message, message


def test_resume_under_home_pulls_nothing_and_resumes(tmp_path: Path, home: Path,
                                                     fake: FakeSlurm,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # the image is there (put in place by the user, a symlink to a copy on scratch): no pull
    run_dir = _failed_pull_run(tmp_path, fake, tmp_path / "runs")
    staged = tmp_path / "scratch" / FILE
    staged.parent.mkdir()
    staged.write_bytes(b"image")
    (run_dir / "images").mkdir(exist_ok=True)
    (run_dir / "images" / FILE).symlink_to(staged)
    monkeypatch.setenv("HOME", str(tmp_path))
    resume_run(find_run(run_dir.name), fake)
    assert [s["script"].name for s in fake.submits][-1:] == ["job.sbatch"]


def test_submit_and_resume_ask_one_function(tmp_path: Path, home: Path, fake: FakeSlurm,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # the module (hpceval.staging's name `preflight` is its function)
    checks = importlib.import_module("hpceval.staging.preflight")
    asked: list[tuple[Path, tuple[str, ...]]] = []
    rule = checks.home_pull_problem

    def spy(folder: Path, pulled: Sequence[str]) -> str | None:
        asked.append((Path(folder), tuple(pulled)))
        return rule(folder, pulled)

    monkeypatch.setattr(checks, "home_pull_problem", spy)
    run_dir = _failed_pull_run(tmp_path, fake, tmp_path / "runs")
    assert asked == [(tmp_path / "runs", (IMAGE,))]  # submit: the output_dir, the references
    resume_run(find_run(run_dir.name), fake)
    assert asked[1:] == [(run_dir, (FILE,))]  # resume: the run directory, its missing files
