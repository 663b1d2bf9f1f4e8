"""What the server did, in `status` (live, per running model) and `info` (per task, a total per
model): from each task's runtime.json, with a bad file shown as unknown and the reason."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.runs import configs, finish_task
from support.slurm import FakeSlurm

from hpceval import api
from hpceval.cli.main import cli
from hpceval.results.runtime import TaskStats, write_runtime
from hpceval.runs.submit import submit_configs

ONE, TWO = "ut-harness.ut_one", "ut-harness.ut_two"


def stats(requests: int, *, tokens: int = 20, cached: int = 0) -> dict[str, Any]:
    """The proxy's own file for `requests` answers (TaskStats, as the job writes it)."""
    counter = TaskStats()
    answer = {"choices": [{"finish_reason": "stop", "message": {"content": "x"}}],
              "usage": {"prompt_tokens": 50, "completion_tokens": tokens}}
    for i in range(requests):
        counter.record(200, 0.5, i < cached, answer)
    data = counter.to_json()
    data["tokens_per_s"] = 40.0  # the span of a test's answers is ~0 s: a fixed, known rate
    return data


def task(run_dir: Path, model: str, key: str) -> Path:
    folder = run_dir / "models" / model / "tasks" / key
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def sweep(tmp_path: Path, fake: FakeSlurm, monkeypatch: pytest.MonkeyPatch) -> Path:
    """model-00 running (ut_one done, ut_two under way), model-01 queued; the CLI's scheduler
    is the fake."""
    result = submit_configs(configs(tmp_path, 2), fake, aggregate=False)
    job = result.job_ids[0]
    fake.states[f"{job}_0"], fake.states[f"{job}_1"] = "RUNNING", "PENDING"
    monkeypatch.setattr("hpceval.backends.slurm.client.CommandSlurmClient", lambda **_: fake)
    finish_task(result.run_dir, "model-00", ONE)
    write_runtime(task(result.run_dir, "model-00", ONE), stats(10, cached=4))
    write_runtime(task(result.run_dir, "model-00", TWO), stats(3))
    return result.run_dir


def test_status_shows_the_running_model_s_requests_and_tokens_per_s(
        sweep: Path, fake: FakeSlurm) -> None:
    before = len(fake.sacct_calls)
    text = CliRunner().invoke(cli, ["status", str(sweep)])
    assert text.exit_code == 0, text.output
    lines = text.output.splitlines()
    row = next(i for i, x in enumerate(lines) if x.strip().startswith("model-00"))
    assert lines[row + 1].strip() == "served 13 requests, 80.0 tokens/s"
    assert "served" not in "".join(x for x in lines if "model-01" in x)
    as_json = CliRunner().invoke(cli, ["status", str(sweep), "--json"])
    models = {m["model"]: m for m in json.loads(as_json.output)[0]["models"]}
    assert models["model-00"]["served"] == {"requests": 13, "tokens_per_s": 80.0, "tasks": 2,
                                            "unread": 0, "unknown": {}, "server": None,
                                            "judges": {}, "ledger": None}
    assert models["model-01"]["served"] is None  # queued: nothing served
    assert len(fake.sacct_calls) - before == 2  # one scheduler call per status, files aside


def test_status_shows_a_bad_runtime_json_as_unknown(sweep: Path) -> None:
    (task(sweep, "model-00", TWO) / "runtime.json").write_text('{"schema": 1, "requ')
    as_json = CliRunner().invoke(cli, ["status", str(sweep), "--json"])
    served = json.loads(as_json.output)[0]["models"][0]["served"]
    assert (served["requests"], served["tasks"]) == (10, 1)
    assert served["unknown"] == {TWO: "runtime.json is not valid JSON (truncated?)"}
    text = CliRunner().invoke(cli, ["status", str(sweep), "--no-tasks"]).output
    assert f"served 10 requests, 40.0 tokens/s; {TWO}: runtime.json is not valid JSON" in text


def test_reads_per_refresh_are_bounded_and_finished_tasks_read_once(
        sweep: Path, fake: FakeSlurm, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("hpceval.api._track.LIVE_READS", 1)
    tracking = api.track([str(sweep)], client=fake)
    (first,) = tracking.refresh(force=True)
    assert first.served["model-00"]["unread"] == 1  # ut_one read (and kept: it is done)
    (second,) = tracking.refresh(force=True)
    assert second.served["model-00"] == {"requests": 13, "tokens_per_s": 80.0, "tasks": 2,
                                         "unread": 0, "unknown": {}, "server": None,
                                         "judges": {}, "ledger": None}


def test_an_old_file_adds_its_requests_but_not_its_rate(sweep: Path, fake: FakeSlurm) -> None:
    """tokens/s is live: only the files written in the last minute (the tasks served now)."""
    path = task(sweep, "model-00", ONE) / "runtime.json"
    os.utime(path, (path.stat().st_atime, path.stat().st_mtime - 3600))
    (found,) = api.track([str(sweep)], client=fake).refresh(force=True)
    assert (found.served["model-00"]["requests"], found.served["model-00"]["tokens_per_s"]) \
        == (13, 40.0)


def test_the_watch_view_has_a_served_column(sweep: Path, fake: FakeSlurm) -> None:
    from rich.console import Console

    from hpceval.cli.track_cmds import _served_texts
    from hpceval.runs.display import rich_states

    found = api.track([str(sweep)], client=fake).refresh(force=True)
    console = Console(record=True, width=250)
    console.print(rich_states([f.state for f in found], None, _served_texts(found)))
    shown = console.export_text()
    assert "served" in shown and "served 13 requests, 80.0 tokens/s" in shown


def test_info_shows_each_task_and_a_total_per_model(sweep: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    data = {**stats(2), "infra_errors": 1, "infra_causes": {"504 timed out": 1}}
    write_runtime(task(sweep, "model-01", ONE), data)
    foreign = task(sweep, "model-01", TWO)
    write_runtime(foreign, stats(5))
    if os.geteuid() == 0:
        os.chown(foreign / "runtime.json", 65534, 65534)
    else:  # the same check: the file's owner is not among this process's uids
        uid = (foreign / "runtime.json").stat().st_uid
        monkeypatch.setattr("hpceval.trust.my_uids", lambda: frozenset({uid + 1}))
    out = CliRunner().invoke(cli, ["info", str(sweep)])
    assert out.exit_code == 0, out.output
    lines = [x for x in out.output.splitlines() if x.startswith("runtime ")]
    assert lines[0].startswith(f"runtime    model-00 {ONE}: 10 requests (4 cached), latency "
                               "p50/p90/p99 500/500/500 ms, 40.0 tokens/s, 500 prompt / "
                               "200 completion tokens, finish stop 10")
    assert lines[2] == ("runtime    model-00 total: 13 requests, 650 prompt / 260 completion "
                        "tokens, 0 errors over 2 task(s)")
    assert lines[3].endswith(", 1 failed on the infrastructure (504 timed out 1)")
    assert lines[4].startswith(f"runtime    model-01 {TWO}: unknown: runtime.json is owned by")
    assert lines[5] == ("runtime    model-01 total: 2 requests, 100 prompt / 40 completion "
                        "tokens, 0 errors, 1 infra errors over 1 task(s); 1 runtime.json unknown")
    as_json = json.loads(CliRunner().invoke(cli, ["info", str(sweep), "--json"]).output)
    model = as_json["runtime"]["model-01"]
    assert model["tasks"][ONE]["infra_errors"] == 1
    assert "not by you" in model["tasks"][TWO]["unknown"]
    assert model["total"] == {"tasks": 1, "unknown": 1, "requests": 2, "errors": 0,
                              "cached": 0, "prompt_tokens": 100, "completion_tokens": 40,
                              "retries": 0, "infra_errors": 1}


def test_info_of_a_run_without_runtime_files_says_so(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    out = CliRunner().invoke(cli, ["info", result.invocation_id])
    assert f"runtime    solo {ONE}: unknown: no runtime.json (not started yet" in out.output
    assert "runtime    solo total: no runtime.json to sum" in out.output
    as_json = json.loads(CliRunner().invoke(cli, ["info", result.invocation_id, "--json"]).output)
    assert as_json["runtime"]["solo"]["tasks"] == {ONE: None, TWO: None}
