"""ONE trust rule (hpceval/trust.py): "owned by you (or root, or a named uid), not writable by
group or other, folders above too". Profiles, judge records, run directories given by path and
a run's scripts all refuse a file another uid owns with the same words, naming the file and its
owner; no other module tests owners or write bits itself."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import hpceval
from hpceval.config.errors import ConfigError
from hpceval.config.profiles import find_file
from hpceval.contract import AUX_ENDPOINT_FILE, AUX_TOKEN_FILE, RUN_FILE
from hpceval.job.judge_endpoint import EndpointUntrusted, read_endpoint
from hpceval.records import RunRecord
from hpceval.runs.index import RunNotFound, find_run
from hpceval.runs.rundir import changed_scripts
from hpceval.trust import owner_name, untrusted

NOBODY = 65534
OWNER = "owned by nobody (uid 65534), not by you"

# Owner comparisons and permission bits: hpceval/trust.py decides them, nobody else.
RULE_WORDS = re.compile(r"S_IWGRP|S_IWOTH|S_IRWXG|S_IRWXO|getpwuid|st_uid\s*(==|!=|not in|in)"
                        r"|gete?uid\(\)\s*(==|!=)")


def test_no_module_but_trust_tests_owners_or_write_bits() -> None:
    root = Path(hpceval.__file__).parent
    offenders = [f"{path.relative_to(root.parent)}:{n}: {line.strip()}"
                 for path in sorted(root.rglob("*.py")) if path.name != "trust.py"
                 for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if RULE_WORDS.search(line)]
    assert offenders == []


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("making a file another user owns needs root")
    return tmp_path


def _chown(path: Path) -> Path:
    os.chown(path, NOBODY, NOBODY)
    return path


def test_a_profile_another_uid_owns_is_refused_naming_file_and_owner(foreign: Path) -> None:
    profile = foreign / "site.yaml"
    profile.write_text("execution: {type: local}\n")
    _chown(profile)
    with pytest.raises(ConfigError) as err:
        find_file(str(profile), "profile")
    assert f"refusing profile file {profile}: it is {OWNER} or root" in str(err.value)


def test_a_judge_record_another_uid_owns_is_refused_with_the_same_words(foreign: Path) -> None:
    (foreign / AUX_TOKEN_FILE).write_text("t")
    (foreign / AUX_TOKEN_FILE).chmod(0o600)
    (foreign / AUX_ENDPOINT_FILE).write_text('{"urls": ["http://n:1"]}')
    _chown(foreign / AUX_ENDPOINT_FILE)
    with pytest.raises(EndpointUntrusted) as err:
        read_endpoint(foreign)
    assert f"{foreign / AUX_ENDPOINT_FILE} is {OWNER}" in str(err.value)


def test_a_run_directory_and_a_script_another_uid_owns_are_named_with_the_same_words(
        foreign: Path) -> None:
    run_dir = foreign / "run"
    run_dir.mkdir()
    (run_dir / RUN_FILE).write_text("{}")
    _chown(run_dir / RUN_FILE)
    with pytest.raises(RunNotFound) as err:
        find_run(str(run_dir))
    assert f"its {RUN_FILE} is {OWNER}" in str(err.value)
    (run_dir / "job.sbatch").write_text("#!/bin/bash\n")
    _chown(run_dir / "job.sbatch")
    record = RunRecord.from_json({"scripts_sha256": {"job.sbatch": "x"}}, run_dir / RUN_FILE)
    assert changed_scripts(run_dir, record) == [
        f"job.sbatch is {OWNER}"]


def test_write_bits_and_folders(tmp_path: Path) -> None:
    own = tmp_path / "mine"
    own.mkdir()
    own.chmod(0o700)
    file = own / "f.yaml"
    file.write_text("")
    file.chmod(0o600)
    assert untrusted(file) is None
    file.chmod(0o620)
    assert "is writable by other users (mode 620), owned by" in (untrusted(file) or "")
    file.chmod(0o600)
    own.chmod(0o770)
    assert (untrusted(file) or "").startswith(f"its folder {own} is writable by other users "
                                              "(mode 770)")
    assert untrusted(file, folders=False) is None


@pytest.mark.parametrize(("mode", "depth"), [(0o777, 2), (0o775, 3)])
def test_a_writable_folder_further_up_is_refused(tmp_path: Path, mode: int, depth: int) -> None:
    """No folder above the file may be writable by group or other, not only its own: whoever
    can write a shared project folder two or three levels up can rename `mine` away and put a
    folder of theirs, with a profile of theirs, in its place."""
    project = tmp_path / "project"
    own = project / "mine"
    for _ in range(depth - 2):
        own = own / "deeper"
    own.mkdir(parents=True)
    for folder in (own, *own.relative_to(project).parents):
        (project / folder).chmod(0o700)
    project.chmod(mode)
    file = own / "f.yaml"
    file.write_text("")
    file.chmod(0o600)
    assert (untrusted(file) or "").startswith(
        f"its folder {project} is writable by other users (mode {mode:o})")
    project.chmod(0o700)
    assert untrusted(file) is None


def test_a_directory_is_checked_without_following_links_and_for_whose_it_is(
        tmp_path: Path) -> None:
    from hpceval.trust import dir_problem, owned_dir

    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    file = tmp_path / "file"
    file.write_text("")
    assert dir_problem(real) is None and owned_dir(real)
    assert dir_problem(link) == "is a symbolic link" and not owned_dir(link)
    assert dir_problem(file) == "is not a directory"
    assert dir_problem(tmp_path / "missing") == "cannot be read: No such file or directory"
    me = os.getuid()
    assert owned_dir(real, me) and not owned_dir(real, NOBODY)
    assert dir_problem(real, NOBODY) == f"is owned by {owner_name(me)}, not by you"


def test_a_plain_files_owner_is_its_own_not_a_links(tmp_path: Path) -> None:
    from hpceval.trust import foreign_owner

    file = tmp_path / "f"
    file.write_text("")
    me = os.getuid()
    assert foreign_owner(file, {me}) is None
    assert foreign_owner(file, {NOBODY}) == me
    assert foreign_owner(tmp_path / "missing", {NOBODY}) is None
    if me == 0:  # a file another uid owns behind a link of ours: the target's owner counts
        theirs = tmp_path / "theirs"
        theirs.write_text("")
        os.chown(theirs, NOBODY, NOBODY)
        link = tmp_path / "link"
        link.symlink_to(theirs)
        assert foreign_owner(link, {me}) == NOBODY


def _st(uid: int, mode: int) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, 0, 0, 0, 0, 0))


def test_the_stat_rule_for_root_group_writers_secrets_and_plain_files() -> None:
    from hpceval.trust import stat_problem

    me = os.getuid()
    assert stat_problem(_st(0, 0o100644), {NOBODY}, root=True) is None  # root's, allowed
    assert stat_problem(_st(1, 0o100644), {NOBODY}, root=True) == \
        f"is owned by {owner_name(1)}, not by you or root"
    group = _st(me, 0o100660)
    assert stat_problem(group, group_write=True) is None  # a setgid project folder's file
    assert (stat_problem(group) or "").startswith("is writable by other users (mode 660)")
    assert stat_problem(_st(me, 0o100602), group_write=True) is not None  # others: never
    assert stat_problem(_st(me, 0o100640), private=True) == \
        "is readable by other users (mode 640; a secret is 0600)"
    assert stat_problem(_st(me, 0o100604), private=True) is not None
    assert stat_problem(_st(me, 0o100600), private=True) is None
    assert stat_problem(_st(me, 0o040700), plain=True) == "is not a plain file"
