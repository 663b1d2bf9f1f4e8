from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hpceval.contract import is_done
from hpceval.results.store import ResultsAlreadyFinal, finalize_task
from hpceval.storage import atomic_write_text
from hpceval.tasks.adapters.lm_eval import parse
from hpceval.tasks.result import Metric, TaskResult

LM_EVAL_OUTPUT = {
    "results": {"gsm8k": {"alias": "gsm8k", "exact_match,strict-match": 0.25,
                          "exact_match_stderr,strict-match": 0.1,
                          "exact_match,flexible-extract": 0.5,
                          "exact_match_stderr,flexible-extract": "N/A"}},
    "n-samples": {"gsm8k": {"original": 1319, "effective": 4}},
    "n-shot": {"gsm8k": 5}, "versions": {"gsm8k": 3.0}, "lm_eval_version": "0.4.9",
}


def test_atomic_write_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "a" / "results.json"
    atomic_write_text(target, "one")
    atomic_write_text(target, "two")
    assert target.read_text() == "two"
    assert [p.name for p in target.parent.iterdir()] == ["results.json"]


def test_failed_write_keeps_the_old_file(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "results.json"
    atomic_write_text(target, "complete")

    def quota_exceeded(fd: int) -> None:
        raise OSError(122, "Disk quota exceeded")

    monkeypatch.setattr("hpceval.storage.os.fsync", quota_exceeded)
    with pytest.raises(OSError, match="quota"):
        atomic_write_text(target, "partial")
    assert target.read_text() == "complete"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_done_results_are_never_overwritten(tmp_path: Path) -> None:
    result = TaskResult("t", "h", None, [Metric("t", "acc", 1.0)])
    finalize_task(tmp_path, result.to_json(), {"job": "1"})
    assert is_done(tmp_path)
    with pytest.raises(ResultsAlreadyFinal):
        finalize_task(tmp_path, TaskResult("t", "h", None, []).to_json(), {"job": "2"})
    assert TaskResult.from_json((tmp_path / "results.json").read_text()) == result
    assert json.loads((tmp_path / "manifest.json").read_text()) == {"job": "1"}


def test_lm_eval_parser(tmp_path: Path) -> None:
    out = tmp_path / "harness" / "local__tiny"
    out.mkdir(parents=True)
    (out / "results_2026-11-30T10-00-00.json").write_text(json.dumps(LM_EVAL_OUTPUT))
    result = parse(tmp_path / "harness", "lm-evaluation-harness.gsm8k")
    assert result.harness_version == "0.4.9"
    assert result.value("exact_match", filter="strict-match") == 0.25
    flexible = next(m for m in result.metrics if m.filter == "flexible-extract")
    assert (flexible.value, flexible.stderr, flexible.n_samples) == (0.5, None, 4)
    assert TaskResult.from_json(result.to_json()) == result


def test_lm_eval_parser_reads_the_newest_results_file(tmp_path: Path) -> None:
    # A resumed task reruns lm-eval into the same folder: the newest file is this run's. The
    # names sort the other way round on purpose, so neither name order nor listing order can
    # stand in for the modification time.
    out = tmp_path / "harness" / "local__tiny"
    out.mkdir(parents=True)
    old, new = out / "results_2026-11-30T10-00-00.json", out / "results_2026-01-01T00-00-00.json"
    stale = json.loads(json.dumps(LM_EVAL_OUTPUT))
    stale["results"]["gsm8k"]["exact_match,strict-match"] = 0.75
    old.write_text(json.dumps(stale))
    new.write_text(json.dumps(LM_EVAL_OUTPUT))
    os.utime(old, (1_000_000, 1_000_000))
    os.utime(new, (2_000_000, 2_000_000))
    result = parse(tmp_path / "harness", "lm-evaluation-harness.gsm8k")
    assert result.value("exact_match", filter="strict-match") == 0.25
    assert result.source_file == "local__tiny/" + new.name
    os.utime(old, (3_000_000, 3_000_000))  # and the other way round
    assert parse(tmp_path / "harness", "x").value("exact_match", filter="strict-match") == 0.75
