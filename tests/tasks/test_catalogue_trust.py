"""User task catalogues get hpceval.trust's rule (issue 24): a catalogue's harness and task
command templates run as the user in the job, so a file on $HPCEVAL_TASKS_PATH (or in
~/.config/hpceval/tasks) that another uid (`runuser -u nobody`) planted, or a folder others can
write, is refused naming the file and its owner; the catalogue's JSON index is not read from a
cache folder others can write (its key is computable from stat(), so anyone could plant one)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from second_user import as_nobody, shared_scratch

from hpceval.tasks import CatalogueError, load_catalogue, loader

PLANTED = """\
harness: lm-eval-upstream
tasks:
  - name: planted_task
    endpoint_type: completions
    description: planted by another uid
"""


@pytest.fixture
def shared(home: Path) -> Iterator[Path]:
    """A 1777 folder (a shared scratch area) that nobody can write into."""
    with shared_scratch("hpceval-catalogues-") as base:
        (base / "shared").mkdir()
        (base / "shared").chmod(0o1777)
        yield base / "shared"


def _plant(path: Path, text: str) -> Path:
    staging = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        staging.chmod(0o755)
        (staging / "f").write_text(text)
        (staging / "f").chmod(0o644)
        as_nobody("cp", str(staging / "f"), str(path))
    finally:
        shutil.rmtree(staging)
    assert path.stat().st_uid == 65534
    return path


def test_a_catalogue_another_uid_planted_on_the_tasks_path_is_refused(
        shared: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    planted = _plant(shared / "site.yaml", PLANTED)
    monkeypatch.setenv("HPCEVAL_TASKS_PATH", str(planted))  # a path may name one file
    with pytest.raises(CatalogueError) as err:
        load_catalogue()
    assert (f"{planted}: refusing this task catalogue: it is owned by nobody (uid 65534), not "
            "by you or root") in str(err.value)
    assert "planted_task" not in str(err.value)


def test_the_users_own_catalogue_in_a_folder_others_can_write_is_refused(
        shared: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ours = shared / "ours.yaml"
    ours.write_text(PLANTED)  # the user's own file, but anyone may swap it: 1777, not sticky-safe
    monkeypatch.setenv("HPCEVAL_TASKS_PATH", str(shared))
    with pytest.raises(CatalogueError, match=rf"{ours}: refusing this task catalogue: its "
                                             rf"folder {shared} is writable by other users"):
        load_catalogue()
    private = home / "site-tasks"
    private.mkdir(mode=0o755)
    (private / "ours.yaml").write_text(PLANTED)
    (private / "ours.yaml").chmod(0o664)  # group-writable file
    monkeypatch.setenv("HPCEVAL_TASKS_PATH", str(private))
    loader.clear_memory_cache()
    with pytest.raises(CatalogueError, match="is writable by other users \\(mode 664\\)"):
        load_catalogue()
    (private / "ours.yaml").chmod(0o644)
    loader.clear_memory_cache()
    assert load_catalogue().resolve("planted_task").task.source == str(private / "ours.yaml")


def test_an_index_another_uid_planted_in_a_shared_cache_folder_is_not_read(
        shared: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCEVAL_CACHE_DIR", str(shared))
    user_paths = loader.user_catalogue_paths()
    files = loader.catalogue_files(user_paths)
    index = loader.build_index(files)
    index["tasks"][0]["description"] = "PLANTED BY NOBODY"
    index["key"] = loader.index_key(files, user_paths)  # anyone can compute it
    _plant(shared / "tasks-index.json", json.dumps(index))
    loader.clear_memory_cache()
    assert all(t.description != "PLANTED BY NOBODY" for t in load_catalogue().tasks)
    # the same index, the user's own in a private cache folder, is read (the cache works)
    private = shared.parent / "cache"
    private.mkdir(mode=0o700)
    (private / "tasks-index.json").write_text(json.dumps(index))
    monkeypatch.setenv("HPCEVAL_CACHE_DIR", str(private))
    loader.clear_memory_cache()
    assert any(t.description == "PLANTED BY NOBODY" for t in load_catalogue().tasks)
    os.unlink(private / "tasks-index.json")


def test_a_catalogue_is_parsed_from_the_descriptor_its_trust_was_checked_on(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """shared-cluster-4 N2: checked by path, then read by path again, a file swapped between
    the two was parsed unchecked. The swap here comes right after the check on the open file."""
    private = home / "site-tasks"
    private.mkdir(mode=0o755)
    ours = private / "ours.yaml"
    ours.write_text(PLANTED)
    ours.chmod(0o644)
    swapped = private / ".swap"
    swapped.write_text(PLANTED.replace("planted_task", "swapped_task"))
    monkeypatch.setenv("HPCEVAL_TASKS_PATH", str(private))
    real_fstat = os.fstat

    def swap_after_check(fd: int) -> os.stat_result:
        result = real_fstat(fd)
        if swapped.exists() and os.path.samestat(result, ours.stat()):
            os.replace(swapped, ours)
        return result

    monkeypatch.setattr("hpceval.trust.os.fstat", swap_after_check)
    loader.clear_memory_cache()
    monkeypatch.setenv("HPCEVAL_CACHE_DIR", str(home / "cache"))
    names = {t.name for t in load_catalogue().tasks}
    assert not swapped.exists(), "the swap happened"
    assert "planted_task" in names and "swapped_task" not in names


def test_a_malformed_user_catalogue_is_left_out_with_a_warning_not_fatal(
        home: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """shared-cluster-4 N9: one file missing a description made every command exit 1,
    unrelated runs included. It is left out, named with its key path; the rest loads."""
    folder = home / "site-tasks"
    folder.mkdir(mode=0o755)
    (folder / "good.yaml").write_text(PLANTED)
    (folder / "broken.yaml").write_text(PLANTED.replace("planted_task", "broken_task").replace(
        "    description: planted by another uid\n", ""))
    (folder / "clash.yaml").write_text(PLANTED)  # sorted before good.yaml: good's task clashes
    for name in ("good.yaml", "broken.yaml", "clash.yaml"):
        (folder / name).chmod(0o644)
    monkeypatch.setenv("HPCEVAL_TASKS_PATH", str(folder))
    monkeypatch.setenv("HPCEVAL_CACHE_DIR", str(home / "cache"))
    for _ in range(2):  # built, then from the on-disk index: warned both times
        loader.clear_memory_cache()
        caplog.clear()
        with caplog.at_level("WARNING", logger="hpceval.tasks.loader"):
            catalogue = load_catalogue()
        assert catalogue.resolve("planted_task").task.source == str(folder / "clash.yaml")
        assert "broken_task" not in {t.name for t in catalogue.tasks}
        warned = caplog.text
        assert f"task catalogue {folder / 'broken.yaml'} left out" in warned
        assert "description" in warned
        assert f"task catalogue {folder / 'good.yaml'} left out" in warned  # the clash
        assert warned.count("left out") == 2, warned
