"""The eval_factory parser: nemo-evaluator's results.yml into the unified schema."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hpceval.tasks.adapters import NoResultsFound, get_parser
from hpceval.tasks.adapters import lm_eval as lm_eval_parser
from hpceval.tasks.adapters.eval_factory import parse, parse_results
from hpceval.tasks.result import TaskResult

DATA = Path(__file__).parent / "data" / "eval_factory"


def rows(result: TaskResult) -> set[tuple[str, str, str | None, float, float | None]]:
    return {(m.task, m.name, m.filter, m.value, m.stderr) for m in result.metrics}


def test_registered_under_the_catalogue_name() -> None:
    assert get_parser("eval_factory") is parse
    with pytest.raises(ValueError, match="lm_eval, eval_factory"):
        get_parser("nope")
    with pytest.raises(ValueError, match="did you mean 'lm_eval'"):
        get_parser("lm-eval")


def test_simple_evals_score_names_become_the_filter() -> None:
    result = parse(DATA / "simple_evals_gpqa", "simple_evals.gpqa_diamond")
    # reported under tasks and again under groups: one metric, not two
    assert rows(result) == {("gpqa_diamond", "score", "micro", 0.46, 0.07137140569597598)}
    assert result.value("score", filter="micro") == 0.46
    assert result.task == "simple_evals.gpqa_diamond"
    assert result.harness_version == "3f1c0d2"
    assert result.source_file == "results.yml"
    assert result.extra["eval_type"] == "gpqa_diamond"
    assert result.extra["params"]["limit_samples"] == 50
    assert result.extra["versioning"]["nemo_evaluator"] == "0.1.71"


def test_lm_eval_names_are_split_back_into_metric_and_filter() -> None:
    result = parse(DATA / "lm_eval_gsm8k", "lm-evaluation-harness.gsm8k")
    assert rows(result) == {
        ("gsm8k", "exact_match", "flexible-extract", 0.725, 0.03175472699650381),
        ("gsm8k", "exact_match", "strict-match", 0.68, 0.033130649883862226),
    }
    assert result.harness_version is None  # git_hash: '' means unknown, not a version


def test_same_numbers_read_the_same_from_upstream_lm_eval(tmp_path: Path) -> None:
    """The image's results.yml and upstream lm-eval's results JSON of the same run give the
    same metrics, so the two harnesses' numbers can sit in one table."""
    upstream = {
        "results": {"gsm8k": {"alias": "gsm8k", "sample_len": 200,  # a count, not a metric
                              "exact_match,strict-match": 0.68,
                              "exact_match_stderr,strict-match": 0.033130649883862226,
                              "exact_match,flexible-extract": 0.725,
                              "exact_match_stderr,flexible-extract": 0.03175472699650381}},
        "n-samples": {"gsm8k": {"original": 1319, "effective": 200}},
        "lm_eval_version": "0.4.13",
    }
    out = tmp_path / "harness" / "model"
    out.mkdir(parents=True)
    (out / "results_2026-01-01T00-00-00.json").write_text(json.dumps(upstream))
    from_upstream = lm_eval_parser.parse(tmp_path / "harness", "lm-eval-upstream.gsm8k")
    from_image = parse(DATA / "lm_eval_gsm8k", "lm-evaluation-harness.gsm8k")
    assert rows(from_upstream) == rows(from_image)


def test_unfiltered_metrics_read_the_same_from_upstream_lm_eval(tmp_path: Path) -> None:
    """Upstream writes "acc,none"; the image's adapter drops ",none": both mean no filter."""
    upstream = {"results": {"mmlu_anatomy": {"acc,none": 0.7, "acc_stderr,none": "N/A"}}}
    out = tmp_path / "harness" / "model"
    out.mkdir(parents=True)
    (out / "results_2026-01-01T00-00-00.json").write_text(json.dumps(upstream))
    from_upstream = lm_eval_parser.parse(tmp_path / "harness", "lm-eval-upstream.mmlu")
    from_image = parse(DATA / "lm_eval_mmlu", "lm-evaluation-harness.mmlu")
    assert rows(from_upstream) <= rows(from_image)


def test_groups_nested_groups_counts_and_launcher_layout() -> None:
    result = parse(DATA / "lm_eval_mmlu", "lm-evaluation-harness.mmlu")
    assert result.source_file == "artifacts/results.yml"  # found below the output dir
    assert rows(result) == {
        ("mmlu_abstract_algebra", "acc", None, 0.4, 0.16329931618554522),
        ("mmlu_anatomy", "acc", None, 0.7, None),
        ("mmlu_astronomy", "acc", None, 0.7, 0.15275252316519466),
        ("mmlu", "acc", None, 0.6, 0.0894),
        ("mmlu_stem", "acc", None, 0.55, 0.1106),
    }
    assert result.value("acc", task="mmlu") == 0.6
    assert [m.n_samples for m in result.metrics if m.task == "mmlu"] == [30]


def test_results_json_round_trip() -> None:
    result = parse(DATA / "lm_eval_gsm8k", "lm-evaluation-harness.gsm8k")
    assert TaskResult.from_json(result.to_json()) == result


def test_results_yml_at_top_level_wins_over_older_copies(tmp_path: Path) -> None:
    shutil.copy(DATA / "simple_evals_gpqa" / "results.yml", tmp_path / "results.yml")
    (tmp_path / "old").mkdir()
    shutil.copy(DATA / "lm_eval_gsm8k" / "results.yml", tmp_path / "old" / "results.yml")
    assert parse(tmp_path, "t").source_file == "results.yml"


def test_missing_results_file(tmp_path: Path) -> None:
    (tmp_path / "eval_factory_metrics.json").write_text("{}")
    with pytest.raises(NoResultsFound, match=r"results\.yml"):
        parse(tmp_path, "simple_evals.gpqa_diamond")


@pytest.mark.parametrize("text", ["- a list\n", "config: {type: x}\n", "results: 3\n"])
def test_not_a_results_file(tmp_path: Path, text: str) -> None:
    (tmp_path / "results.yml").write_text(text)
    with pytest.raises(ValueError):
        parse(tmp_path, "t")


def test_odd_entries_are_skipped_not_fatal() -> None:
    data = {"results": {"tasks": {
        "t": {"metrics": {
            "ok": {"scores": {"ok": {"value": 1, "stats": {"stderr": "N/A", "count": 7}}}},
            "text": {"scores": {"text": {"value": "n/a"}}},
            "broken": {"scores": ["not", "a", "mapping"]},
            "nan_stderr": {"scores": {"mean": {"value": 0.5, "stats": {"stderr": float("nan")}}}},
        }},
        "empty": None}}, "groups": {"t": {"metrics": {"ok": {"scores": {"ok": {"value": 9}}}}}}}
    result = parse_results(data, "x")
    assert rows(result) == {("t", "ok", None, 1.0, None), ("t", "nan_stderr", "mean", 0.5, None)}
    assert [m.n_samples for m in result.metrics if m.name == "ok"] == [7]


# Real results.yml files: written by nemo-evaluator 0.2.8 with nvidia-simple-evals / nvidia-bfcl
# 26.3 against SmolLM2-135M on vLLM (CPU), limit_samples=3
# (tests/integration/test_eval_factory_job.py produces them afresh on every run).

def test_real_simple_evals_humaneval_pass_at_k_is_a_metric_of_the_eval_type() -> None:
    result = parse(DATA / "real_simple_evals_humaneval", "simple_evals.humaneval")
    # tasks: {pass@1: ...} and groups: {humaneval: ...}: both belong to humaneval
    assert rows(result) == {("humaneval", "pass@1", "micro", 0.0, 0.0),
                            ("humaneval", "score", "micro", 0.0, 0.0)}
    assert result.extra["eval_type"] == "humaneval"
    assert result.extra["params"]["limit_samples"] == 3


def test_real_bfcl_reports_percentages_under_its_group() -> None:
    result = parse(DATA / "real_bfcl_v2_ast_prompting", "bfcl.bfclv2_ast_prompting")
    assert rows(result) == {("bfcl", "irrelevance_detection_non_live", None, 100.0, None),
                            ("bfcl", "live_overall_acc", None, 0.0, None),
                            ("bfcl", "multi_turn_overall_acc", None, 0.0, None),
                            ("bfcl", "non_live_overall_acc", None, 11.11, None)}
    assert result.extra["eval_type"] == "bfclv2_ast_prompting"
