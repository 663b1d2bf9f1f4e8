"""benchmarks/report_bench.py end to end on a tiny tree: its own page checks must pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import report_bench


def test_expected_rows() -> None:
    assert report_bench.expected_rows(1000, 3) == 33  # 20 first (7 wrong) + 13 more wrong
    assert report_bench.expected_rows(10, 3) == 10
    assert report_bench.expected_rows(1000, 0) == 20


def test_report_bench_small(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCEVAL_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "report.json"
    report_bench.measure(tmp_path / "work", 60, 5_000, 1, out, steps=3)
    result = json.loads(out.read_text())
    assert result["name"] == "report"
    assert [r["unit"] for r in result["rows"]] == ["ms", "ms", "KiB", "ms", "ms", "ms"]
    # the page against the same JSON files, then (as before) against results.json alone
    assert [r["baseline_label"] for r in result["rows"][:2]] == [
        report_bench.SAME_FILES, report_bench.NAIVE]
    assert result["rows"][-1]["metric"].startswith("score-vs-step page, 3 steps x 10 tasks")
    assert all(r["ratio"] > 0 for r in result["rows"] if r["baseline"])
