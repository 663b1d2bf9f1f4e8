"""server-load.json (results.server_load): the series stays bounded for any job length, merged
points keep their peaks and mean rates; the reader shows the proxy's own file as written and a
missing, truncated, huge, foreign, linked, special or non-numeric file as unknown with why."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from hpceval.contract import SERVER_LOAD_FILE
from hpceval.results.server_load import (
    COLUMNS,
    MISSING,
    POINT_LIMIT,
    READ_LIMIT,
    LoadSeries,
    load_server_load,
    write_server_load,
)


def series(samples: int, limit: int = POINT_LIMIT) -> LoadSeries:
    """`samples` polls 5 s apart: 2 waiting (one spike of 50 at the middle), 10 running, KV
    use rising to 0.9, 100 tokens/s out (none on the first), 1000 in."""
    made = LoadSeries(5.0, limit)
    for i in range(samples):
        made.add(1_000_000.0 + 5 * i, 50.0 if i == samples // 2 else 2.0, 10.0,
                 0.9 * i / max(1, samples - 1), None if i == 0 else 100.0, 1000.0)
    return made


def write(folder: Path, content: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / SERVER_LOAD_FILE
    path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    return path


def unknown(folder: Path) -> str:
    found = load_server_load(str(folder))
    assert found.facts is None and found.problem is not None
    assert found.to_json() == {"unknown": found.problem}
    return found.problem


def test_a_short_series_keeps_every_sample() -> None:
    doc = series(10).to_json()
    assert (doc["samples"], doc["stride"], len(doc["points"])) == (10, 1, 10)
    assert doc["columns"] == list(COLUMNS)
    assert doc["points"][0] == [1_000_000.0, 2.0, 10.0, 0.0, None, 1000.0]
    assert doc["last"] == {"t": 1_000_045.0, "waiting": 2.0, "running": 10.0, "kv": 0.9,
                           "gen_tps": 100.0, "prompt_tps": 1000.0}
    assert doc["summary"]["waiting"] == {"peak": 50.0, "mean": 6.8}
    assert doc["summary"]["gen_tps"] == {"peak": 100.0, "mean": 100.0}


@pytest.mark.parametrize("samples", [POINT_LIMIT - 1, POINT_LIMIT, POINT_LIMIT + 1, 10_007,
                                     100_000])
def test_any_length_is_at_most_the_limit_and_keeps_peaks_and_means(samples: int) -> None:
    doc = series(samples).to_json()
    points = doc["points"]
    assert len(points) <= POINT_LIMIT and doc["samples"] == samples
    assert doc["stride"] & (doc["stride"] - 1) == 0  # 1, 2, 4, ...: pairs merged
    assert len(points) >= POINT_LIMIT // 2  # never coarser than it needs to be
    assert [p[0] for p in points] == sorted(p[0] for p in points)
    assert points[0][0] == 1_000_000.0  # a merged point starts at its first sample
    assert max(p[1] for p in points) == 50.0  # the spike survives every merge (max)
    assert max(p[3] for p in points) == 0.9
    assert {p[2] for p in points} == {10.0}
    assert all(p[4] == 100.0 for p in points[1:])  # rates: the mean of the known ones
    assert doc["summary"]["kv"]["peak"] == 0.9 and doc["summary"]["running"]["mean"] == 10.0
    assert len(json.dumps(doc)) < 64 << 10  # what the reader's size note promises


def test_rates_of_merged_points_are_means_of_their_samples() -> None:
    made = LoadSeries(1.0, limit=4)
    for t, rate in enumerate([10.0, 30.0, None, 50.0]):
        made.add(float(t), 0, 0, None, rate, None)
    # four points fill it: pairs merged, [10, 30] -> 20 and [None, 50] -> 50 (the known one)
    assert made.to_json()["points"] == [[0.0, 0, 0, None, 20.0, None],
                                        [2.0, 0, 0, None, 50.0, None]]
    with pytest.raises(ValueError, match="even"):
        LoadSeries(1.0, limit=3)


def test_the_proxy_file_is_read_as_written(tmp_path: Path) -> None:
    doc = series(700).to_json()
    write_server_load(tmp_path / SERVER_LOAD_FILE, doc)
    assert not list(tmp_path.glob(".*.tmp"))  # the temp file was renamed into place
    found = load_server_load(str(tmp_path))
    assert found.problem is None and found.mtime is not None
    assert found.facts == doc
    short = found.to_json()
    assert short is not None and "points" not in short and short["summary"] == doc["summary"]
    assert found.to_json(points=True) == doc


def test_missing_is_not_a_problem_to_show(tmp_path: Path) -> None:
    found = load_server_load(str(tmp_path / "never"))
    assert found.missing and found.problem == MISSING and found.to_json() is None


GOOD = series(3).to_json()


@pytest.mark.parametrize("content, why", [
    (b'{"schema": 1, "samples": 12', "is not valid JSON (truncated?)"),
    (b"[" * 200_000 + b"]" * 200_000, "not valid JSON"),
    (b"[1]", "is list, not a JSON object"),
    ({**GOOD, "schema": 2}, "has schema 2; this hpceval reads schema 1"),
    ({**GOOD, "columns": ["t", "x"]}, "has columns"),
    ({**GOOD, "samples": "12"}, 'has samples = "12", not a number'),
    ({**GOOD, "samples": 1.5}, "has samples = 1.5, not a whole number"),
    ({**GOOD, "interval_s": -5}, "has interval_s = -5, below 0"),
    ({**GOOD, "last": {**GOOD["last"], "waiting": "lots"}}, 'has last.waiting = "lots"'),
    ({**GOOD, "last": {**GOOD["last"], "t": 1e300}}, "not a Unix time"),
    ({**GOOD, "last": [1, 2]}, "has last = list, not an object"),
    ({**GOOD, "summary": {"kv": {"peak": True}}}, "has summary.kv.peak = true"),
    ({**GOOD, "summary": None}, "has summary = null, not an object"),
    ({**GOOD, "points": {"a": 1}}, "has points = dict, not a list"),
    ({**GOOD, "points": [[1.0, 2.0]]}, "has points[0] = list, not 6 numbers"),
    ({**GOOD, "points": [[1.0, 1, 1, 0.1, "9" * 5000, 1]]}, "has points[0].gen_tps"),
    ({**GOOD, "points": [[5.0, 1, 1, 0.1, 1, 1], [1.0, 1, 1, 0.1, 1, 1]]}, "not oldest first"),
    ({**GOOD, "points": [[1.0, 1, 1, 0.1, 1, 1]] * (POINT_LIMIT + 1)}, "at most 600"),
    (json.dumps({**GOOD, "samples": float("nan")}).encode(),
     "has samples = nan, not a finite number"),
])
def test_malformed_files_are_unknown_with_the_reason(tmp_path: Path, content: Any,
                                                     why: str) -> None:
    write(tmp_path, content)
    assert why in unknown(tmp_path)


def test_a_huge_file_is_not_read_past_the_limit(tmp_path: Path) -> None:
    write(tmp_path, json.dumps({**GOOD, "pad": "x" * READ_LIMIT}).encode())
    assert "larger than 1024 KiB" in unknown(tmp_path)


def test_a_file_of_another_user_or_writable_by_others_is_not_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, GOOD)
    path.chmod(0o664)  # a setgid project folder with umask 002: fine
    assert load_server_load(str(tmp_path)).facts is not None
    path.chmod(0o646)
    assert "writable by other users" in unknown(tmp_path)
    path.chmod(0o644)
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
    else:  # the same check: the file's owner is not among this process's uids
        monkeypatch.setattr("hpceval.trust.my_uids", lambda: frozenset({path.stat().st_uid + 1}))
    assert "not by you" in unknown(tmp_path)


def test_a_link_a_fifo_and_a_folder_are_refused_without_blocking(tmp_path: Path) -> None:
    good = write(tmp_path / "elsewhere", GOOD)
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / SERVER_LOAD_FILE).symlink_to(good)
    assert unknown(tmp_path / "linked") == f"{SERVER_LOAD_FILE} is a symbolic link"
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / SERVER_LOAD_FILE)
    done: list[str] = []
    reader = threading.Thread(target=lambda: done.append(unknown(tmp_path / "fifo")),
                              daemon=True)
    reader.start()
    reader.join(10)
    assert done == [f"{SERVER_LOAD_FILE} is not a plain file"]
    (tmp_path / "dir" / SERVER_LOAD_FILE).mkdir(parents=True)
    assert unknown(tmp_path / "dir") == f"{SERVER_LOAD_FILE} is not a plain file"
