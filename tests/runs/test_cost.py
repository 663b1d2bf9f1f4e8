"""GPU-hours and node-hours from sacct's AllocTRES x Elapsed, in the one sacct call of a refresh.

The fake's sacct answers with output recorded on the dev cluster
(tests/backends/slurm/data/sacct-22.05-cost-ended.txt): job 15 held 2 nodes x 2 GPUs for 3 s;
array 16 held 1 GPU on 1 node per task for 2 s.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.runs import configs
from support.slurm import SACCT_SAMPLES, RecordedSlurm

from hpceval.cli.main import cli
from hpceval.results.store import finalize_task
from hpceval.runs.submit import submit_configs
from hpceval.tasks.result import Metric, TaskResult

ONE, TWO = "ut-harness.ut_one", "ut-harness.ut_two"


def _finish(run_dir: Path, model: str, task: str, duration: float, slurm: dict[str, str],
            items: int | None = None) -> None:
    result = TaskResult(task, "ut-harness", "1.0", [Metric(task.split(".")[-1], "acc", 0.5,
                                                           n_samples=items)])
    finalize_task(run_dir / "models" / model / "tasks" / task, result.to_json(),
                  {"duration_s": duration, "slurm": slurm})


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> RecordedSlurm:
    fake = RecordedSlurm()
    monkeypatch.setattr("hpceval.backends.slurm.client.CommandSlurmClient", lambda **_: fake)
    return fake


def test_status_shows_gpu_hours_from_the_same_sacct_call(tmp_path: Path,
                                                         recorded: RecordedSlurm) -> None:
    single = submit_configs(configs(tmp_path / "a"), recorded)  # job 15
    sweep = submit_configs(configs(tmp_path / "b", 2), recorded, aggregate=False)  # array 16
    assert list(single.job_ids) == ["15"] and sweep.job_ids[0] == "16"
    _finish(single.run_dir, "solo", ONE, 1.8, {"job_id": "15"}, items=40)
    _finish(sweep.run_dir, "model-01", ONE, 0.9, {"job_id": "17", "array_job_id": "16",
                                                  "array_task_id": "1"})
    out = CliRunner().invoke(cli, ["status", "--json", single.invocation_id,
                                   sweep.invocation_id])
    assert out.exit_code == 0, out.output
    assert len(recorded.sacct_calls) == 1  # states and usage: one call
    a, b = json.loads(out.output)
    assert a["cost"]["gpu_hours"] == pytest.approx(4 * 3 / 3600, abs=1e-6)
    assert a["cost"]["node_hours"] == pytest.approx(2 * 3 / 3600, abs=1e-6)
    (task,) = a["cost"]["models"][0]["tasks"]
    assert task["task"] == ONE and task["gpu_hours"] == pytest.approx(4 * 1.8 / 3600, abs=1e-6)
    # 4 GPUs x 1.8 s over the 40 items it scored
    assert (task["items"], task["gpu_s_per_item"]) == (40, pytest.approx(0.18, abs=1e-3))
    per_model = {m["model"]: m for m in b["cost"]["models"]}
    assert per_model["model-00"]["gpu_hours"] == pytest.approx(2 / 3600, abs=1e-6)
    assert per_model["model-01"]["tasks"][0]["gpu_hours"] == pytest.approx(0.9 / 3600, abs=1e-6)
    assert per_model["model-01"]["tasks"][0]["gpu_s_per_item"] is None  # no n_samples said
    assert b["cost"]["gpu_hours"] == pytest.approx(4 / 3600, abs=1e-6)
    text = CliRunner().invoke(cli, ["status", single.invocation_id])
    assert "cost: 0.00333 GPU-h, 0.00167 node-h" in text.output
    # Ended jobs' usage is cached: asking again needs sacct only for the states it needs.
    calls = len(recorded.sacct_calls)
    CliRunner().invoke(cli, ["results", "--cost", single.invocation_id])
    assert len(recorded.sacct_calls) == calls


def test_every_attempt_of_a_model_counts(tmp_path: Path, recorded: RecordedSlurm) -> None:
    from hpceval.runs.jobs import JobEntry, append_jobs

    run = submit_configs(configs(tmp_path), recorded)  # 15
    append_jobs(run.run_dir, "slurm", [JobEntry("21", "slurm", "main", (0,), False,
                                                run.run_dir.stat().st_mtime, "resume")])
    out = CliRunner().invoke(cli, ["results", "--cost", "--json", run.invocation_id])
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.output)
    assert (row["task"], row["jobs"], row["unknown_jobs"]) == ("(all jobs)", 2, 1)  # 21 not in file
    assert row["gpu_hours"] == pytest.approx(4 * 3 / 3600, abs=1e-6)
    assert len(recorded.sacct_calls) == 1


def test_running_jobs_are_asked_again_ended_ones_are_not(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    fake = RecordedSlurm("sacct-22.05-cost-running.txt")
    fake._ids = itertools.count(18)
    monkeypatch.setattr("hpceval.backends.slurm.client.CommandSlurmClient", lambda **_: fake)
    run = submit_configs(configs(tmp_path), fake)  # 18: RUNNING, 2 s so far
    first = json.loads(CliRunner().invoke(cli, ["status", "--json", run.invocation_id]).output)
    assert first[0]["cost"]["gpu_hours"] == pytest.approx(4 * 2 / 3600, abs=1e-6)
    fake.text = (SACCT_SAMPLES / "sacct-22.05-cost-ended.txt").read_text()  # 18 ended after 8 s
    second = json.loads(CliRunner().invoke(cli, ["status", "--json", run.invocation_id]).output)
    assert second[0]["cost"]["gpu_hours"] == pytest.approx(4 * 8 / 3600, abs=1e-6)
    CliRunner().invoke(cli, ["status", "--json", run.invocation_id])
    assert len(fake.sacct_calls) == 2  # ended and cached: no third call


def test_a_local_run_is_charged_from_the_runners_own_record(tmp_path: Path) -> None:
    """No scheduler: the local backend's usage reads the line local.sh wrote per attempt
    (models/<key>/local.usage); an attempt still running (no line yet) is unknown."""
    from hpceval.backends import JobEntry
    from hpceval.contract import LOCAL_USAGE_FILE, model_dir
    from hpceval.records import ModelRecord, Role, RunRecord
    from hpceval.runs.cost import UsageBook, run_cost
    from hpceval.runs.jobs import Jobs
    from hpceval.runs.state import Tracker

    run = RunRecord("r", (ModelRecord("m", 0),))
    first = JobEntry("local-41", "local", Role.MAIN, (0,), False, 1000.0)
    second = JobEntry("local-42", "local", Role.MAIN, (0,), False, 2000.0)
    model_dir(tmp_path, "m").mkdir(parents=True)
    # local-42 is a reused pid: its line here is from before this attempt was submitted
    (model_dir(tmp_path, "m") / LOCAL_USAGE_FILE).write_text(
        "local-41 1000 1360 2\nlocal-42 1500 1600 2\n")
    jobs = Jobs("local", (first, second))
    book = UsageBook()
    from hpceval.runs.cost import collect_usage, run_jobs

    collect_usage(Tracker().backend, run_jobs(tmp_path, run, jobs), book)
    cost = run_cost(tmp_path, run, jobs, book)
    assert cost["accounted"] is True
    assert cost["gpu_hours"] == pytest.approx(2 * 360 / 3600)
    assert cost["node_hours"] == pytest.approx(360 / 3600)
    assert cost["unknown_jobs"] == 1  # this local-42 still runs


def test_a_sweep_judge_job_is_charged_as_its_own_row(tmp_path: Path,
                                                     recorded: RecordedSlurm) -> None:
    """Judge job 15 (2 nodes x 2 GPUs, 3 s in the recording), array 16 (1 GPU, 2 s a task)."""
    import dataclasses

    from hpceval.config.schema import AuxiliaryDeploymentSpec

    judge = AuxiliaryDeploymentSpec(type="command", command="exec j --port $PORT",
                                    served_model_name="j", runtime="host", gpus_per_instance=0,
                                    scope="sweep")
    loaded = [dataclasses.replace(c, spec=dataclasses.replace(
        c.spec, auxiliary_deployments={"judge": judge}))
        for c in configs(tmp_path, 2, execution={"type": "slurm"})]
    sweep = submit_configs(loaded, recorded)
    assert list(sweep.job_ids) == ["16", "17", "15"]  # array, aggregation, judge (first)
    out = CliRunner().invoke(cli, ["status", "--json", sweep.invocation_id])
    assert out.exit_code == 0, out.output
    (run,) = json.loads(out.output)
    per_model = {m["model"]: m for m in run["cost"]["models"]}
    assert per_model["auxiliary/judge"]["gpu_hours"] == pytest.approx(12 / 3600, abs=1e-6)
    assert per_model["auxiliary/judge"]["jobs"] == 1
    assert run["cost"]["gpu_hours"] == pytest.approx((12 + 2 + 2) / 3600, abs=1e-6)
    assert len(recorded.sacct_calls) == 1
