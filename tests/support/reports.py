"""A finished sweep with everything the report reads: manifests, usage, lm-eval sample files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hpceval.results.store import finalize_task
from hpceval.tasks.result import Metric, TaskResult

ONE, TWO = "ut-harness.ut_one", "ut-harness.ut_two"
# (model, task) -> (value, stderr): model-00 and model-01 overlap on ONE, not on TWO
SCORES = {("model-00", ONE): (0.80, 0.02), ("model-01", ONE): (0.78, 0.02),
          ("model-00", TWO): (0.40, 0.01), ("model-01", TWO): (0.90, 0.01)}


def lm_eval_sample(i: int, correct: bool, *, prompt: str = "") -> dict[str, Any]:
    """One line as lm-eval 0.4 writes samples_<task>_<date>.jsonl (generate_until task)."""
    return {"doc_id": i, "doc": {"question": f"q{i}"}, "target": str(i * 2),
            "arguments": {"gen_args_0": {"arg_0": prompt or f"Question {i}: what is {i}+{i}?",
                                         "arg_1": {"until": ["\n"]}}},
            "resps": [[f"{i * 2 if correct else i * 3}"]],
            "filtered_resps": [f"{i * 2 if correct else i * 3}"], "filter": "strict-match",
            "metrics": ["exact_match"], "doc_hash": "h", "prompt_hash": "p", "target_hash": "t",
            "exact_match": 1.0 if correct else 0.0}


def write_samples(task_dir: Path, task: str, n: int, wrong_every: int = 3) -> Path:
    folder = task_dir / "harness" / "model__name"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"samples_{task.split('.')[-1]}_2026-12-01T10-00-00.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            handle.write(json.dumps(lm_eval_sample(i, i % wrong_every != 0)) + "\n")
    return path


def finish(run_dir: Path, model: str, task: str, value: float, stderr: float, *,
           job: dict[str, str], samples: int = 0, duration: float = 60.0) -> Path:
    short = task.split(".")[-1]
    result = TaskResult(task, "ut-harness", "1.0",
                        [Metric(short, "exact_match", value, stderr, "strict-match", 500)])
    task_dir = run_dir / "models" / model / "tasks" / task
    if samples:
        write_samples(task_dir, task, samples)
    finalize_task(task_dir, result.to_json(), {
        "duration_s": duration, "slurm": job,
        "harness": {"name": "ut-harness", "version": "1.0"},
        "image": "docker://nvcr.io/nvidia/eval-factory/ut@sha256:" + "ab" * 32, "sif": None})
    return task_dir


def parquet_table(run: Path, out_dir: Path) -> Any:
    """`hpceval results RUN --format parquet` read back (a pandas frame); skips without
    pandas or pyarrow."""
    import pytest
    from click.testing import CliRunner

    from hpceval.cli.main import cli

    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    path = out_dir / "r.parquet"
    out = CliRunner().invoke(cli, ["results", str(run), "--format", "parquet", "-O", str(path)])
    assert out.exit_code == 0, out.output
    return pd.read_parquet(path)
