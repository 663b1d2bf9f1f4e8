"""One real run directory per training step, as `hpceval watch` makes them (submitted with
the fake Slurm, finished with the job's own writer): steps 1000-3000 whole, 4000 partial (one
task done, the other has a results.json but no done marker), 5000 submitted with no result."""

from __future__ import annotations

from pathlib import Path

from hpceval.runs.submit import submit_configs
from hpceval.tasks.result import Metric, TaskResult
from support.reports import ONE, TWO, finish
from support.runs import configs
from support.slurm import FakeSlurm

# step -> task -> (value, stderr); TWO has no stderr at step 2000 (a harness that gives none)
SCORES: dict[int, dict[str, tuple[float, float | None]]] = {
    1000: {ONE: (0.31, 0.02), TWO: (0.10, 0.01)},
    2000: {ONE: (0.42, 0.02), TWO: (0.15, None)},
    3000: {ONE: (0.40, 0.02), TWO: (0.22, 0.01)},
    4000: {ONE: (0.47, 0.02)},
}
PARTIAL, PENDING = 4000, 5000
STALE = 0.99  # TWO's half-written value at step 4000: never shown


def step_runs(tmp_path: Path, steps: tuple[int, ...] = (1000, 2000, 3000, 4000, 5000)
              ) -> list[tuple[int, Path]]:
    fake = FakeSlurm()
    points = []
    # Submitted out of step order, as checkpoints can be picked up: the table sorts by step.
    for step in sorted(steps, key=lambda s: (s % 2000, s)):
        run = submit_configs(configs(tmp_path / f"cfg-{step}"), fake, aggregate=False)
        (model,) = [p.name for p in (run.run_dir / "models").iterdir()]
        for task, (value, stderr) in SCORES.get(step, {}).items():
            task_dir = finish(run.run_dir, model, task, value, stderr or 0.0,
                              job={"job_id": str(step)})
            if stderr is None:
                _drop_stderr(task_dir)
        if step == PARTIAL:
            half = run.run_dir / "models" / model / "tasks" / TWO
            half.mkdir(parents=True, exist_ok=True)
            # A whole results.json without its done marker: a job killed in between.
            (half / "results.json").write_text(TaskResult(
                TWO, "ut-harness", "1.0", [Metric("ut_two", "exact_match", STALE)]).to_json())
        points.append((step, run.run_dir))
    return points


def _drop_stderr(task_dir: Path) -> None:
    path = task_dir / "results.json"
    path.write_text(path.read_text().replace('"stderr": 0.0', '"stderr": null'))
