"""runtime.json as the views read it (results.runtime_view): the proxy's own file is shown as
it is; a missing, truncated, huge, deep, non-numeric, linked, special or foreign file is unknown
with the reason, and nothing of it is used (read_runtime, and so the flags, see None)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from hpceval.results import runtime, runtime_view
from hpceval.results.runtime import TaskStats, read_runtime, write_runtime
from hpceval.results.runtime_text import cells, extra_headers, task_line, total_line
from hpceval.results.runtime_view import (
    MISSING,
    READ_LIMIT,
    Runtime,
    live_tokens_per_s,
    load_runtime,
    totals,
)


def proxy_stats() -> dict[str, Any]:
    """What the proxy writes for a small task (TaskStats itself, not a hand-made copy)."""
    stats = TaskStats()
    answer = {"choices": [{"finish_reason": "stop", "message": {"content": "4"}}],
              "usage": {"prompt_tokens": 100, "completion_tokens": 20}}
    for i in range(4):
        stats.record(200, 0.2 + i / 10, i == 3, answer)
    stats.record(500, 0.1, False, None)
    return stats.to_json()


def write(folder: Path, content: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "runtime.json"
    path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    return path


def unknown(folder: Path) -> str:
    found = load_runtime(str(folder))
    assert found.facts is None and read_runtime(str(folder)) is None
    assert found.problem is not None and found.to_json() == {"unknown": found.problem}
    return found.problem


def test_the_proxy_file_is_shown_as_written(tmp_path: Path) -> None:
    data = proxy_stats()
    write_runtime(tmp_path, data)
    found = load_runtime(str(tmp_path))
    assert found.facts == data and read_runtime(str(tmp_path)) == data
    assert found.mtime is not None and found.problem is None
    assert runtime_view.SCHEMA == runtime.SCHEMA  # one schema: the writer's
    line = task_line(found)
    assert line.startswith("5 requests (1 cached, 1 errors), latency p50/p90/p99 ")
    assert "400 prompt / 80 completion tokens, finish stop 4" in line


def test_missing_is_unknown_but_not_a_problem_to_show_everywhere(tmp_path: Path) -> None:
    found = load_runtime(str(tmp_path / "never-started"))
    assert found.missing and found.problem == MISSING and found.to_json() is None
    assert load_runtime(str(write(tmp_path / "t", {}).parent / "runtime.json")).missing


@pytest.mark.parametrize("content, why", [
    (b'{"schema": 1, "requests": 12', "is not valid JSON (truncated?)"),
    (b"\xff\xfe\x00garbage", "is not valid JSON"),
    (b"[" * 200_000 + b"]" * 200_000, "not valid JSON"),
    (b"[1, 2]", "is list, not a JSON object"),
    ({"schema": 2, "requests": 1}, "has schema 2; this hpceval reads schema 1"),
    ({"schema": True, "requests": 1}, "has schema true"),
    ({"requests": 1}, "has schema null"),
    ({"schema": 1, "requests": "12"}, 'has requests = "12", not a number'),
    ({"schema": 1, "requests": True}, "has requests = true, not a number"),
    ({"schema": 1, "requests": 1.5}, "has requests = 1.5, not a whole number"),
    ({"schema": 1, "errors": -3}, "has errors = -3, below 0"),
    (b'{"schema": 1, "tokens_per_s": NaN}', "has tokens_per_s = nan, not a finite number"),
    (b'{"schema": 1, "tokens_per_s": 1e999}', "not a finite number"),
    ({"schema": 1, "latency_ms": {"p50": "fast"}}, 'has latency_ms.p50 = "fast"'),
    ({"schema": 1, "latency_ms": [1, 2]}, "has latency_ms = list, not an object of numbers"),
    ({"schema": 1, "finish_reasons": {"stop": "many"}}, 'finish_reasons.stop = "many"'),
    ({"schema": 1, "updated": {"x": 1}}, "has updated = dict, not a short text"),
    ({"schema": 1, "requests": "9" * 5000}, "not a number"),
])
def test_malformed_files_are_unknown_with_the_reason(tmp_path: Path, content: Any,
                                                     why: str) -> None:
    write(tmp_path, content)
    assert why in unknown(tmp_path)


def test_a_huge_file_is_not_read_past_the_limit(tmp_path: Path) -> None:
    doc = json.dumps({**proxy_stats(), "pad": "x" * READ_LIMIT}).encode()
    write(tmp_path, doc)
    assert "larger than 1024 KiB" in unknown(tmp_path)
    write(tmp_path, b" " * (READ_LIMIT - 2) + b"{}")  # at the limit: read (and then judged)
    assert "has schema null" in unknown(tmp_path)


def _foreign(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `path` someone else's: chown where this is root, else this process's uids
    without the file's owner (the check compares the same numbers)."""
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
    else:
        monkeypatch.setattr("hpceval.trust.my_uids", lambda: frozenset({path.stat().st_uid + 1}))


def test_a_file_of_another_user_is_not_read(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, proxy_stats())
    _foreign(path, monkeypatch)
    assert "not by you" in unknown(tmp_path) and "is owned by" in unknown(tmp_path)


def test_others_may_not_write_it_but_the_group_may(tmp_path: Path) -> None:
    path = write(tmp_path, proxy_stats())
    path.chmod(0o664)  # a setgid project folder with umask 002
    assert load_runtime(str(tmp_path)).facts is not None
    path.chmod(0o646)
    assert "writable by other users" in unknown(tmp_path)


def test_a_link_is_refused_even_to_a_good_file(tmp_path: Path) -> None:
    good = write(tmp_path / "elsewhere", proxy_stats())
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "runtime.json").symlink_to(good)
    assert unknown(tmp_path / "task") == "runtime.json is a symbolic link"


def test_a_fifo_does_not_block_and_a_folder_is_no_file(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "runtime.json")
    done: list[str] = []
    reader = threading.Thread(target=lambda: done.append(unknown(tmp_path)), daemon=True)
    reader.start()
    reader.join(10)
    assert done == ["runtime.json is not a plain file"]
    (tmp_path / "d" / "runtime.json").mkdir(parents=True)
    assert unknown(tmp_path / "d") == "runtime.json is not a plain file"


def test_the_checks_are_made_on_the_descriptor_not_the_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The name is opened once; owner, kind and size come from that descriptor (a file swapped
    after a check of the path would otherwise be read unchecked)."""
    write(tmp_path, proxy_stats())

    def no_path_stat(*args: Any, **kw: Any) -> Any:
        raise AssertionError("the path was looked at a second time")

    for name in ("stat", "lstat"):
        monkeypatch.setattr(os, name, no_path_stat)
    monkeypatch.setattr(os.path, "exists", no_path_stat)
    assert load_runtime(str(tmp_path)).facts is not None


def test_fields_added_later_are_kept_when_they_are_numbers(tmp_path: Path) -> None:
    """Another column of the proxy (gpu_seconds, spec_accepts) shows without a change here;
    what is not a number or a map of numbers is left out; a missing known field is unknown."""
    data = {**proxy_stats(), "gpu_seconds": 3, "spec_accepts": {"oom": 2, "timeout": 1},
            "note": "free text", "nested": {"a": {"b": 1}}}
    del data["scored"]  # older files of schema 1 have no `scored`
    write(tmp_path, data)
    found = load_runtime(str(tmp_path))
    assert found.facts is not None and found.facts["scored"] is None
    assert found.extra_fields() == ["gpu_seconds", "spec_accepts"]
    assert "note" not in found.facts and "nested" not in found.facts
    assert task_line(found).endswith("gpu_seconds 3, spec_accepts oom 2, timeout 1")
    assert extra_headers([found]) == ["gpu_seconds", "spec_accepts"]
    assert cells(found, ["gpu_seconds", "other"])[-2:] == ["3", ""]
    total = totals([found, found, load_runtime(str(tmp_path / "none"))])
    assert (total["requests"], total["gpu_seconds"], total["tasks"]) == (10, 6, 2)
    assert total_line(total) == ("10 requests, 800 prompt / 160 completion tokens, 2 errors, "
                                 "gpu_seconds 6 over 2 task(s)")


def test_many_extra_fields_are_bounded(tmp_path: Path) -> None:
    write(tmp_path, {**proxy_stats(), **{f"x{i:03d}": i for i in range(500)}})
    found = load_runtime(str(tmp_path))
    assert len(found.extra_fields()) == runtime_view.EXTRA_LIMIT


def test_totals_count_the_unknown_and_live_rates_only_recent_files() -> None:
    bad = Runtime(None, "runtime.json is not valid JSON (truncated?)")
    fresh = Runtime({**proxy_stats(), "tokens_per_s": 40.0}, None, 1000.0)
    old = Runtime({**proxy_stats(), "tokens_per_s": 99.0}, None, 100.0)
    assert totals([bad, fresh])["unknown"] == 1
    assert "1 runtime.json unknown" in total_line(totals([bad, fresh]))
    assert total_line(totals([bad])) == "no runtime.json to sum (1 unknown)"
    assert live_tokens_per_s([fresh, old, bad], now=1010.0, window_s=60) == 40.0
    assert live_tokens_per_s([old], now=1010.0, window_s=60) is None


def test_the_flags_see_nothing_of_a_file_they_may_not_trust(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpceval.results.flags import runtime_flags

    cut = {**proxy_stats(), "choices": 10, "finish_reasons": {"length": 9, "stop": 1}}
    path = write(tmp_path, cut)
    assert [f.code for f in runtime_flags(read_runtime(str(tmp_path)))] == ["length"]
    _foreign(path, monkeypatch)
    assert runtime_flags(read_runtime(str(tmp_path))) == []
