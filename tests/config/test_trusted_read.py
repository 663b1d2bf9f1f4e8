"""shared-cluster-4 N2: a profile is checked on the descriptor it is read from.

The review planted a link in a writable folder of the search path, pointing at a trusted file,
and retargeted it between the check (which resolved the link) and the read (which opened the
path again): the attacker's `pre_commands` ran as the victim on the 7th submit. Now the file is
opened once (its last step without following a link), checked with fstat and read from that
descriptor, and the folder holding the NAME counts as well as the folders of its target. The
races are made deterministic here by swapping the file at the exact moment between two steps.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from hpceval import trust
from hpceval.config.errors import ConfigError
from hpceval.config.profiles import find_file
from hpceval.trust import Untrusted, read_trusted

TRUSTED = {"execution": {"type": "local", "gpus_per_node": 0}}
HOSTILE = {"execution": {"type": "local", "pre_commands": ["id > pwned"]}}


@pytest.fixture
def private(tmp_path: Path) -> Path:
    folder = tmp_path / "mine"
    folder.mkdir(mode=0o700)
    tmp_path.chmod(0o755)
    return folder


def _write(path: Path, data: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump(data))
    path.chmod(0o644)
    return path


def test_a_file_swapped_after_its_check_is_not_what_is_read(
        private: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = _write(private / "site.yaml", TRUSTED)
    hostile = _write(private / "hostile.yaml", HOSTILE)
    real_fstat = os.fstat

    def swap_then_fstat(fd: int) -> os.stat_result:
        result = real_fstat(fd)
        if hostile.exists():
            os.replace(hostile, profile)  # the attacker's move, right after the check's stat
        return result

    monkeypatch.setattr(trust.os, "fstat", swap_then_fstat)
    raw = read_trusted(profile, limit=1 << 20)
    # what was checked is what was read: the file the descriptor holds, not the new one
    assert yaml.safe_load(raw) == TRUSTED
    assert yaml.safe_load(profile.read_text()) == HOSTILE


def test_a_link_put_in_place_of_the_file_after_resolving_is_refused(
        private: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = _write(private / "site.yaml", TRUSTED)
    hostile = _write(private / "hostile.yaml", HOSTILE)
    real_open = os.open

    def swap_then_open(path: str | os.PathLike[str], flags: int, *args: int) -> int:
        if Path(path) == profile:
            profile.unlink()
            profile.symlink_to(hostile)  # the name now a link, between resolve and open
        return real_open(path, flags, *args)

    monkeypatch.setattr(trust.os, "open", swap_then_open)
    with pytest.raises(Untrusted, match="cannot be read: Too many levels of symbolic links"):
        read_trusted(profile, limit=1 << 20)


def test_a_link_in_a_folder_others_can_write_is_refused_wherever_it_points(
        private: Path, tmp_path: Path) -> None:
    target = _write(private / "site.yaml", TRUSTED)  # trusted itself
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    link = shared / "site.yaml"
    link.symlink_to(target)
    with pytest.raises(Untrusted, match=rf"its folder {shared} is writable by other users"):
        read_trusted(link, limit=1 << 20)
    with pytest.raises(ConfigError, match=rf"refusing profile file {link}: its folder {shared}"):
        find_file(str(link), "profile")
    # the same link in the user's own folder reads the file
    own = private / "link.yaml"
    own.symlink_to(target)
    assert find_file(str(own), "profile").data == TRUSTED


def test_a_fifo_is_refused_without_waiting_for_a_writer(private: Path) -> None:
    fifo = private / "site.yaml"
    os.mkfifo(fifo, 0o644)
    with pytest.raises(Untrusted, match="is not a plain file"):
        read_trusted(fifo, limit=1 << 20)


def test_the_options_a_judges_record_reads_with(private: Path, tmp_path: Path) -> None:
    """read_trusted for a file that must be private (a token), whose name must not be a link
    (a job's own record), and whose folders are not judged; the refusal names the file as its
    subject (Untrusted.about) and says when it is only missing (a caller waits for it)."""
    token = private / "token"
    token.write_text("s3cret")
    token.chmod(0o640)
    assert read_trusted(token, limit=64) == b"s3cret"
    with pytest.raises(Untrusted) as refused:
        read_trusted(token, limit=64, private=True)
    assert refused.value.about(token) == \
        f"{token} is readable by other users (mode 640; a secret is 0600)"
    token.chmod(0o600)
    assert read_trusted(token, limit=64, private=True) == b"s3cret"
    link = private / "link"
    link.symlink_to(token)
    assert read_trusted(link, limit=64) == b"s3cret"  # a link of the user's own: resolved
    with pytest.raises(Untrusted) as refused:
        read_trusted(link, limit=64, links=False)
    assert str(refused.value) == "it is a symbolic link" and not refused.value.missing
    with pytest.raises(Untrusted) as refused:
        read_trusted(private / "not-yet", limit=64, links=False)
    assert refused.value.missing and str(refused.value) == \
        "it cannot be read: No such file or directory"
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o770)
    record = shared / "endpoint.json"
    record.write_text("{}")
    record.chmod(0o644)
    with pytest.raises(Untrusted) as refused:
        read_trusted(record, limit=64)
    assert not refused.value.own and refused.value.about(record).startswith(
        f"{record}: its folder {shared} is writable by other users")
    assert read_trusted(record, limit=64, folders=False) == b"{}"
