"""The reader of a sweep judge's record (hpceval.job.judge_endpoint) reads through the one trust
rule's reader (hpceval.trust.read_trusted): what is read is what was checked, a link or a FIFO
in place of either file is refused at once, the token is private, and the folders above are not
judged (a run directory may sit in a project folder its group can write). The refusals as the
element's job script and the judge proxy see them are test_sweep_judge_consumer.py's and
test_judge_successor.py's."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hpceval import trust
from hpceval.contract import AUX_ENDPOINT_FILE, AUX_TOKEN_FILE
from hpceval.job.judge_endpoint import (
    MAX_BYTES,
    EndpointMissing,
    EndpointUntrusted,
    read_endpoint,
)


def publish(folder: Path, urls: list[str], token: str = "s3cret") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / AUX_TOKEN_FILE).write_text(token + "\n")
    (folder / AUX_TOKEN_FILE).chmod(0o600)
    (folder / AUX_ENDPOINT_FILE).write_text(json.dumps({"urls": urls, "job_id": "7"}))
    (folder / AUX_ENDPOINT_FILE).chmod(0o644)


def test_a_record_swapped_after_its_check_is_not_what_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    publish(tmp_path, ["http://n1:8000"])
    planted = tmp_path / "planted.json"
    planted.write_text(json.dumps({"urls": ["http://evil:1"]}))
    planted.chmod(0o644)
    real_fstat, checked = os.fstat, (tmp_path / AUX_ENDPOINT_FILE).stat().st_ino

    def swap_then_fstat(fd: int) -> os.stat_result:
        result = real_fstat(fd)
        if result.st_ino == checked and planted.exists():
            os.replace(planted, tmp_path / AUX_ENDPOINT_FILE)  # right after the check's stat
        return result

    monkeypatch.setattr(trust.os, "fstat", swap_then_fstat)
    record = read_endpoint(tmp_path)
    assert not planted.exists(), "the swap happened"
    assert record.urls == ("http://n1:8000",) and record.token == "s3cret"


@pytest.mark.parametrize("name", [AUX_TOKEN_FILE, AUX_ENDPOINT_FILE])
def test_a_link_or_a_fifo_in_place_of_either_file_is_refused_at_once(tmp_path: Path,
                                                                     name: str) -> None:
    judge = tmp_path / "judge"
    publish(judge, ["http://n1:8000"])
    publish(tmp_path / "elsewhere", ["http://n1:8000"])  # the user's own, trusted files
    (judge / name).unlink()
    (judge / name).symlink_to(tmp_path / "elsewhere" / name)
    with pytest.raises(EndpointUntrusted) as refused:
        read_endpoint(judge)
    assert str(refused.value) == f"{judge / name} is a symbolic link: not trusted"
    (judge / name).unlink()
    os.mkfifo(judge / name, 0o600)  # no writer: a reader that opened it would wait for ever
    with pytest.raises(EndpointUntrusted) as refused:
        read_endpoint(judge)
    assert str(refused.value) == f"{judge / name} is not a plain file: not trusted"


def test_a_missing_file_is_waited_for_and_a_huge_one_refused(tmp_path: Path) -> None:
    with pytest.raises(EndpointMissing, match="is not there yet"):
        read_endpoint(tmp_path / "not-made-yet")
    publish(tmp_path, ["http://n1:8000"])
    (tmp_path / AUX_ENDPOINT_FILE).unlink()
    with pytest.raises(EndpointMissing, match=f"{AUX_ENDPOINT_FILE} is not there yet"):
        read_endpoint(tmp_path)
    (tmp_path / AUX_ENDPOINT_FILE).write_text(json.dumps({"urls": ["http://n1:8000"],
                                                          "pad": "x" * MAX_BYTES}))
    with pytest.raises(EndpointUntrusted, match=f"is larger than {MAX_BYTES} bytes"):
        read_endpoint(tmp_path)


def test_a_record_in_a_folder_its_group_can_write_is_read(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    project.chmod(0o2770)  # a setgid project folder, the run directory inside it
    publish(project / "run" / "auxiliary" / "judge", ["http://n1:8000"])
    assert read_endpoint(project / "run" / "auxiliary" / "judge").urls == ("http://n1:8000",)
