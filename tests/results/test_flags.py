"""The `count` flag on real run-folder shapes: lm-eval's sample files, its results_*.json (whose
``n-samples`` gives each subtask's own size, ``original``), results.json and run.yaml's
limit_samples. `count` fires only when fewer items were scored than the task has *and* were asked
for; where the task's own size is unknown, `count-unverified` says so instead."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.reports import lm_eval_sample

from hpceval.results.flags import finished_task_flags, task_flags
from hpceval.results.store import finalize_task
from hpceval.tasks.adapters.lm_eval import parse_results
from hpceval.tasks.result import Metric, TaskResult

TASK = "lm-evaluation-harness.mmlu"


def task_dir(tmp_path: Path, scored: dict[str, int], *, limit: int | None = None,
             sizes: dict[str, int] | None = None) -> Path:
    """A task folder as a run leaves it: per subtask a samples_<subtask>_<date>.jsonl with
    `scored` items, lm-eval's results_<date>.json with n-samples when `sizes` is given (effective
    = min(size, limit), as lm-eval computes it), and the model's run.yaml with the limit."""
    model_dir = tmp_path / "run" / "models" / "m"
    folder = model_dir / "tasks" / TASK / "harness" / "model__name"
    folder.mkdir(parents=True)
    for subtask, n in scored.items():
        lines = [json.dumps(lm_eval_sample(i, i % 2 == 0)) for i in range(n)]
        (folder / f"samples_{subtask}_2026-12-01T10-00-00.jsonl").write_text(
            "".join(line + "\n" for line in lines))
    if sizes is not None:
        (folder / "results_2026-12-01T10-00-00.json").write_text(json.dumps({
            "results": {s: {"exact_match,strict-match": 0.5} for s in sizes},
            "n-samples": {s: {"original": size, "effective": min(size, limit or size)}
                          for s, size in sizes.items()}}))
    params = f"{{params: {{limit_samples: {limit}}}}}" if limit is not None else "{}"
    (model_dir / "run.yaml").write_text(f"evaluation: {params}\n")
    return model_dir / "tasks" / TASK


def flags(folder: Path, reported_n: Any = None) -> dict[str, str]:
    return {f.code: f.message for f in task_flags(str(folder), TASK, "exact_match",
                                                  "strict-match", reported_n)}


def test_a_subtask_smaller_than_the_limit_is_not_short(tmp_path: Path) -> None:
    """The issue's case: 198 items scored with a limit of 200 on a subtask of 198 items."""
    folder = task_dir(tmp_path, {"mmlu_anatomy": 198, "mmlu_virology": 200}, limit=200,
                      sizes={"mmlu_anatomy": 198, "mmlu_virology": 1319})
    assert flags(folder) == {}


def test_fewer_than_both_the_size_and_the_limit_is_count(tmp_path: Path) -> None:
    folder = task_dir(tmp_path, {"mmlu_anatomy": 150, "mmlu_virology": 200}, limit=200,
                      sizes={"mmlu_anatomy": 198, "mmlu_virology": 1319})
    assert flags(folder) == {"count": "fewer items scored than asked (limit_samples 200) and "
                                      "than the task has: mmlu_anatomy: 150 of 198 (198 items)"}


def test_a_subtask_with_a_size_and_no_scored_item_is_count(tmp_path: Path) -> None:
    folder = task_dir(tmp_path, {"mmlu_anatomy": 20}, limit=20,
                      sizes={"mmlu_anatomy": 135, "mmlu_virology": 166})
    assert flags(folder)["count"].endswith("mmlu_virology: 0 of 20 (166 items)")


def test_an_unknown_size_says_so_instead_of_firing_count(tmp_path: Path) -> None:
    """No n-samples anywhere (an eval-factory harness): 198 of 200 may be the whole subtask."""
    folder = task_dir(tmp_path, {"mmlu_anatomy": 198, "mmlu_virology": 200}, limit=200)
    assert flags(folder) == {"count-unverified": (
        "fewer items scored than asked (limit_samples 200): mmlu_anatomy: 198; the task's own "
        "size is unknown (the harness reported no n-samples), so these may be all it has")}


def test_the_size_comes_from_results_json_when_the_harness_file_is_gone(tmp_path: Path) -> None:
    """lm-eval's adapter keeps n-samples in results.json's extra: the harness's own results
    file is no longer needed to know each subtask's size."""
    data = {"results": {"mmlu_anatomy": {"exact_match,strict-match": 0.5}},
            "n-samples": {"mmlu_anatomy": {"original": 198, "effective": 198}}}
    result = parse_results(data, TASK)
    assert result.extra["n-samples"] == {"mmlu_anatomy": {"original": 198, "effective": 198}}
    folder = task_dir(tmp_path, {"mmlu_anatomy": 198}, limit=200)
    finalize_task(folder, result.to_json(), {"duration_s": 1.0})
    assert finished_task_flags(str(folder)) == []
    (folder / "harness" / "model__name" / "samples_mmlu_anatomy_2026-12-01T10-00-00.jsonl"
     ).write_text(json.dumps(lm_eval_sample(0, True)) + "\n")
    assert [f.code for f in finished_task_flags(str(folder))] == ["count"]


def test_without_a_limit_the_harness_effective_count_is_what_was_asked(tmp_path: Path) -> None:
    folder = task_dir(tmp_path, {"mmlu_anatomy": 198}, sizes={"mmlu_anatomy": 198})
    assert flags(folder) == {}
    short = task_dir(tmp_path / "short", {"mmlu_anatomy": 190}, sizes={"mmlu_anatomy": 198})
    assert flags(short) == {"count": "fewer items scored than the task has: "
                                      "mmlu_anatomy: 190 of 198 (198 items)"}


def test_without_limit_or_size_only_fewer_than_the_harness_reported_fires(
        tmp_path: Path) -> None:
    """The primary metric's n is one subtask's: the sample files of all subtasks hold more,
    which is no shortfall; fewer than it is."""
    folder = task_dir(tmp_path, {"mmlu_anatomy": 100, "mmlu_virology": 100})
    assert flags(folder, 100) == {}
    assert flags(folder, 250) == {"count": "200 samples in the sample files, the harness "
                                           "reported 250"}


def test_an_eval_factory_task_short_of_the_limit_is_unverified(tmp_path: Path) -> None:
    """eval-factory's results.yml gives the n it scored, not the task's size."""
    folder = task_dir(tmp_path, {"mmlu_anatomy": 50}, limit=200)
    finalize_task(folder, TaskResult(TASK, "eval-factory", "1", [
        Metric("mmlu_anatomy", "exact_match", 0.5, None, "strict-match", 50)]).to_json(),
        {"duration_s": 1.0})
    assert [f.code for f in finished_task_flags(str(folder))] == ["count-unverified"]


def test_sizes_under_other_subtask_names_are_not_taken_for_these(tmp_path: Path) -> None:
    """n-samples whose names match no sample file (another harness's naming) say nothing about
    the subtasks scored: not `count` for items "missing" under names never scored."""
    folder = task_dir(tmp_path, {"gsm8k": 150}, limit=200, sizes={"gsm8k_cot": 1319})
    assert set(flags(folder)) == {"count-unverified"}
