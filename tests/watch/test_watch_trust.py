"""A watch on a folder others can write (review shared-cluster F4): a real second uid
(`runuser -u nobody`) plants checkpoint folders, symlinks and markers; the watch evaluates only
what its own user (or a --trust-owner) owns, shows the rest as ignored with the owner named,
warns at start about the folder's mode, and submits at most max_per_tick a tick.

Ticks run the real submit path against the counting FakeSlurm (as in test_watch.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from second_user import NOBODY_UID, as_nobody, shared_scratch
from support.slurm import FakeSlurm
from support.watches import options, started, write_ckpt

from hpceval.watch import state as st
from hpceval.watch.control import start_watch
from hpceval.watch.status import format_watch, watch_status
from hpceval.watch.tick import run_tick

NOBODY = NOBODY_UID


@pytest.fixture
def shared_ckpts() -> Iterator[Path]:
    """A 1777 checkpoints folder (a scratch folder everyone may write) that nobody can reach."""
    with shared_scratch("hpceval-watch-trust-") as base:
        ckpts = base / "ckpts"
        ckpts.mkdir()
        ckpts.chmod(0o1777)
        yield ckpts


def plant(ckpts: Path, name: str, *, marker: bool = True) -> Path:
    """nobody's checkpoint folder: weights and the marker, all theirs."""
    path = ckpts / name
    as_nobody("mkdir", str(path))
    as_nobody("sh", "-c", f"echo forged > '{path}/model.safetensors'")
    if marker:
        as_nobody("touch", str(path / "COMPLETE"))
    assert path.stat().st_uid == NOBODY
    return path


def evals(fake: FakeSlurm) -> list[Path]:
    return [s["script"] for s in fake.submits if s["script"].name == "job.sbatch"]


def test_a_folder_planted_by_another_user_is_ignored_and_shown_with_its_owner(
        tmp_path: Path, fake: FakeSlurm, shared_ckpts: Path) -> None:
    watch_dir = started(tmp_path, fake, marker="COMPLETE", checkpoints=str(shared_ckpts))
    write_ckpt(shared_ckpts, "step_100", {"COMPLETE": "", "w": "1"})  # the user's own
    plant(shared_ckpts, "step_999")
    report = run_tick(watch_dir, client=fake)
    assert report.submitted == ["step_100"] and report.new == ["step_100"]
    assert "ignored step_999: owned by nobody (uid 65534)" in report.lines()
    assert len(evals(fake)) == 1
    assert "step_999" not in st.load_state(watch_dir).checkpoints
    text = format_watch(watch_status(watch_dir, fake))
    assert "ignored step_999: owned by nobody (uid 65534), not by you" in text
    assert run_tick(watch_dir, client=fake).submitted == []  # and at every later tick


def test_a_symlink_planted_by_another_user_is_ignored_even_to_the_users_own_weights(
        tmp_path: Path, fake: FakeSlurm, shared_ckpts: Path) -> None:
    # the victim's private model, reachable by path: the link is nobody's, its target root's
    private = write_ckpt(shared_ckpts.parent / "private", "model", {"COMPLETE": "", "w": "1"})
    watch_dir = started(tmp_path, fake, marker="COMPLETE", checkpoints=str(shared_ckpts))
    as_nobody("ln", "-s", str(private), str(shared_ckpts / "step_7"))
    # and the other way round: the user's own link to a folder nobody owns
    theirs = plant(shared_ckpts, "theirs")  # outside the pattern: not a checkpoint itself
    (shared_ckpts / "step_8").symlink_to(theirs)
    report = run_tick(watch_dir, client=fake)
    assert report.submitted == [] and evals(fake) == []
    assert sorted(report.foreign) == ["step_7: owned by nobody (uid 65534)",
                                      "step_8: owned by nobody (uid 65534)"]
    # the user's own link to their own folder still counts (how some trainers link)
    (shared_ckpts / "step_9").symlink_to(private)
    assert run_tick(watch_dir, client=fake).submitted == ["step_9"]


def test_a_marker_written_by_another_user_does_not_complete_the_users_checkpoint(
        tmp_path: Path, fake: FakeSlurm, shared_ckpts: Path) -> None:
    watch_dir = started(tmp_path, fake, marker="COMPLETE", checkpoints=str(shared_ckpts))
    ckpt = write_ckpt(shared_ckpts, "step_5", {"w": "half"})
    ckpt.chmod(0o777)  # a group-writable checkpoint folder: others may add files
    as_nobody("touch", str(ckpt / "COMPLETE"))
    report = run_tick(watch_dir, client=fake)
    assert report.submitted == [] and report.pending == ["step_5"]
    os.unlink(ckpt / "COMPLETE")
    (ckpt / "COMPLETE").write_text("")  # the training job's own marker
    assert run_tick(watch_dir, client=fake).submitted == ["step_5"]


def test_trust_owner_admits_another_users_checkpoints(
        tmp_path: Path, fake: FakeSlurm, shared_ckpts: Path) -> None:
    from hpceval.watch.trust import resolve_owners

    assert resolve_owners(["nobody", str(NOBODY)]) == (NOBODY,)
    watch_dir = started(tmp_path, fake, marker="COMPLETE", checkpoints=str(shared_ckpts),
                        trust_uids=resolve_owners(["nobody"]))
    plant(shared_ckpts, "step_3")
    report = run_tick(watch_dir, client=fake)
    assert report.submitted == ["step_3"] and report.foreign == []


def test_watch_start_warns_about_a_folder_others_can_write(
        tmp_path: Path, fake: FakeSlurm, shared_ckpts: Path) -> None:
    result = start_watch(options(tmp_path, marker="COMPLETE", checkpoints=str(shared_ckpts)),
                         client=fake)
    assert len(result.warnings) == 1, result.warnings
    assert f"{shared_ckpts} is writable by its group and others (mode 1777)" \
        in result.warnings[0]
    private = tmp_path / "private-ckpts"
    private.mkdir(mode=0o755)
    private.chmod(0o755)
    quiet = start_watch(options(tmp_path, marker="COMPLETE", checkpoints=str(private)),
                        client=fake)
    assert quiet.warnings == ()


def test_cli_start_prints_the_warning_and_refuses_an_unknown_trust_owner(
        tmp_path: Path, fake: FakeSlurm, shared_ckpts: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from support.runs import write_run_file

    from hpceval.cli.main import cli

    run_file = write_run_file(tmp_path)
    base = ["watch", "start", str(run_file), "--profile", "local-dev", "--checkpoints",
            str(shared_ckpts), "--marker", "COMPLETE", "--dry-run"]
    result = CliRunner().invoke(cli, base)
    assert result.exit_code == 0, result.output
    assert "warning: --checkpoints" in result.stderr and "mode 1777" in result.stderr
    bad = CliRunner().invoke(cli, [*base, "--trust-owner", "no-such-user-hpceval"])
    assert bad.exit_code == 2, bad.output
    assert "--trust-owner" in bad.stderr and "no user 'no-such-user-hpceval'" in bad.stderr


def test_submissions_per_tick_are_capped_and_the_rest_wait_for_the_next_tick(
        tmp_path: Path, fake: FakeSlurm) -> None:
    watch_dir = started(tmp_path, fake, marker="COMPLETE", max_per_tick=2)
    for step in (1, 2, 3, 4, 5):
        write_ckpt(tmp_path / "ckpts", f"step_{step}", {"COMPLETE": "", "w": "1"})
    report = run_tick(watch_dir, client=fake)
    assert report.submitted == ["step_1", "step_2"]
    assert report.deferred == ["step_3", "step_4", "step_5"]
    assert report.pending == ["step_3", "step_4", "step_5"]  # the watch may not end on them
    assert ("left for the next tick (at most 2 submissions a tick): step_3, step_4, step_5"
            in report.lines())
    assert len(evals(fake)) == 2 and fake.submits[-1]["script"].name == "tick.sbatch"
    assert run_tick(watch_dir, client=fake).submitted == ["step_3", "step_4"]
    assert run_tick(watch_dir, client=fake).submitted == ["step_5"]
    assert len(evals(fake)) == 5


def test_watch_start_warns_about_a_folder_another_user_owns_or_one_inside_a_writable_folder(
        tmp_path: Path, fake: FakeSlurm) -> None:
    """Not writable by others itself, but theirs (they can put anything there), or inside a
    folder others can write (they can swap it whole): both are warned about at start."""
    with shared_scratch("hpceval-watch-owner-") as base:
        theirs = base / "theirs"
        theirs.mkdir(mode=0o755)
        os.chown(theirs, NOBODY, NOBODY)
        result = start_watch(options(tmp_path, marker="COMPLETE", checkpoints=str(theirs)),
                             client=fake)
        assert result.warnings == (
            f"--checkpoints {theirs} is owned by nobody (uid 65534), not by you or root, who "
            "can put anything there: only checkpoints owned by you (or by a --trust-owner) are "
            "evaluated; the others show as ignored in `hpceval status WATCH`",)
        trusting = start_watch(options(tmp_path, marker="COMPLETE", checkpoints=str(theirs),
                                       trust_uids=(NOBODY,)), client=fake)
        assert trusting.warnings == ()
        project = base / "project"
        project.mkdir()
        project.chmod(0o775)  # group-writable, no sticky bit
        (project / "ckpts").mkdir(mode=0o755)
        inside = start_watch(options(tmp_path, marker="COMPLETE",
                                     checkpoints=str(project / "ckpts")), client=fake)
        assert len(inside.warnings) == 1
        assert (f"--checkpoints {project / 'ckpts'} is in a folder others can write (its "
                f"folder {project} is writable by other users (mode 775)") in inside.warnings[0]
